"""The brute-force oracle: every strategy of the raw product of knob values, evaluated by the
vectorised cost model, filtered by the validity rules (planner.space.rules) and the memory limits
only, ranked by step time.

It is the reference the CP-SAT planner is tested against and the baseline of the latency
benchmark; it is exponential in the number of knobs, so only small problems finish quickly.

Its space (``raw_space``) is built here, not by planner.space.search_space: the solver's space drops
values that have no effect (planner.space.search_space, constraints.structure.add_canonical) or that
a rule forbids, and an oracle that shared those reductions could not check them (issue 40: a cut
that fixed ZeRO at stage 0 whenever dp = 1 hid plans up to 4.4× faster from both). The raw space
keeps only the stated caps of the searched space (reductions.stated_caps: micro-batch,
interleave, cp, stage skew, offload share steps), which the solver reports with its answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

import hardware_catalog
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.experts import expert_tp_size
from planner.cost.knobs import Knobs
from planner.cost.step import StepTerms, evaluate_terms
from planner.space.layouts import searched_layouts, with_slot_interleaves
from planner.space.rules import MIN_OFFLOAD_BLOCKS, divisors
from planner.space.search_space import (
    KNOBS,
    SearchSpace,
    default_max_cp,
    encoded_pins,
    offload_domain,
    pinned_values,
    strategy_from_values,
)
from planner.specs import (
    PLACEMENT_CODES,
    RECOMPUTE_CODES,
    JobSpec,
    ModelSpec,
    Strategy,
    SystemSpec,
    offload_eighths,
)
from planner.specs.quantities import DEFAULT_MAX_STAGE_SKEW, DEFAULT_OFFLOAD_STEP, OFFLOAD_STEPS

STRUCTURAL_KNOBS = (
    "tp_column",
    "tp_depth",
    "cp",
    "ep",
    "expert_tp",
    "micro_batch",
    "interleave",
    "placement",
)
"""The knobs besides tp and the layout that the structural rules read (structure_mask)."""
SWITCH_KNOBS = tuple(k for k in KNOBS if k not in ("tp", "pp", "layout", *STRUCTURAL_KNOBS))
"""The other knobs: recompute, partial recompute, switches, ZeRO, offloads."""


@dataclass(frozen=True)
class Ranked:
    step_time_s: float
    strategy: Strategy


def raw_space(
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int,
    pins: dict[str, int] | None = None,
    max_micro_batch: int = 64,
    max_interleave: int | None = None,
    max_cp: int | None = None,
    max_stage_skew: int = DEFAULT_MAX_STAGE_SKEW,
    offload_step: int = DEFAULT_OFFLOAD_STEP,
) -> SearchSpace:
    """The raw product of knob values on ``gpus`` GPUs inside the stated caps (the same keyword
    arguments as planner.queries.plan): every divisor of the GPU count for tp, cp and pp, every
    recompute mode (selective too under flash attention), both values of every switch (the
    overlaps even where the stack has none), both rank orders, every ZeRO stage, every
    offload share in steps of ``offload_step`` eighths in every tier, partial recompute of up to
    the largest stage's blocks. Nothing that has no effect is left out, and no rule prunes a
    value: valid_mask applies the rules."""
    pins = encoded_pins(pins)
    seq_len = job.seq_len_for(model)
    # AxoNN's grid knobs exist only where the stack runs AxoNN's layers (an input, like ep for
    # a dense model); there X and Z range over every divisor, independently.
    axonn = hardware_catalog.load_stack(job.stack).tp_form == "axonn"
    grid = tuple(divisors(gpus)) if axonn else (1,)
    cp_limit = default_max_cp(seq_len) if max_cp is None else max_cp
    offload = offload_domain(system, offload_step, pins)
    domains: dict[str, tuple[int, ...]] = {
        "tp": tuple(divisors(gpus)),
        "tp_column": grid,
        "tp_depth": grid,
        "cp": tuple(c for c in divisors(gpus) if c <= cp_limit),
        "pp": tuple(divisors(gpus)),
        "dp": tuple(divisors(gpus)),
        "ep": tuple(divisors(model.experts)) if model.is_moe else (1,),
        "expert_tp": (0, 1) if model.is_moe else (0,),
        "micro_batch": tuple(b for b in divisors(job.global_batch) if b <= max_micro_batch),
        "interleave": tuple(v for v in divisors(model.layers) if v <= (max_interleave or v)),
        "recompute": tuple(RECOMPUTE_CODES.values()),
        "sequence_parallel": (0, 1),
        "zero_stage": (0, 1, 2, 3),
        "offload_weights": offload,
        "offload_activations": offload,
        "offload_optimizer": offload,
        "dp_overlap": (0, 1),
        "tp_overlap": (0, 1),
        "placement": tuple(PLACEMENT_CODES.values()),
    }
    # Pinned values join the domains before the layouts are made, so that a pinned interleave
    # beyond max_interleave has its slot layouts, as in build_search_space.
    for name, value in pins.items():
        if name in domains and not name.startswith("offload") and value not in domains[name]:
            domains[name] = tuple(sorted({*domains[name], value}))
    # Megatron-Core's embedding/loss slots (structure_mask admits them with their interleave)
    domains["interleave"] = with_slot_interleaves(
        domains["interleave"], model.layers, domains["pp"], max_interleave, max_stage_skew
    )
    layouts = searched_layouts(model.layers, domains["pp"], domains["interleave"], max_stage_skew)
    domains["layout"] = tuple(range(len(layouts)))
    largest = max((layout.last for layout in layouts), default=1)
    # A recompute pin without a recompute_layers pin means every block (or none) recomputed.
    pinned_whole = "recompute" in pins and "recompute_layers" not in pins
    domains["recompute_layers"] = (0,) if pinned_whole else tuple(range(largest))
    if "recompute_layers" in pins:
        domains["recompute_layers"] = tuple(
            sorted({*domains["recompute_layers"], pins["recompute_layers"]})
        )
    return SearchSpace(
        gpus=gpus,
        layers=model.layers,
        domains=domains,
        pins=pins,
        max_gpus=gpus,
        layouts=layouts,
    )


def structure_mask(ctx: CostContext, space: SearchSpace, k: dict[str, np.ndarray]) -> np.ndarray:
    """The rules of planner.space.rules (strategy_violations) on the structural knobs
    (STRUCTURAL_KNOBS with tp and the layout), vectorised: the factorization, the batch, the
    splits of the heads and the sequence, interleaving, the rank order and the expert layout."""
    m, job = ctx.model, ctx.job
    t, c, p = k["tp"], k["cp"], k["pp"]
    d = space.gpus // (t * c * p)
    b, v = k["micro_batch"], k["interleave"]
    ok = (t * c * p * d == space.gpus) & (job.global_batch % np.maximum(d * b, 1) == 0)
    ok &= (c == 1) | (ctx.seq_len % (2 * c) == 0)
    ok &= np.isin(t, [x for x in divisors(m.heads) if m.splits_over(x)])
    n = job.global_batch // np.maximum(d * b, 1)
    even = (k["first_blocks"] == k["middle_blocks"]) & (k["middle_blocks"] == k["last_blocks"])
    # a slot layout is searched with its own interleave only (Layout.admits)
    slot_v = np.array([x.interleave for x in space.layouts])[k["layout"]]
    equal_chunks = (v == 1) | ((p > 1) & even & (k["first_blocks"] % v == 0) & (n % p == 0))
    ok &= np.where(slot_v > 0, (v == slot_v) & (n % p == 0), equal_chunks)
    ok &= (k["placement"] == 0) | (c == 1)
    if m.is_moe:
        e = k["ep"]
        etp = expert_tp_size(t, k["expert_tp"])
        ok &= (m.experts % e == 0) & (t % etp == 0) & (m.expert_width % etp == 0)
        ok &= (t * c * d) % (e * etp) == 0
        ok &= (e == 1) | (k["placement"] == 0)
    else:
        ok &= (k["ep"] == 1) & (k["expert_tp"] == 0)
    if ctx.calculon:  # rules.calculon_violations
        ok &= (c == 1) & even & (k["first_blocks"] == m.layers / p)
        ok &= (m.hidden % t == 0) & (m.ffn_hidden % t == 0) & ((b * ctx.seq_len) % t == 0)
    ok &= _axonn_mask(ctx, t, k["tp_column"], k["tp_depth"], b, k["placement"])
    # A stated cap (reductions.stated_caps): TP inside one scale-up domain unless the
    # system allows otherwise.
    # Under an axonn stack the cap is on the column·row groups X·Y = t/Z: the depth group
    # shards weights like ZeRO-3 and may leave the domain (Megatron-AxoNN's Frontier script:
    # Z = 256).
    if not ctx.system.tp_across_domain and len(ctx.system.network_tiers) > 1:
        inside = t // k["tp_depth"] if ctx.stack.tp_form == "axonn" else t
        ok &= inside <= (ctx.system.network_tiers[0].domain_gpus or 0)
    return ok


def _axonn_mask(ctx: CostContext, t, x, z, b, placement) -> np.ndarray:
    """rules.axonn_violations on the structural knobs, vectorised: a grid beyond X = Z = 1 only
    under an axonn stack, for a dense model with multi-head or grouped-query attention, X·Z
    dividing tp, X the hidden size and the FFN, Y = t/(X·Z) the heads, KV heads and FFN (t at
    most the KV heads), Z each layer's block and the micro-batch; an axonn stack's rank order."""
    m = ctx.model
    axonn = ctx.stack.tp_form == "axonn"
    beyond = x * z > 1
    if not axonn:
        return ~beyond
    y = np.maximum(t // (x * z), 1)  # rows with x·z ∤ t fail the first rule
    ok = (t % (x * z) == 0) & (m.hidden % x == 0) & (m.ffn_hidden % x == 0)
    ok &= (m.heads % y == 0) & (m.kv_heads % y == 0) & (m.ffn_hidden % y == 0)
    ok &= t <= m.kv_heads
    block_ok = (m.hidden * m.hidden // (x * y)) % z == 0
    ok &= block_ok & ((m.hidden * m.ffn_hidden // (x * y)) % z == 0)
    ok &= b % z == 0
    if m.is_moe or m.is_latent_attention:
        ok &= False
    return (~beyond | ok) & (placement == PLACEMENT_CODES["tp-pp-dp"])


def switch_mask(ctx: CostContext, space: SearchSpace, k: dict[str, np.ndarray]) -> np.ndarray:
    """The rules that involve the other knobs, vectorised: MoE with tp > 1 needs sequence
    parallelism; partial recompute (recompute code 0 with recompute_layers r > 0) is modelled
    without offloading and with r a multiple of the interleave; and the user's pins."""
    t, r, v = k["tp"], k["recompute_layers"], k["interleave"]
    ok = np.ones(np.shape(r), dtype=bool)
    if ctx.model.is_moe:
        ok &= (t == 1) | (k["sequence_parallel"] == 1)
    ok &= k["zero_stage"] <= ctx.stack.max_zero_stage  # rules.stack_violations
    if not ctx.stack.interleaved_schedule:
        ok &= v == 1
    if ctx.stack.tp_form == "axonn":  # rules.axonn_violations
        ok &= k["zero_stage"] <= 1
        ok &= k["sequence_parallel"] == 0
        ok &= (k["offload_weights"] == 0) & (k["offload_activations"] == 0)
        ok &= k["offload_optimizer"] == 0
    offloaded = (k["offload_weights"] > 0) | (k["offload_activations"] > 0)
    offloaded |= k["offload_optimizer"] > 0
    ok &= (r == 0) | ((k["recompute"] == 0) & ~offloaded & (r % v == 0))
    # A stated cap: partial recompute of fewer blocks than the lightest stage holds.
    ok &= r < np.minimum(k["first_blocks"], k["last_blocks"])
    if ctx.calculon:  # rules.calculon_violations
        ok &= (k["zero_stage"] <= 1) & (r == 0)
        for kind in ("weights", "activations", "optimizer"):
            code = k[f"offload_{kind}"]
            ok &= (code == 0) | (offload_eighths(code) == OFFLOAD_STEPS)
        ok &= ~offloaded | (k["first_blocks"] >= MIN_OFFLOAD_BLOCKS)
    for name, value in space.pins.items():
        knob, allowed = pinned_values(space, name, value)
        ok &= np.isin(k[knob], allowed)
    return ok


def valid_mask(ctx: CostContext, space: SearchSpace, k: dict[str, np.ndarray]) -> np.ndarray:
    """Every rule of planner.space.rules (strategy_violations), vectorised, and the user's pins."""
    return structure_mask(ctx, space, k) & switch_mask(ctx, space, k)


def chunk_values(
    space: SearchSpace, tp: int, layout: int, rows: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``rows`` with tp, the layout and the quantities they fix (pp, blocks per stage, dp)."""
    count = len(next(iter(rows.values())))
    chosen = space.layouts[layout]
    values = dict(rows)
    values["tp"] = np.full(count, tp)
    values["pp"] = np.full(count, chosen.pp)
    values["layout"] = np.full(count, layout)
    values["first_blocks"] = np.full(count, chosen.first)
    values["middle_blocks"] = np.full(count, chosen.blocks)
    values["last_blocks"] = np.full(count, chosen.last)
    # a slot layout's largest virtual stage (Strategy.chunk_blocks); 0: blocks / v
    chunk = chosen.chunk(chosen.interleave) if chosen.interleave else 0
    values["chunk_blocks"] = np.full(count, chunk)
    values["dp"] = space.gpus // (tp * chosen.pp * values["cp"])
    return values


def _product(space: SearchSpace, knobs: tuple[str, ...]) -> dict[str, np.ndarray]:
    table = np.array(list(itertools.product(*(space.domains[k] for k in knobs))))
    return {name: table[:, i] for i, name in enumerate(knobs)}


def valid_chunks(ctx: CostContext, space: SearchSpace) -> Iterator[dict[str, np.ndarray]]:
    """Every valid strategy of ``space`` as knob arrays (with pp, dp and the blocks per stage),
    one chunk per tp and layout: the structural rows that pass structure_mask crossed with
    every combination of the other knobs, then switch_mask (two steps, so that the rules are
    not evaluated over the whole product)."""
    structural = _product(space, STRUCTURAL_KNOBS)
    switches = _product(space, SWITCH_KNOBS)
    repeats = len(next(iter(switches.values())))
    for t, layout in itertools.product(space.domains["tp"], space.domains["layout"]):
        if space.gpus % (t * space.layouts[layout].pp):
            continue
        rows = chunk_values(space, t, layout, structural)
        kept = structure_mask(ctx, space, rows)
        if not kept.any():
            continue
        count = int(kept.sum())
        values = {name: np.repeat(array[kept], repeats) for name, array in rows.items()}
        values.update({name: np.tile(array, count) for name, array in switches.items()})
        ok = switch_mask(ctx, space, values)
        if ok.any():
            yield {name: array[ok] for name, array in values.items()}


def evaluate_values(ctx: CostContext, values: dict[str, np.ndarray]) -> StepTerms:
    """The cost model on knob arrays as valid_chunks yields them."""
    return evaluate_terms(ctx, Knobs.of(**{k: v for k, v in values.items() if k != "layout"}))


def fitting_chunks(
    ctx: CostContext, space: SearchSpace, margin_bytes: float = 0.0
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(knob arrays, step times) of the valid strategies that fit in every memory tier, chunk
    by chunk (valid_chunks); with ``margin_bytes``, those that fit with that much to spare in
    each tier (the solver rounds memory up in units, constraints.scales.memory_unit_bytes, so
    it may reject a plan that fits by less than its rounding: tests bound its optimum between
    the oracle's with and without the margin)."""
    usable_bytes = ctx.system.hbm.capacity_gib * ctx.hbm_usable_fraction * BYTES_PER_GIB
    for values in valid_chunks(ctx, space):
        terms = evaluate_values(ctx, values)
        fits = terms.hbm_bytes <= usable_bytes - margin_bytes
        for tier, spec in enumerate(ctx.system.offload_tiers, start=1):
            capacity_bytes = spec.capacity_gib * BYTES_PER_GIB
            fits &= terms.offload_bytes(tier) <= capacity_bytes - margin_bytes
        if fits.any():
            steps = np.broadcast_to(terms.step_time_s, fits.shape)[fits]
            yield {name: array[fits] for name, array in values.items()}, steps


def enumerate_strategies(
    ctx: CostContext, space: SearchSpace, top: int = 1, margin_bytes: float = 0.0
) -> list[Ranked]:
    """The ``top`` fastest valid strategies that fit in memory (with ``margin_bytes`` to spare
    in each tier: fitting_chunks), fastest first."""
    best_steps: list[np.ndarray] = []
    best_values: list[dict[str, np.ndarray]] = []
    for values, steps in fitting_chunks(ctx, space, margin_bytes):
        order = np.argsort(steps, kind="stable")[:top]
        best_steps.append(steps[order])
        best_values.append({name: array[order] for name, array in values.items()})
    if not best_steps:
        return []
    steps = np.concatenate(best_steps)
    merged = {name: np.concatenate([v[name] for v in best_values]) for name in best_values[0]}
    order = np.argsort(steps, kind="stable")[:top]
    return [
        Ranked(
            step_time_s=float(steps[i]),
            strategy=strategy_from_values(
                {name: int(array[i]) for name, array in merged.items()}, space
            ),
        )
        for i in order
    ]
