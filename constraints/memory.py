"""Memory-fit families: HBM per GPU, and the capacity of each offload tier, for the first and
the last pipeline stage, and for the layouts with a lighter first stage the middle ones
(planner/cost/memory.py's stage_memory, re-expressed in the problem's memory unit, 1 KiB
unless its scale needs coarser: constraints.tables). Where the middle stages hold as many
blocks as the first, the first bounds them: the same blocks, its embedding besides, and one
micro-batch more in flight (min(n, p) against min(n, p − 1)).

First stage of k blocks, with m = min(n, p) micro-batches in flight and the interleave factor
f = 1 + (p−1)/(p·v) for v > 1: state + k·f·m·A_stored + min(R, k)·A_working + rebuilt + reserve
≤ usable HBM (R: the stack's resident offload blocks). Multiplying by p·v for v > 1 makes every
coefficient an integer; m·A_stored is one AddMultiplicationEquality. A middle stage of k blocks
(layouts with a lighter first stage, p > 2) holds m' = min(n, p − 1) micro-batches, in the same
form: state + k·f·m'·A_stored + min(R, k)·A_working + rebuilt + reserve. The last stage, of its
own block count, holds one micro-batch and the logits. Partial recompute (r blocks per stage,
fewer than the lightest stage holds) subtracts r·(A_none − A_full) per micro-batch in flight
(two products) and adds the block a full recompute rebuilds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.scales import NEED_CAP_BYTES
from constraints.tables import TableBuilder
from constraints.variables import Variables


@dataclass(frozen=True)
class MemoryNeeds:
    """Memory per GPU a strategy needs, in ``unit_bytes`` units: usable HBM (the reserve
    included) and each offload tier. The fit families bound them by the system's capacities;
    a minimum-hardware query minimises one of them instead."""

    hbm: cp_model.IntVar | int
    offload: tuple[cp_model.IntVar | int, ...]
    unit_bytes: float


def add_memory_fit(variables: Variables, tables: TableBuilder) -> MemoryNeeds:
    ctx, m = tables.ctx, variables.model
    state_first, off_first = tables.state("first")
    state_last, off_last = tables.state("last")
    stored, working, act_tiers, rebuilt = tables.activations()
    logits = tables.logits()
    unit = tables.memory_unit_bytes
    reserve = math.ceil(ctx.hbm_reserve_bytes / unit)

    micro_batches = variables.micro_batch_count()
    pp_value = variables.new_int("pp_value", max(variables.domains["pp"]), 1)
    m.Add(pp_value == variables.value("pp"))
    in_flight = variables.new_int("in_flight", max(variables.domains["pp"]))
    m.AddMinEquality(in_flight, [micro_batches, pp_value])

    def product(name, table):
        return _product(variables, name, in_flight, table)

    def need(name: str, family: str, capacity: int) -> cp_model.IntVar | int:
        """The need variable; just the capacity when the fit family is always on (constants
        propagate better: measured 20 % faster solves on benchmarks/plan_latency.py)."""
        if variables.always_on(family):
            return capacity
        return variables.new_int(name, math.floor(NEED_CAP_BYTES / unit))

    usable_bytes = ctx.system.hbm.capacity_gib * ctx.hbm_usable_fraction * (1 << 30)
    usable = math.floor(usable_bytes / unit)

    resident = ctx.stack.offload_resident_blocks
    stored_in_flight = product("stored_in_flight", stored)
    saved, saved_in_flight, partial_rebuilt = _partial_recompute_terms(variables, tables, product)
    hbm_need = need("hbm_need", "hbm", usable)
    if variables.partial_recompute:
        # Redundant (a block saves at most what it stores, r < k): the activation terms stay
        # non-negative, which the relaxation of the products cannot see by itself.
        for layout, chosen in zip(variables.space.layouts, variables.onehot["layout"], strict=True):
            lighter = layout.lightest - 1
            m.Add(saved_in_flight <= lighter * stored_in_flight).OnlyEnforceIf(chosen)
            m.Add(saved <= lighter * stored).OnlyEnforceIf(chosen)

    def fit_held(cases, state, stored_held, saved_held) -> None:
        """The HBM rows of a stage that holds micro-batches in flight (the first, the middle)."""
        for literals, scale, act_coef, k in cases:
            m.Add(
                scale * (state + rebuilt + partial_rebuilt)
                + act_coef * stored_held
                - (act_coef // k) * saved_held
                + scale * min(resident, k) * working
                <= scale * (hbm_need - reserve)
            ).OnlyEnforceIf(literals)

    fit_held(_stage_cases(variables, "first"), state_first, stored_in_flight, saved_in_flight)
    middles = list(_stage_cases(variables, "middle"))
    if middles:
        state_middle, off_middle = tables.state("middle")
        middle_in_flight = variables.new_int("middle_in_flight", max(variables.domains["pp"]))
        m.AddMinEquality(middle_in_flight, [micro_batches, pp_value - 1])
        stored_middle = _product(variables, "stored_middle_in_flight", middle_in_flight, stored)
        saved_middle = (
            _product(variables, "saved_middle_in_flight", middle_in_flight, saved)
            if variables.partial_recompute
            else 0
        )
        fit_held(middles, state_middle, stored_middle, saved_middle)
    for layout, chosen in zip(variables.space.layouts, variables.onehot["layout"], strict=True):
        k = layout.last
        m.Add(
            state_last
            + rebuilt
            + partial_rebuilt
            + logits
            + k * stored
            - saved
            + min(resident, k) * working
            <= hbm_need - reserve
        ).OnlyEnforceIf(chosen)
    hbm = variables.family("hbm", f"HBM fit ({ctx.system.hbm.capacity_gib:g} GiB per GPU)")
    if not isinstance(hbm_need, int):
        m.Add(hbm_need <= usable).OnlyEnforceIf(hbm)

    offload_needs = []
    for tier, spec in enumerate(ctx.system.offload_tiers, start=1):
        act = act_tiers[tier - 1]
        act_in_flight = product(f"tier{tier}_in_flight", act)
        capacity = math.floor(spec.capacity_gib * (1 << 30) / unit)
        tier_need = need(f"offload{tier}_need", f"offload{tier}", capacity)
        for literals, scale, act_coef, _ in _stage_cases(variables, "first"):
            m.Add(
                scale * off_first[tier - 1] + act_coef * act_in_flight <= scale * tier_need
            ).OnlyEnforceIf(literals)
        for layout, chosen in zip(variables.space.layouts, variables.onehot["layout"], strict=True):
            m.Add(off_last[tier - 1] + layout.last * act <= tier_need).OnlyEnforceIf(chosen)
        if middles:
            act_middle = _product(variables, f"tier{tier}_middle_in_flight", middle_in_flight, act)
            for literals, scale, act_coef, _ in middles:
                m.Add(
                    scale * off_middle[tier - 1] + act_coef * act_middle <= scale * tier_need
                ).OnlyEnforceIf(literals)
        family = variables.family(
            f"offload{tier}", f"offload tier {tier} capacity ({spec.capacity_gib:g} GiB)"
        )
        if not isinstance(tier_need, int):
            m.Add(tier_need <= capacity).OnlyEnforceIf(family)
        offload_needs.append(tier_need)
    return MemoryNeeds(hbm=hbm_need, offload=tuple(offload_needs), unit_bytes=unit)


def _partial_recompute_terms(variables: Variables, tables: TableBuilder, product):
    """(activations saved per micro-batch, the same times the micro-batches in flight, the
    block rebuilt during a backward) by partial recompute; zeros without it."""
    partial = variables.partial_literal()
    if partial is None:
        return 0, 0, 0
    saved_per_block, rebuilt_full = tables.partial_activations()
    r = variables.recomputed_blocks()
    saved = variables.new_int("partial_saved", variables.ub(r) * variables.ub(saved_per_block))
    variables.model.AddMultiplicationEquality(saved, [r, saved_per_block])
    rebuilt = variables.new_int("partial_rebuilt", variables.ub(rebuilt_full))
    variables.model.Add(rebuilt == rebuilt_full).OnlyEnforceIf(partial)
    variables.model.Add(rebuilt == 0).OnlyEnforceIf(partial.Not())
    return saved, product("saved_in_flight", saved), rebuilt


def _product(
    variables: Variables, name: str, count: cp_model.IntVar, table: cp_model.IntVar | int
) -> cp_model.IntVar:
    """count · table (AddMultiplicationEquality)."""
    result = variables.new_int(name, variables.ub(count) * variables.ub(table))
    variables.model.AddMultiplicationEquality(result, [count, table])
    return result


def _stage_cases(variables: Variables, stage: str):
    """(literals, scale, activation coefficient, blocks k) per (layout, interleave) for the
    first stage, or the middle stages where the first does not bound them (a lighter first
    stage with p > 2): the stage's inequality multiplied by ``scale`` (p·v with interleaving,
    else 1), its in-flight activations by k·(p·v + p − 1) (k without interleaving)."""
    for layout, v, literals in variables.layout_interleaves():
        if stage == "middle" and not (layout.pp > 2 and layout.lighter_first):
            continue
        p, k = layout.pp, layout.stage_blocks(stage)
        if v == 1:
            yield literals, 1, k, k
        else:
            yield literals, p * v, k * (p * v + p - 1), k
