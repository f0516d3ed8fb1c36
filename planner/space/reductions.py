"""What the solver's space leaves out, and why each omission loses no optimum or is stated: the caps
the space is searched within (stated_caps, reported with every plan) and the canonical forms of
strategies that cost the same (canonical_values; constraints.structure.add_canonical encodes
them). tests/test_raw_oracle.py checks both against the raw product of knob values
(planner.space.oracle), which applies neither."""

from __future__ import annotations

import numpy as np

import hardware_catalog
from planner.space.layouts import MAX_FIRST_STAGE_SKEW, Layout, stage_layouts
from planner.space.rules import cp_values, divisors
from planner.space.search_space import default_max_cp
from planner.specs import (
    RECOMPUTE_CODES,
    JobSpec,
    ModelSpec,
    SystemSpec,
)
from planner.specs.quantities import (
    DEFAULT_MAX_STAGE_SKEW,
    DEFAULT_OFFLOAD_STEP,
    OFFLOAD_STEPS,
)


def _layout_text(layout: Layout) -> str:
    """A layout's blocks per stage, the middle ones folded: 5,6,...,6,4."""
    middle = (
        (f"{layout.blocks},...,{layout.blocks}",)
        if layout.pp > 3
        else ((str(layout.blocks),) if layout.pp == 3 else ())
    )
    return ",".join((str(layout.first), *middle, str(layout.last)))


def _heavier_end_example(layers: int, pp_values: list[int]) -> str | None:
    """A layout the rules allow (planner.space.rules: the first and the last stage free, the
    middle ones equal) that the space leaves out, a first stage heavier than the middle ones,
    or with two stages a first lighter than the last, as text; None when there is none."""
    for pp in pp_values:
        if pp < 2 or pp > layers:
            continue
        blocks = layers // pp
        if pp == 2 and blocks >= 1 and layers - (blocks - 1) > blocks - 1 >= 1:
            return f"{blocks - 1},{layers - blocks + 1}"
        first = layers - (pp - 2) * blocks - 1
        if pp > 2 and first > blocks:
            return ",".join(map(str, (first, *(blocks,) * (pp - 2), 1)))
    return None


def _uneven_interleave_example(layers: int, pp_values: list[int]) -> str | None:
    """An interleaved layout with unequal virtual stages that neither an even split nor
    Megatron's embedding/loss slots give (--pipeline-model-parallel-layout, which evaluate
    takes) as text: two virtual stages per rank, the first one block lighter and the last one
    heavier by that block and the remainder; None without a pp > 1 with two blocks per virtual
    stage."""
    for pp in (p for p in pp_values if 1 < p <= layers):
        base, remainder = divmod(layers, 2 * pp)
        if base >= 2:
            stages = [base] * (2 * pp)
            stages[0] -= 1
            stages[-1] += 1 + remainder
            return f"pp {pp}, v 2: {stages[0]},{stages[1]},...,{stages[-2]},{stages[-1]}"
    return None


def stated_caps(
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int,
    max_micro_batch: int,
    max_interleave: int | None,
    max_cp: int | None = None,
    max_stage_skew: int = DEFAULT_MAX_STAGE_SKEW,
    offload_step: int = DEFAULT_OFFLOAD_STEP,
) -> list[str]:
    """The limits of the searched space that leave out strategies the rules would allow, each
    with the flag or field that moves it: "proven optimal" is proven over this space only."""
    caps = []
    if offload_step > 1 and len(system.memory_tiers) > 1:
        steps = (
            "whole tensor classes"
            if offload_step == OFFLOAD_STEPS
            else f"tensor classes in steps of 1/{OFFLOAD_STEPS // offload_step}"
        )
        leaves_out = f"leaves out shares of 1/{OFFLOAD_STEPS}, …"
        caps.append(f"offloading {steps} (--offload-step; {leaves_out})")
    seq_len = job.seq_len_for(model)
    cp_limit = default_max_cp(seq_len) if max_cp is None else max_cp
    cut = [c for c in cp_values(gpus, seq_len) if c > cp_limit]
    if cut:
        caps.append(
            f"cp ≤ {cp_limit} (--max-cp; chunks of ≥ {seq_len // cp_limit} tokens; leaves out "
            f"{cut[0]}, …)"
        )
    left_out = [
        layout
        for p in divisors(gpus)
        for layout in sorted(
            set(stage_layouts(model.layers, p))
            - set(stage_layouts(model.layers, p, max_stage_skew)),
            key=lambda x: (x.blocks, x.lighter_first),
        )
    ]
    first_skew = min(MAX_FIRST_STAGE_SKEW, max_stage_skew)
    skewed = [x for x in left_out if x.blocks - x.last > max_stage_skew]
    if skewed:
        caps.append(
            f"the last pipeline stage at most {max_stage_skew} blocks lighter than the middle "
            "ones, or as little lighter as a pp that does not divide the layers allows "
            f"(--max-stage-skew; leaves out pp {skewed[0].pp} with {_layout_text(skewed[0])}, …)"
        )
    lighter_first = [x for x in left_out if x.lighter_first > first_skew]
    if lighter_first:
        blocks = "one block" if first_skew == 1 else f"{first_skew} blocks"
        caps.append(
            f"the first pipeline stage at most {blocks} lighter than the middle ones "
            "(Megatron's embedding slot; --stage-layers in evaluate; leaves out pp "
            f"{lighter_first[0].pp} with {_layout_text(lighter_first[0])}, …)"
        )
    lighter = [
        layout
        for p in divisors(gpus)
        for layout in stage_layouts(model.layers, p, max_stage_skew)
        if layout.lightest < layout.blocks
    ]
    if lighter:
        caps.append(
            "partial recompute (--recompute-layers) of fewer blocks than the lightest stage holds "
            f"(leaves out recomputing {lighter[0].lightest} blocks per stage of "
            f"{_layout_text(lighter[0])}, …)"
        )
    heavier = _heavier_end_example(model.layers, divisors(gpus))
    if heavier:
        caps.append(
            "the first and the last pipeline stage no heavier than the middle ones, with two "
            f"stages the last the lighter (--stage-layers in evaluate; leaves out {heavier}, …)"
        )
    uneven = _uneven_interleave_example(model.layers, divisors(gpus))
    if uneven and max_interleave != 1:
        caps.append(
            "interleaving over equal stages split into equal chunks or over Megatron's "
            "embedding and loss slots (--stage-layers in evaluate takes other unequal virtual "
            f"stages; leaves out {uneven}, …)"
        )
    if model.is_moe and any(t > 2 and model.expert_width % 2 == 0 for t in divisors(gpus)):
        caps.append("expert TP equal to tp or 1 (evaluate takes any divisor of tp)")
    cut = [b for b in divisors(job.global_batch) if b > max_micro_batch]
    if cut:
        caps.append(f"micro-batch ≤ {max_micro_batch} (--max-micro-batch; leaves out {cut[0]}, …)")
    cut = [v for v in divisors(model.layers) if v > (max_interleave or v) and v < model.layers]
    if cut:
        caps.append(f"interleave ≤ {max_interleave} (--max-interleave; leaves out {cut[0]}, …)")
    domain = system.network_tiers[0].domain_gpus if len(system.network_tiers) > 1 else None
    axonn = hardware_catalog.load_stack(job.stack).tp_form == "axonn"
    if domain and not system.tp_across_domain and axonn:
        caps.append(
            f"AxoNN's column·row groups (X·Y) within one {system.network_tiers[0].name} domain "
            f"of {domain} GPUs, the depth group free (system field tp_across_domain)"
        )
    elif domain and not system.tp_across_domain:
        wider = [t for t in divisors(gpus) if t > domain and model.splits_over(t)]
        if wider:
            caps.append(
                f"TP within one {system.network_tiers[0].name} domain of {domain} GPUs "
                f"(system field tp_across_domain; leaves out tp {wider[0]}, …)"
            )
    return caps


def canonical_values(
    values: dict[str, np.ndarray],
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
) -> dict[str, np.ndarray]:
    """The canonical twin of every strategy in ``values`` (knob arrays): the strategy the
    solver's space holds in its place, with each knob that has no effect at its kept value
    (constraints.structure.add_canonical argues each cut; the domains of build_search_space
    drop selective recompute under flash attention where the stack's selective policy is
    ``attention_core``, an overlap the stack does not have and the
    TP, PP, DP rank order on a one-tier network). tests/test_raw_oracle.py checks that a twin
    costs what its strategy costs, on every valid strategy of random raw spaces."""
    stack = hardware_catalog.load_stack(job.stack)
    out = dict(values)
    tp_one = values["tp"] == 1
    for knob in ("sequence_parallel", "tp_overlap", "expert_tp"):
        out[knob] = np.where(tp_one, 0, values[knob])
    single = (values["dp"] == 1) & (values["cp"] == 1)
    if model.is_moe:
        single &= tp_one
    out["zero_stage"] = np.where(single, 0, values["zero_stage"])
    out["dp_overlap"] = np.where(single, 1, values["dp_overlap"]) if stack.dp_overlap else 0
    if not stack.tp_overlap:
        out["tp_overlap"] = np.zeros_like(values["tp_overlap"])
    selective = RECOMPUTE_CODES["selective"]
    flash = job.attention == "flash" and stack.arithmetic != "calculon"  # Calculon materialises
    if flash and stack.selective_policy == "attention_core":
        out["recompute"] = np.where(values["recompute"] == selective, 0, values["recompute"])
    default_order = single | (values["pp"] == 1) | (len(system.network_tiers) == 1)
    # Megatron-AxoNN has one rank order (rules.axonn_violations), which the domain keeps.
    if stack.tp_form != "axonn":
        out["placement"] = np.where(default_order, 0, values["placement"])
    return {name: np.broadcast_to(array, np.shape(values["tp"])) for name, array in out.items()}
