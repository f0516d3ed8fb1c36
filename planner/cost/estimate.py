"""The report of one strategy: step time, its breakdown, memory per tier, efficiency, and the
time and GPU-hours to train a token budget, ideal and with failures (goodput: failures,
checkpoints, restarts; planner/cost/goodput.py). This is the ``estimate`` object of
``--json``."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from planner.cost.axonn_comm import TensorParallelReport, tensor_parallel_report
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.goodput import GoodputEstimate, estimate_goodput
from planner.cost.knobs import Knobs
from planner.cost.memory import StageMemory
from planner.cost.step import StepTerms
from planner.cost.uncertainty import StepRange, step_range
from planner.errors import InputError
from planner.specs import Strategy


class TrainingTime(BaseModel):
    """Time to train ``tokens`` at the strategy's throughput: ideal (``time_s``, ``days``,
    ``gpu_hours``, ``cost_usd``: no failures, free checkpoints) and effective (``effective_*``:
    divided by the goodput, with the failures, checkpoints and restarts of the reliability
    profile; None when the goodput is 0). ``steps`` is a whole number of optimizer steps:
    ⌈tokens / (global batch × sequence)⌉ (the quotient rounded to 10⁻⁶ first, so an exact one is
    not pushed up by float error), the last step a full one (time_s, days, GPU-hours and cost,
    ideal and effective, are those of the tokens, not of the rounded steps)."""

    tokens: float
    steps: int
    time_s: float
    days: float
    gpu_hours: float
    cost_usd: float | None = None
    goodput: float | None = None
    effective_days: float | None = None
    effective_gpu_hours: float | None = None
    effective_cost_usd: float | None = None


class Estimate(BaseModel):
    """What the cost model predicts for one strategy (all floats, JSON-ready)."""

    model_config = ConfigDict(frozen=True)

    step_time_s: float
    mfu: float
    hfu: float
    tokens_per_s: float
    micro_batches: int
    model_tflop_per_step: float
    stack: str
    """The training-stack profile the estimate assumes (its name)."""
    breakdown_s: dict[str, float]
    memory_gib: dict[str, dict[str, float]]
    most_loaded_stage: str
    """The pipeline stage that needs the most HBM (the ``hbm`` rows are its)."""
    memory_stage: dict[str, str]
    """Per tier (the keys of ``memory_gib``): the stage, first or last, whose rows and total
    that tier lists: the one that loads that tier most, which may differ between tiers (the
    first stage holds the in-flight activations, the last the logits)."""
    fits: bool
    overflows: list[str]
    warnings: list[str]
    training: TrainingTime | None = None
    goodput: GoodputEstimate | None = None
    """With a token budget and a strategy: failures, checkpoints, restarts and goodput."""
    step_range: StepRange | None = None
    """With a strategy: where the step time can be, and why (planner/cost/uncertainty.py)."""
    tensor_parallel: TensorParallelReport | None = None
    """Under a stack that runs AxoNN's tensor parallelism (StackProfile.tp_form), with a
    strategy: its TP form, grid and communication per dimension (planner/cost/axonn_comm.py)."""


def _scalar(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def _most_loaded(terms: StepTerms, load) -> tuple[str, StageMemory]:
    """(name, memory) of the stage with the largest ``load(stage)``; the first on ties."""
    named = zip(("first", "middle", "last"), terms.stages, strict=True)
    return max(named, key=lambda item: _scalar(load(item[1])))


def _check_finite(terms: StepTerms) -> None:
    """An input error unless the step time and every term of it is a finite positive number of
    seconds: the specs' ranges (planner.specs.limits) keep every input where the cost model's
    arithmetic is finite, so this only guards a combination the ranges did not foresee."""
    parts = {"step time": terms.step_time_s, **terms.breakdown()}
    for name, value in parts.items():
        seconds = _scalar(value)
        if not math.isfinite(seconds) or seconds < 0 or (name == "step time" and seconds <= 0):
            raise InputError(
                f"{name} = {seconds!r} s: not a finite positive time; a hardware or stack "
                "number (bandwidth, efficiency, peak, latency) is outside the cost model's range"
            )


def build_estimate(
    ctx: CostContext,
    terms: StepTerms,
    gpus: int,
    warnings: list[str],
    strategy: Strategy | None = None,
) -> Estimate:
    """Turn the cost model's terms for a single strategy into an Estimate; with the job's
    token budget and the ``strategy``, its goodput and effective time to train too."""
    name, stage = _most_loaded(terms, lambda s: s.hbm_total)
    memory: dict[str, dict[str, float]] = {}
    stages = {"hbm": name}
    overflows: list[str] = []
    hbm = ctx.system.hbm
    usable = hbm.capacity_gib * ctx.hbm_usable_fraction
    hbm_items = {name: _scalar(value) / BYTES_PER_GIB for name, value in stage.items().items()}
    hbm_total = _scalar(terms.hbm_bytes) / BYTES_PER_GIB
    memory["hbm"] = {
        **hbm_items,
        "total": hbm_total,
        "capacity": hbm.capacity_gib,
        "usable": usable,
        "headroom": usable - hbm_total,
    }
    if hbm_total > usable:
        overflows.append(
            f"HBM: needs {hbm_total:.1f} GiB per GPU, {usable:.1f} GiB usable "
            f"({ctx.hbm_usable_fraction:.0%} of {hbm.capacity_gib:g} GiB): "
            f"over by {hbm_total - usable:.1f} GiB"
        )
    for index, tier in enumerate(ctx.system.offload_tiers, start=1):
        # Each tier's rows come from the stage that loads that tier most (not necessarily the
        # one that loads HBM most), so that the rows add up to the tier's total.
        loaded_name, loaded = _most_loaded(terms, lambda s, i=index: s.offloaded[i - 1])
        items = {
            name: _scalar(value) / BYTES_PER_GIB
            for name, value in loaded.offloaded_items[index - 1].items()
        }
        total = _scalar(terms.offload_bytes(index)) / BYTES_PER_GIB
        stages[f"offload_{index}"] = loaded_name
        memory[f"offload_{index}"] = {
            **items,
            "total": total,
            "capacity": tier.capacity_gib,
            "usable": tier.capacity_gib,
            "headroom": tier.capacity_gib - total,
        }
        if total > tier.capacity_gib:
            overflows.append(
                f"offload tier {index} ({tier.name}): needs {total:.1f} GiB per GPU, has "
                f"{tier.capacity_gib:g} GiB: over by {total - tier.capacity_gib:.1f} GiB"
            )
    step = _scalar(terms.step_time_s)
    _check_finite(terms)
    tokens_per_s = _scalar(terms.tokens_per_s)
    training = goodput = None
    if ctx.job.train_tokens and strategy is not None:
        goodput = estimate_goodput(ctx, strategy, step)
    if ctx.job.train_tokens:
        time_s = ctx.job.train_tokens / tokens_per_s
        gpu_hours = time_s * gpus / 3600
        price = ctx.system.gpu_hour_usd
        training = TrainingTime(
            tokens=ctx.job.train_tokens,
            steps=math.ceil(round(ctx.job.train_tokens / (ctx.job.global_batch * ctx.seq_len), 6)),
            time_s=time_s,
            days=time_s / 86400,
            gpu_hours=gpu_hours,
            cost_usd=gpu_hours * price if price else None,
        )
        if goodput is not None:
            effective_hours = goodput.gpu_hours
            training = training.model_copy(
                update={
                    "goodput": goodput.goodput,
                    "effective_days": goodput.effective_days,
                    "effective_gpu_hours": effective_hours,
                    "effective_cost_usd": effective_hours * price
                    if price and effective_hours is not None
                    else None,
                }
            )
    tensor_parallel = None
    if strategy is not None and ctx.stack.tp_form == "axonn" and not ctx.model.is_moe:
        s = strategy
        tensor_parallel = tensor_parallel_report(
            ctx,
            s.tp,
            s.tp_column,
            s.tp_depth,
            s.micro_batch,
            s.recompute,
            s.pp,
            _scalar(terms.micro_batches),
        )
    ranged = (
        None if strategy is None else step_range(ctx, Knobs.from_strategy(strategy), gpus, step)
    )
    return Estimate(
        step_time_s=step,
        mfu=_scalar(terms.mfu),
        hfu=_scalar(terms.hfu),
        tokens_per_s=tokens_per_s,
        micro_batches=round(_scalar(terms.micro_batches)),
        model_tflop_per_step=terms.model_flops / 1e12,
        stack=ctx.stack.name,
        breakdown_s={name: _scalar(value) for name, value in terms.breakdown().items()},
        memory_gib=memory,
        most_loaded_stage=stages["hbm"],
        memory_stage=stages,
        fits=not overflows,
        overflows=overflows,
        warnings=warnings,
        training=training,
        goodput=goodput,
        tensor_parallel=tensor_parallel,
        step_range=ranged,
    )
