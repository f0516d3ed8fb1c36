"""The step-time objective, linear in tabulated terms (the cost model's formula in
planner/cost/step.py, re-expressed over integer table variables).

With U the per-block per-micro-batch time (compute + exposed TP, CP and offload), H the LM
head and M one PP message per micro-batch, and n·U, n·H, n·M their per-step tables
(n = B/(d·b) micro-batches), a stage of k blocks (h = 1 on the last stage, which runs the head)
bounds the pipeline:

    pipeline ≥ (n + (p−1)/v)·T,   T = k·U + h·H + [p>1]·x·v·M
    v·pipeline ≥ v·k·(n·U) + v·h·(n·H) + [p>1]·x·v²·(n·M) + (p−1)·(k·U + h·H + [p>1]·x·v·M)

with x the stage's transfers per micro-batch and chunk (parallel_comm.pp_transfers: 2, or 4 on
a middle stage of a stack that runs them one after another).

Where the stack overlaps P2P with compute (v > 1), 2v·M becomes its excess over the passes,
E = max(0, v·M − F) + max(0, v·M − B), and 2v·(n·M) likewise n·E (_pp_overlapped).

Partial recompute adds r·(U_full − U_none) per stage (and its per-step multiple): products of
the recomputed-block count r and a table over the block's knobs (AddMultiplicationEquality),
with coefficient 1 where block terms have k. Every other coefficient depends only on the layout
(p, the first stages' k and the last's) and the interleave v, so each (layout, v) enforces one
linear inequality per stage kind with integer coefficients; minimisation makes the pipeline the
slowest stage's. DP exposure is max(0, comm − window) per part and per stage kind, exactly
(a gap fixed by the chosen layout, and a max equality), the DP term the larger stage sum (a max
equality); the per-micro-batch part multiplies the micro-batch count by the comm table
(AddMultiplicationEquality).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.dp_exposure import dp_transfers_shown
from constraints.grid import PerBlock
from constraints.tables import TableBuilder
from constraints.variables import INT_LIMIT, Variables, linear, pair_maximum, upper
from planner.cost.interleave import fill_drain_hops
from planner.cost.parallel_comm import pp_transfers


@dataclass(frozen=True)
class StepVariables:
    step: cp_model.IntVar
    pipeline: cp_model.IntVar
    dp_exposed: tuple[cp_model.IntVar, ...]
    optimizer: cp_model.IntVar


def add_step_time(
    variables: Variables, tables: TableBuilder, exact_exposure: bool = True
) -> StepVariables:
    """The step-time variable and its parts (module docstring); ``exact_exposure``: the DP
    exposure an equality, not only bounded from below (_exposed_once)."""
    m, layers = variables.model, tables.ctx.model.layers
    compute, forward = tables.block_compute()
    comm = tables.comm_exposed()
    head, message = tables.head(), tables.pp_message()
    offload = list(tables.offload_exposed()) if len(tables.ctx.system.memory_tiers) > 1 else []
    per_block = [compute, comm, *offload]
    partial = (
        [_times_recomputed(variables, x) for x in tables.partial_recompute()]
        if variables.partial_recompute
        else []
    )

    off_f = [(1, offload[0].once, 0)] if offload else []
    off_b = [(1, offload[1].once, 0)] if offload else []
    # Overlapped P2P with interleaving shows only its excess over the passes (step.py).
    passes = (compute, forward, offload, partial)
    hidden_p2p = _pp_overlapped(variables, tables, passes, message, exact_exposure)
    chunks = tables.chunk_overhead()
    bounds = []
    for layout, v, literals in variables.layout_interleaves():
        shown = None if hidden_p2p and v > 1 else message
        for stage, with_head in _timed_stages(layout, tables.ctx.stack.pp_serial_transfers):
            blocks = layout.stage_blocks(stage)
            scale, bubble = _bubble_coefficients(layout, v, blocks)
            transfers = pp_transfers(tables.ctx, stage)
            terms = _pipeline_terms(
                layout.pp,
                v,
                scale,
                bubble,
                blocks,
                per_block,
                partial,
                head,
                shown,
                with_head,
                transfers,
            )
            if shown is None and layout.pp > 1:  # v > 1 with overlapped P2P
                once, per_step = hidden_p2p[stage]
                terms += [(scale, per_step), (bubble, once)]
            terms += _interleave_terms(tables, layout.pp, v, scale, bubble, message, chunks)
            bounds.append((scale, terms, literals))
    pipeline = variables.new_int(
        "pipeline", max(upper(variables, terms) // scale + 1 for scale, terms, _ in bounds)
    )
    for scale, terms, literals in bounds:
        m.Add(scale * pipeline >= linear(terms)).OnlyEnforceIf(literals)
    if all(x.pp_power == 1 for x in per_block):
        # Redundant, for propagation before the layout is chosen: the first stage's share of
        # the per-step block work, k·n·U ≥ (L/p)·n·U = L·(φ·U), does not depend on p.
        m.Add(pipeline >= layers * sum(x.per_step for x in per_block))

    overlap = _dp_overlap_literal(variables, tables)
    micro_batches = variables.micro_batch_count()
    window_step = [(1, compute.per_step, compute.pp_power)]
    window_step += [(1, o.per_step, o.pp_power) for o in offload]
    # Partial recompute lengthens the backward by a stage total, not a per-block amount.
    stage_after = [(1, partial[0].once, 0)] if partial else []
    stage_step = [(1, partial[0].per_step, partial[0].pp_power)] if partial else []
    backward_step = [
        (1, compute.per_step, compute.pp_power),
        (-1, forward.per_step, forward.pp_power),
        *[(1, o.per_step, o.pp_power) for o in offload[1:]],
    ]
    zero_stages = variables.domains["zero_stage"]
    zero2 = variables.onehot["zero_stage"][zero_stages.index(2)] if 2 in zero_stages else None
    stage_sums = []
    calculon_window = tables.calculon_dp_window() if tables.ctx.calculon else None
    for stage in variables.space.stage_kinds:
        comm = tables.dp_comm(stage)
        if tables.ctx.calculon:
            stage_sums.append(
                _calculon_dp_parts(
                    variables,
                    comm,
                    [(1, calculon_window.once), *[(c, x) for c, x, _ in off_b]],
                    stage,
                    overlap,
                    exact_exposure,
                )
            )
            continue
        comm_all = _times_micro_batches(
            variables, f"dp_per_step_comm_{stage}", micro_batches, comm.per_micro_batch_s
        )
        # Per micro-batch, ZeRO-3's traffic hides under the whole pass and ZeRO-2's gradient
        # reduce-scatter under the backward alone (step.py): the bound under the whole pass
        # holds for both, the tighter one is enforced under the ZeRO-2 literal.
        exposed_mb = _exposed_once(
            variables,
            f"dp_micro_batch_exposed_{stage}",
            comm_all,
            window_step,
            stage,
            overlap,
            stage_step,
            (zero2, backward_step) if zero2 is not None else None,
            exact=exact_exposure,
        )
        transfers = dp_transfers_shown(
            variables,
            comm,
            comm_all,
            exposed_mb,
            [(1, compute.once, 0), (-1, forward.once, 0), *off_b],
            [(1, forward.once, 0), *off_f],
            stage_after,
            stage,
            overlap,
            tables.ctx.stack.dp_overlap_contention,
            exact_exposure,
        )
        # Ring latencies never hide (step.dp_comm_times_s).
        latency_mb = _times_micro_batches(
            variables, f"dp_latency_per_step_{stage}", micro_batches, comm.latency_per_micro_batch_s
        )
        stage_sums.append([transfers, comm.latency_per_step_s, latency_mb])
    dp_exposed = variables.new_int(
        "dp_exposed", max(sum(variables.ub(x) for x in parts) for parts in stage_sums)
    )
    # The larger stage sum as an equality (not two inequalities): a variable bounded only from
    # below floats with the search's saved phases, and each new solution then lowered it by one
    # unit (DeepSeek-V3 on 4,096 H100s: ~3,000 such solutions in 60 s, unproven; now 6 s).
    sums = []
    for stage, parts in zip(variables.space.stage_kinds, stage_sums, strict=True):
        total = variables.new_int(f"dp_exposed_{stage}", sum(variables.ub(x) for x in parts))
        m.Add(total == sum(parts))
        sums.append(total)
    m.AddMaxEquality(dp_exposed, sums)

    optimizer = tables.optimizer()
    step_terms = [pipeline, dp_exposed, optimizer]
    step = variables.new_int("step", min(INT_LIMIT, sum(variables.ub(v) for v in step_terms)))
    m.Add(step == sum(step_terms))
    return StepVariables(
        step=step, pipeline=pipeline, dp_exposed=(dp_exposed,), optimizer=optimizer
    )


def _calculon_dp_parts(
    variables: Variables,
    comm,
    backward: list[tuple[int, cp_model.IntVar]],
    stage: str,
    overlap: cp_model.IntVar | None,
    exact: bool,
) -> list[cp_model.IntVar]:
    """Calculon's DP exposure of a stage (step.evaluate_terms, calculon.dp_parts_s): the last
    chunk's traffic beyond c blocks' backward of one micro-batch, the other chunks' beyond
    p·(v − 1)·c blocks' backward (c = k/v blocks per chunk), and the part that never hides;
    with ``backward`` one block's backward per micro-batch as (coefficient, variable) terms,
    for each (layout, interleave) pair."""
    parts = []
    for name, var, scale in (
        ("after", comm.after_backward_s, lambda p, v: 1),
        ("before", comm.before_forward_s, lambda p, v: p * (v - 1)),
    ):
        if overlap is None:
            parts.append(var)
            continue
        rows, enforced = [], []
        for layout, v, literals in variables.layout_interleaves():
            blocks = layout.stage_blocks(stage)
            chunk = scale(layout.pp, v) * blocks // v
            rows.append([[(1, var)] + [(-chunk * c, x) for c, x in backward]])
            enforced.append([overlap, *literals])
        rows.append([[(1, var)]])
        enforced.append([overlap.Not()])
        parts.append(pair_maximum(variables, f"dp_{name}_exposed_{stage}", rows, enforced, exact))
    return [*parts, comm.latency_per_step_s]


def _pp_overlapped(
    variables: Variables,
    tables: TableBuilder,
    passes: tuple[PerBlock, PerBlock, list[PerBlock], list[PerBlock]],
    message: PerBlock,
    exact: bool,
) -> dict[str, tuple[cp_model.IntVar, cp_model.IntVar]] | None:
    """{stage kind: (E, n·E)} for E = max(0, v·M − F) + max(0, v·M − B), the pipeline messages
    a stage with overlapped P2P shows per micro-batch (step.pp_exposed_s): M one message, F and
    B the stage's forward and backward passes with their offload stalls (and partial
    recompute's extra backward), for the chosen layout's k blocks on that stage and interleave
    v > 1 (one gap per part, fixed by the chosen pair; ``exact`` as in _exposed_once). The
    stages of an even layout hold the same blocks, so one E serves them all unless the space
    has slot layouts. ``passes``: the per-block compute, forward and offload tables and the
    per-stage partial-recompute ones. None where the stack does not overlap P2P or the space
    has no such pair."""
    pairs = [(x, v, lits) for x, v, lits in variables.layout_interleaves() if v > 1 and x.pp > 1]
    if not tables.ctx.stack.pp_overlap or not pairs:
        return None
    uneven = any(layout.interleave for layout, _, _ in pairs)
    kinds = ("first", "middle", "last") if uneven else ("last",)
    shown = {kind: _pp_shown(variables, passes, message, pairs, kind, exact) for kind in kinds}
    return {kind: shown[kind if uneven else "last"] for kind in ("first", "middle", "last")}


def _pp_shown(variables, passes, message, pairs, stage: str, exact: bool):
    """(E, n·E) of _pp_overlapped for one stage kind."""
    compute, forward, offload, partial = passes
    # (name, per-block window, per-block terms taken off it, per-stage window)
    windows = (
        ("forward", [forward, *offload[:1]], [], []),
        ("backward", [compute, *offload[1:]], [forward], partial[:1]),
    )
    exposed = []
    for kind in ("once", "step"):

        def value(x: PerBlock, p: int, kind: str = kind) -> tuple[int, cp_model.IntVar]:
            return (p**x.pp_power, x.per_step) if kind == "step" else (1, x.once)

        parts = []
        for name, window, minus, whole in windows:
            rows = []
            for layout, v, _ in pairs:
                p, k = layout.pp, layout.stage_blocks(stage)
                coef, sent = value(message, p)
                terms = [(v * coef, sent)]
                terms += [(-k * c, var) for c, var in (value(x, p) for x in window)]
                terms += [(k * c, var) for c, var in (value(x, p) for x in minus)]
                terms += [(-c, var) for c, var in (value(x, p) for x in whole)]
                rows.append([terms])
            enforced = [literals for _, _, literals in pairs]
            label = f"pp_{name}_exposed_{kind}_{stage}"
            parts.append(pair_maximum(variables, label, rows, enforced, exact))
        total = variables.new_int(f"pp_exposed_{kind}_{stage}", sum(variables.ub(x) for x in parts))
        variables.model.Add(total == sum(parts))
        exposed.append(total)
    return exposed[0], exposed[1]


def _times_micro_batches(
    variables: Variables, name: str, micro_batches: cp_model.IntVar, x: cp_model.IntVar
) -> cp_model.IntVar:
    """n·x (AddMultiplicationEquality)."""
    product = variables.new_int(name, variables.ub(micro_batches) * variables.ub(x))
    variables.model.AddMultiplicationEquality(product, [micro_batches, x])
    return product


def _times_recomputed(variables: Variables, x: PerBlock) -> PerBlock:
    """r·X for r the blocks per stage partial recompute rebuilds (AddMultiplicationEquality)."""
    r = variables.recomputed_blocks()

    def times(var: cp_model.IntVar) -> cp_model.IntVar:
        product = variables.new_int(f"recomputed_{var.Name()}", variables.ub(r) * variables.ub(var))
        variables.model.AddMultiplicationEquality(product, [r, var])
        return product

    return PerBlock(once=times(x.once), per_step=times(x.per_step), pp_power=x.pp_power)


def _interleave_terms(
    tables: TableBuilder,
    p: int,
    v: int,
    scale: int,
    bubble: int,
    message: PerBlock,
    chunks: PerBlock | None,
) -> list[tuple[int, cp_model.IntVar]]:
    """scale × interleaving's costs beyond the ideal bubble (planner/cost/interleave.py): the
    fill and drain messages, hops·M with hops = fill_drain_hops(p, v, hidden), and the chunk
    steps 2·(v − 1)·o in every micro-batch's T: scale·n·C + bubble·C for C the chunk table's
    entry (_bubble_coefficients)."""
    if p == 1 or v == 1:
        return []
    hidden = tables.ctx.stack.pp_overlap
    terms = []
    if not tables.ctx.calculon:
        terms.append((scale * fill_drain_hops(p, v, hidden), message.once))
    if chunks is not None:
        terms += [(scale * p**chunks.pp_power, chunks.per_step), (bubble, chunks.once)]
    return [(coef, var) for coef, var in terms if coef]


def _dp_overlap_literal(variables: Variables, tables: TableBuilder) -> cp_model.IntVar | None:
    """The literal of DP traffic overlapping compute (step.dp_overlap_on): the dp_overlap knob,
    and, where the stack does not overlap the sharded optimizer's traffic
    (StackProfile.sharded_dp_overlap), not ZeRO-1 or ZeRO-2. None where it never holds."""
    if 1 not in variables.domains["dp_overlap"]:
        return None
    knob = variables.onehot["dp_overlap"][1]
    zero_stages = variables.domains["zero_stage"]
    sharded = [
        variables.onehot["zero_stage"][zero_stages.index(z)] for z in (1, 2) if z in zero_stages
    ]
    if tables.ctx.stack.sharded_dp_overlap or not sharded:
        return knob
    on = variables.model.NewBoolVar("dp_overlap_effective")
    variables.model.AddBoolAnd([knob, *(z.Not() for z in sharded)]).OnlyEnforceIf(on)
    variables.model.AddBoolOr([knob.Not(), *sharded, on])
    return on


def _timed_stages(layout, serial_transfers: bool = False) -> list[tuple[str, bool]]:
    """The stages whose timelines bound the pipeline, with whether each runs the LM head: the
    last, and the middle stages where they hold more blocks than the first or where the stack
    runs their four transfers one after another (parallel_comm.pp_transfers: twice the
    first's); the first unless the middle ones bound it (more blocks at the same bubble share:
    a lighter first stage without slots). Where the first holds as many as the middle ones
    and sends as much it stands for them."""
    stages = [("last", True)]
    lighter_first = layout.pp > 2 and layout.first < layout.blocks
    if lighter_first or (serial_transfers and layout.pp > 2):
        stages.append(("middle", False))
    if not lighter_first or layout.interleave:
        stages.append(("first", False))
    return stages


def _bubble_coefficients(layout, v: int, blocks: int) -> tuple[int, int]:
    """(scale, bubble): a stage of k = ``blocks`` blocks bounds scale·pipeline by
    scale·n·T + bubble·T, its timeline (n + (p − 1)·s)·T times scale (step.evaluate_terms),
    with s its bubble share: c/k for the largest chunk c (interleave.bubble_share), which is
    1/v for equal chunks: (v, p − 1); without interleaving (1, p − 1)."""
    p = layout.pp
    if v == 1:
        return 1, p - 1
    chunk = layout.chunk(v)
    common = math.gcd(blocks, chunk)
    return blocks // common, (p - 1) * chunk // common


def _pipeline_terms(
    p: int,
    v: int,
    scale: int,
    bubble: int,
    blocks: int,
    per_block: list[PerBlock],
    per_stage: list[PerBlock],
    head: PerBlock,
    message: PerBlock | None,
    with_head: bool,
    transfers: int = 2,
) -> list[tuple[int, cp_model.IntVar]]:
    """scale × the pipeline bound of a stage of ``blocks`` blocks, scale·n·T + bubble·T
    (_bubble_coefficients; the module docstring's with scale v and bubble p − 1);
    ``per_stage``: stage totals (partial recompute's); ``message`` None: the stack hides the
    stage-to-stage messages, else ``transfers``·v of them in T (parallel_comm.pp_transfers)."""
    terms = [(scale * blocks * p**x.pp_power, x.per_step) for x in per_block]
    terms += [(bubble * blocks, x.once) for x in per_block]
    terms += [(scale * p**x.pp_power, x.per_step) for x in per_stage]
    terms += [(bubble, x.once) for x in per_stage]
    if with_head:
        terms += [(scale * p**head.pp_power, head.per_step), (bubble, head.once)]
    if p > 1 and message is not None:
        terms += [
            (transfers * v * scale * p**message.pp_power, message.per_step),
            (transfers * v * bubble, message.once),
        ]
    return [(coef, var) for coef, var in terms if coef]


def _exposed_once(
    variables: Variables,
    name: str,
    comm: cp_model.IntVar,
    window: list[tuple[int, cp_model.IntVar, int]],
    stage: str,
    overlap: cp_model.IntVar | None,
    stage_window: list[tuple[int, cp_model.IntVar, int]] = (),
    narrower: tuple[cp_model.IntVar, list[tuple[int, cp_model.IntVar, int]]] | None = None,
    exact: bool = True,
) -> cp_model.IntVar:
    """max(0, comm − k·window − stage window) for a stage of k blocks. Window terms are
    (coefficient, variable, pp power): the coefficient is multiplied by pp to that power;
    ``window`` is per block, ``stage_window`` per stage. ``narrower`` = (literal, window):
    where the literal holds, the comm hides under that narrower window instead.

    ``exact``: a gap variable equal to comm − the chosen layout's window when overlapping (comm
    otherwise), and the exposed share the max of it and 0. Otherwise only lower bounds, which
    minimising the step tightens: valid, but the variable then floats with the search's saved
    phases, and each new solution lowers it by a unit or a table step (the README's main job:
    93 solutions, 60 of them such descents; exact: 56 solutions, no such descent). A query
    whose objective is not the step (min-hardware's first solve) searches the lower bounds
    faster: gpt3-175b's least scale-out bandwidth for MFU ≥ 45 % on 1,024 H100s, 3.4
    deterministic units with them and 8.7 with the equality (benchmarks/min_hardware_latency.py
    11.8 s against 15.6 s)."""
    m = variables.model
    exposed = variables.new_int(name, variables.ub(comm))
    if overlap is None:
        m.Add(exposed == comm)
        return exposed
    hidden = []
    for layout, chosen in zip(variables.space.layouts, variables.onehot["layout"], strict=True):
        blocks = layout.stage_blocks(stage)
        whole = [(coef * layout.pp**power, var) for coef, var, power in stage_window]
        if narrower is None:
            windows = [(window, [overlap, chosen])]
        else:
            windows = [
                (window, [overlap, chosen, narrower[0].Not()]),
                (narrower[1], [overlap, chosen, narrower[0]]),
            ]
        for terms, literals in windows:
            per_block = [(blocks * coef * layout.pp**power, var) for coef, var, power in terms]
            hidden.append((per_block + whole, literals))
    if not exact:
        m.Add(exposed >= comm).OnlyEnforceIf(overlap.Not())
        for terms, literals in hidden:
            m.Add(exposed >= comm - linear(terms)).OnlyEnforceIf(literals)
        return exposed
    widest = max(
        sum(coef * variables.ub(var) for coef, var in terms if coef > 0) for terms, _ in hidden
    )
    gap = variables.model.NewIntVar(-widest, variables.ub(comm), f"{name}_gap")
    m.Add(gap == comm).OnlyEnforceIf(overlap.Not())
    for terms, literals in hidden:
        m.Add(gap == comm - linear(terms)).OnlyEnforceIf(literals)
    m.AddMaxEquality(exposed, [gap, 0])
    return exposed
