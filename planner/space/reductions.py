"""What the solver's space leaves out, and why each omission loses no optimum or is stated: the caps
the space is searched within (stated_caps, reported with every plan) and the canonical forms of
strategies that cost the same (canonical_values; constraints.structure.add_canonical encodes
them). tests/test_raw_oracle.py checks both against the raw product of knob values
(planner.space.oracle), which applies neither."""

from __future__ import annotations

import numpy as np

import hardware_catalog
from planner.space.rules import cp_values, divisors
from planner.space.search_space import default_max_cp, stage_layouts
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


def _uneven_first_example(layers: int, pp_values: list[int]) -> str | None:
    """A layout the rules allow that the space leaves out, a first stage lighter than the
    middle ones (planner.space.rules: the first and last stage free, the middle ones equal), as
    text; None when no pp of three or more stages has one."""
    for pp in pp_values:
        if pp < 3 or pp > layers:
            continue
        for layout in stage_layouts(layers, pp):
            if layout.blocks >= 2:
                first = layout.blocks - 1
                last = layout.last + 1
                if last <= layout.blocks:
                    stages = (first, *(layout.blocks,) * (pp - 2), last)
                    return ",".join(map(str, stages))
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
    skewed = [
        layout
        for p in divisors(gpus)
        for layout in sorted(
            set(stage_layouts(model.layers, p))
            - set(stage_layouts(model.layers, p, max_stage_skew)),
            key=lambda x: x.blocks,
        )
    ]
    if skewed:
        caps.append(
            f"the last pipeline stage at most {max_stage_skew} blocks lighter than the others, "
            "or as little lighter as a pp that does not divide the layers allows "
            f"(--max-stage-skew; leaves out pp {skewed[0].pp} with "
            f"{skewed[0].blocks},...,{skewed[0].blocks},{skewed[0].last}, …)"
        )
    lighter = [
        layout
        for p in divisors(gpus)
        for layout in stage_layouts(model.layers, p, max_stage_skew)
        if layout.last < layout.blocks
    ]
    if lighter:
        caps.append(
            "partial recompute (--recompute-layers) of fewer blocks than the last stage holds "
            f"(leaves out recomputing {lighter[0].last} blocks per stage of "
            f"{lighter[0].blocks},...,{lighter[0].blocks},{lighter[0].last}, …)"
        )
    uneven_first = _uneven_first_example(model.layers, divisors(gpus))
    if uneven_first:
        caps.append(
            "the first pipeline stage as heavy as the middle ones (only the last may be lighter; "
            f"--stage-layers in evaluate; leaves out {uneven_first}, …)"
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
