"""Memory-fit families: HBM per GPU, and the capacity of each offload tier, for the first and
the last pipeline stage (planner/cost/memory.py's stage_memory, re-expressed in the
problem's memory unit, 1 KiB unless its scale needs coarser: constraints.tables).

First stage, with m = min(n, p) micro-batches in flight and the interleave factor
f = 1 + (p−1)/(p·v) for v > 1: state + (L/p)·f·m·A_stored + min(3, L/p)·A_working + rebuilt
+ reserve ≤ usable HBM. Multiplying by p²·v (p for v = 1) makes every coefficient an integer;
m·A_stored is one AddMultiplicationEquality. The last stage holds one micro-batch and the logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.tables import NEED_CAP_BYTES, TableBuilder
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
    ctx, m, layers = tables.ctx, variables.model, tables.ctx.model.layers
    state_first, off_first = tables.state(last=False)
    state_last, off_last = tables.state(last=True)
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
        result = variables.new_int(name, variables.ub(in_flight) * variables.ub(table))
        m.AddMultiplicationEquality(result, [in_flight, table])
        return result

    def need(name: str, family: str, capacity: int) -> cp_model.IntVar | int:
        """The need variable; just the capacity when the fit family is always on (constants
        propagate better: measured 20 % faster solves on benchmarks/plan_latency.py)."""
        if variables.always_on(family):
            return capacity
        return variables.new_int(name, math.floor(NEED_CAP_BYTES / unit))

    usable_bytes = ctx.system.hbm.capacity_gib * ctx.job.hbm_usable_fraction * (1 << 30)
    usable = math.floor(usable_bytes / unit)

    pp_values, v_values = variables.domains["pp"], variables.domains["interleave"]
    stored_in_flight = product("stored_in_flight", stored)
    hbm_need = need("hbm_need", "hbm", usable)
    for (a, c), pair in variables.pairs.items():
        p, v = pp_values[a], v_values[c]
        scale, act_coef = (p, layers) if v == 1 else (p * p * v, layers * (p * v + p - 1))
        work_coef = scale // p * min(3 * p, layers)
        m.Add(
            scale * (state_first + rebuilt) + act_coef * stored_in_flight + work_coef * working
            <= scale * (hbm_need - reserve)
        ).OnlyEnforceIf(pair)
    for p, chosen in zip(pp_values, variables.onehot["pp"], strict=True):
        m.Add(
            p * (state_last + rebuilt + logits) + layers * stored + min(3 * p, layers) * working
            <= p * (hbm_need - reserve)
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
        for (a, c), pair in variables.pairs.items():
            p, v = pp_values[a], v_values[c]
            scale, act_coef = (p, layers) if v == 1 else (p * p * v, layers * (p * v + p - 1))
            m.Add(
                scale * off_first[tier - 1] + act_coef * act_in_flight <= scale * tier_need
            ).OnlyEnforceIf(pair)
        for p, chosen in zip(pp_values, variables.onehot["pp"], strict=True):
            m.Add(p * off_last[tier - 1] + layers * act <= p * tier_need).OnlyEnforceIf(chosen)
        family = variables.family(
            f"offload{tier}", f"offload tier {tier} capacity ({spec.capacity_gib:g} GiB)"
        )
        if not isinstance(tier_need, int):
            m.Add(tier_need <= capacity).OnlyEnforceIf(family)
        offload_needs.append(tier_need)
    return MemoryNeeds(hbm=hbm_need, offload=tuple(offload_needs), unit_bytes=unit)
