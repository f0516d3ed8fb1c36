"""Step time and memory of whole strategies, vectorised over knob arrays.

With n = B/(d·b) micro-batches per pipeline, L/p blocks per stage and v virtual stages per rank,
the 1F1B (interleaved) schedule takes (Narayanan et al. SC21 §2.2):

    pipeline = (n + (p − 1)/v) · T
    T        = (L/p) · (fwd + bwd + recompute + TP exposed + offload exposed) + head + PP comm

per step, where every term of T is per micro-batch on the slowest (last) stage: the LM head
runs there, PP comm is 2·v point-to-point messages of b·s·h·e/t bytes (activations forward,
gradients backward; Megatron's scatter/gather optimisation divides them by t). The bubble is the
(p − 1)/v · T part. Then

    step = pipeline + DP exposed + optimizer step.

DP communication per step, ring collectives over d ranks on the tier that t·d GPUs span:
ZeRO-0 all-reduces the gradients; ZeRO-1 reduce-scatters them and all-gathers the updated
weights; ZeRO-2 reduce-scatters them every micro-batch (sharded gradients cannot accumulate) and
all-gathers the weights once; ZeRO-3 also all-gathers the weights before each forward and backward
(and the recompute) of every micro-batch. With DP overlap, the once-per-step reduction hides
under the backward of the last micro-batch, the weight all-gather under the forward of the first,
and per-micro-batch traffic under that micro-batch's compute: exposed = max(0, comm − window),
where a window is the stage's pass including its exposed offload stalls (the DP link is busy
while the stage waits on its offload link).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from planner.cost.compute import block_times, lm_head_time_s
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.flops import model_flops_per_step, recompute_flops_per_step
from planner.cost.memory import (
    StageMemory,
    block_activation_bytes,
    block_params_per_rank,
    stage_memory,
    stage_params,
)
from planner.cost.network import all_gather_s, all_reduce_s, point_to_point_s, reduce_scatter_s
from planner.cost.offload import offload_exposed_s, optimizer_step_s
from planner.specs import RECOMPUTE_CODES, Strategy


@dataclass(frozen=True)
class Knobs:
    """Strategy knobs as numpy arrays that broadcast together (recompute as 0/1/2 codes)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    interleave: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    zero_stage: np.ndarray
    offload_weights: np.ndarray
    offload_activations: np.ndarray
    offload_optimizer: np.ndarray
    dp_overlap: np.ndarray
    tp_overlap: np.ndarray

    @classmethod
    def of(cls, **values: object) -> Knobs:
        """Knobs from arrays or scalars; omitted knobs take the Strategy defaults."""
        defaults = Strategy().model_dump()
        merged = {name.name: values.get(name.name, defaults[name.name]) for name in fields(cls)}
        unknown = set(values) - set(merged)
        if unknown:
            raise TypeError(f"unknown knobs: {sorted(unknown)}")
        if isinstance(merged["recompute"], str):
            merged["recompute"] = RECOMPUTE_CODES[merged["recompute"]]
        return cls(**{name: np.asarray(value) for name, value in merged.items()})

    @classmethod
    def from_strategy(cls, strategy: Strategy) -> Knobs:
        return cls.of(**strategy.model_dump())

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name.name: getattr(self, name.name) for name in fields(self)}


@dataclass(frozen=True)
class StepTerms:
    """Everything the cost model says about a batch of strategies (arrays, broadcast shape)."""

    micro_batches: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    tp_comm_s: np.ndarray
    pp_comm_s: np.ndarray
    offload_s: np.ndarray
    bubble_s: np.ndarray
    dp_comm_s: np.ndarray
    optimizer_s: np.ndarray
    step_time_s: np.ndarray
    model_flops: float
    hardware_flops: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    tokens_per_s: np.ndarray
    first_stage: StageMemory
    last_stage: StageMemory

    def breakdown(self) -> dict[str, np.ndarray]:
        """Step-time terms that add up to ``step_time_s``."""
        return {
            "forward": self.forward_s,
            "backward": self.backward_s,
            "recompute": self.recompute_s,
            "tp_comm": self.tp_comm_s,
            "pp_comm": self.pp_comm_s,
            "offload": self.offload_s,
            "bubble": self.bubble_s,
            "dp_comm": self.dp_comm_s,
            "optimizer": self.optimizer_s,
        }

    @property
    def hbm_bytes(self) -> np.ndarray:
        """HBM needed per GPU: the more loaded of the first and last stage."""
        return np.maximum(self.first_stage.hbm_total, self.last_stage.hbm_total)

    def offload_bytes(self, tier: int) -> np.ndarray:
        """Bytes per GPU in offload tier ``tier`` (≥ 1), the more loaded stage."""
        return np.maximum(self.first_stage.offloaded[tier - 1], self.last_stage.offloaded[tier - 1])


def dp_comm_times_s(
    ctx: CostContext, k: dict[str, np.ndarray], params_per_rank: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(once per step after the backward, once per step before the forward, per micro-batch)
    DP communication times, unhidden. Depends on (tp, pp, dp, zero_stage, recompute)."""
    d = np.asarray(k["dp"])
    span = np.asarray(k["tp"]) * d
    zero = np.asarray(k["zero_stage"])
    grads = ctx.grad_bytes * params_per_rank
    weights = ACTIVATION_BYTES * params_per_rank
    reduce = reduce_scatter_s(ctx, d, span, grads)
    gather = all_gather_s(ctx, d, span, weights)
    gathers_per_micro_batch = 2 + (np.asarray(k["recompute"]) == 2)
    after_backward = np.where(
        zero == 0, all_reduce_s(ctx, d, span, grads), np.where(zero == 1, reduce, 0.0)
    )
    before_forward = np.where((zero == 1) | (zero == 2), gather, 0.0)
    per_micro_batch = np.where(
        zero == 2, reduce, np.where(zero == 3, reduce + gathers_per_micro_batch * gather, 0.0)
    )
    return after_backward, before_forward, per_micro_batch


def evaluate_terms(ctx: CostContext, knobs: Knobs) -> StepTerms:
    """Evaluate the cost model on (arrays of) strategies. No validity checks here: callers pass
    strategies that satisfy the divisibility rules (planner.validate)."""
    k = knobs.as_dict()
    m, s = ctx.model, ctx.seq_len
    t = np.asarray(k["tp"], dtype=float)
    p = np.asarray(k["pp"], dtype=float)
    d = np.asarray(k["dp"], dtype=float)
    b = np.asarray(k["micro_batch"], dtype=float)
    v = np.asarray(k["interleave"], dtype=float)
    recompute = np.asarray(k["recompute"])
    n = ctx.job.global_batch / (d * b)
    blocks = m.layers / p

    times = block_times(ctx, k["tp"], k["micro_batch"], recompute, k["sequence_parallel"])
    activation_bytes = ACTIVATION_BYTES * b * s * m.hidden
    collectives = 4 + 2 * (recompute == 2)
    tp_raw = collectives * all_reduce_s(ctx, t, t, activation_bytes)
    tp_window = times.forward_gemm_s * (3 + (recompute == 2))
    tp_exposed = np.where(k["tp_overlap"], np.maximum(0.0, tp_raw - tp_window), tp_raw)
    offload_forward, offload_backward = offload_exposed_s(
        ctx,
        k,
        times,
        block_params_per_rank(ctx, k["tp"]),
        block_activation_bytes(ctx, k["tp"], k["micro_batch"], recompute, k["sequence_parallel"]),
    )
    offload = offload_forward + offload_backward
    head = lm_head_time_s(ctx, k["tp"], k["micro_batch"])
    pp_message = point_to_point_s(ctx, t * d * p, activation_bytes / t)
    pp_per_micro_batch = np.where(p > 1, 2 * v * pp_message, 0.0)
    per_micro_batch = (
        blocks * (times.forward_s + times.backward_s + times.recompute_s + tp_exposed + offload)
        + head
        + pp_per_micro_batch
    )
    bubble = (p - 1) / v * per_micro_batch

    params = stage_params(ctx, k["tp"], k["pp"], last=True).total
    after_backward, before_forward, per_mb_comm = dp_comm_times_s(ctx, k, params)
    overlap = np.asarray(k["dp_overlap"], dtype=bool)
    backward_window = np.where(
        overlap, blocks * (times.backward_s + times.recompute_s + offload_backward), 0.0
    )
    forward_window = np.where(overlap, blocks * (times.forward_s + offload_forward), 0.0)
    micro_batch_window = forward_window + backward_window
    dp_exposed = (
        np.maximum(0.0, after_backward - backward_window)
        + np.maximum(0.0, before_forward - forward_window)
        + n * np.maximum(0.0, per_mb_comm - micro_batch_window)
    )
    optim_shard = np.where(np.asarray(k["zero_stage"]) >= 1, 1 / d, 1.0)
    optimizer = optimizer_step_s(ctx, params * optim_shard, k["offload_optimizer"])

    step = (n + (p - 1) / v) * per_micro_batch + dp_exposed + optimizer
    gpus = t * p * d
    model_flops = model_flops_per_step(ctx)
    hardware_flops = model_flops + recompute_flops_per_step(ctx, recompute)
    capacity = step * gpus * ctx.peak_flops
    return StepTerms(
        micro_batches=n,
        forward_s=n * (blocks * times.forward_s + head / 3),
        backward_s=n * (blocks * times.backward_s + 2 * head / 3),
        recompute_s=n * blocks * times.recompute_s,
        tp_comm_s=n * blocks * tp_exposed,
        pp_comm_s=n * pp_per_micro_batch,
        offload_s=n * blocks * offload,
        bubble_s=bubble,
        dp_comm_s=dp_exposed,
        optimizer_s=optimizer,
        step_time_s=step,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        mfu=model_flops / capacity,
        hfu=hardware_flops / capacity,
        tokens_per_s=ctx.job.global_batch * s / step,
        first_stage=stage_memory(ctx, k, n, last=False),
        last_stage=stage_memory(ctx, k, n, last=True),
    )
