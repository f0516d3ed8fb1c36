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
from planner.cost.flops import ArrayLike, model_flops_per_step, recompute_flops_per_step
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
    cp: np.ndarray
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


@dataclass(frozen=True)
class BlockPieces:
    """Seconds per block per micro-batch on one rank: compute, and the exposed TP and offload
    time. Depends on (tp, micro_batch, recompute, sequence_parallel, tp_overlap,
    offload_weights, offload_activations)."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    tp_exposed_s: np.ndarray
    offload_forward_s: np.ndarray
    offload_backward_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        """Everything one block costs per micro-batch on the stage's critical path."""
        return (
            self.forward_s
            + self.backward_s
            + self.recompute_s
            + self.tp_exposed_s
            + self.offload_forward_s
            + self.offload_backward_s
        )

    @property
    def forward_window_s(self) -> np.ndarray:
        """The forward pass, offload stalls included: DP traffic can hide under it."""
        return self.forward_s + self.offload_forward_s

    @property
    def backward_window_s(self) -> np.ndarray:
        """The backward pass with its recompute and offload stalls."""
        return self.backward_s + self.recompute_s + self.offload_backward_s


def block_pieces(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    tp_overlap: ArrayLike,
    offload_weights: ArrayLike,
    offload_activations: ArrayLike,
) -> BlockPieces:
    """Per block per micro-batch costs. TP: 2 all-reduces (or all-gather + reduce-scatter with
    SP, the same volume) of b·s·h·e bytes in the forward, 2 in the backward, 2 more in a full
    recompute; with TP overlap they hide under the weight GEMMs of those passes."""
    t = np.asarray(tp, dtype=float)
    code = np.asarray(recompute)
    times = block_times(ctx, tp, mb, code, sp)
    activation_bytes = ACTIVATION_BYTES * np.asarray(mb, dtype=float) * ctx.seq_len
    tp_raw = (4 + 2 * (code == 2)) * all_reduce_s(ctx, t, t, activation_bytes * ctx.model.hidden)
    tp_window = times.forward_gemm_s * (3 + (code == 2))
    tp_exposed = np.where(tp_overlap, np.maximum(0.0, tp_raw - tp_window), tp_raw)
    offload_forward, offload_backward = offload_exposed_s(
        ctx,
        offload_weights,
        offload_activations,
        times,
        block_params_per_rank(ctx, tp),
        block_activation_bytes(ctx, tp, mb, code, sp),
    )
    return BlockPieces(
        forward_s=times.forward_s,
        backward_s=times.backward_s,
        recompute_s=times.recompute_s,
        tp_exposed_s=tp_exposed,
        offload_forward_s=offload_forward,
        offload_backward_s=offload_backward,
    )


def pp_message_s(ctx: CostContext, tp: ArrayLike, mb: ArrayLike, span: ArrayLike) -> np.ndarray:
    """One stage-to-stage message of b·s·h·e/t bytes (Megatron's scatter/gather) on the tier
    the whole job spans. Depends on (tp, micro_batch) and the GPU count."""
    nbytes = ACTIVATION_BYTES * np.asarray(mb, dtype=float) * ctx.seq_len * ctx.model.hidden
    return point_to_point_s(ctx, span, nbytes / np.asarray(tp, dtype=float))


def dp_params_per_rank(ctx: CostContext, tp: ArrayLike, pp: ArrayLike) -> np.ndarray:
    """Parameters whose gradients a rank reduces: those of the last stage (blocks + LM head),
    the most of any stage."""
    return stage_params(ctx, tp, pp, last=True).total


def dp_comm_times_s(
    ctx: CostContext,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    recompute: ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(once per step after the backward, once per step before the forward, per micro-batch)
    DP communication times, unhidden. Depends on (tp, pp, dp, zero_stage, recompute)."""
    d = np.asarray(dp)
    span = np.asarray(tp) * d
    zero = np.asarray(zero_stage)
    params = dp_params_per_rank(ctx, tp, pp)
    grads = ctx.grad_bytes * params
    reduce = reduce_scatter_s(ctx, d, span, grads)
    gather = all_gather_s(ctx, d, span, ACTIVATION_BYTES * params)
    gathers_per_micro_batch = 2 + (np.asarray(recompute) == 2)
    after_backward = np.where(
        zero == 0, all_reduce_s(ctx, d, span, grads), np.where(zero == 1, reduce, 0.0)
    )
    before_forward = np.where((zero == 1) | (zero == 2), gather, 0.0)
    per_micro_batch = np.where(
        zero == 2, reduce, np.where(zero == 3, reduce + gathers_per_micro_batch * gather, 0.0)
    )
    return after_backward, before_forward, per_micro_batch


def optimizer_time_s(
    ctx: CostContext,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    offload_optimizer: ArrayLike,
) -> np.ndarray:
    """The optimizer step on the rank's (ZeRO-sharded) state. Depends on (tp, pp, dp,
    zero_stage, offload_optimizer)."""
    shard = np.where(np.asarray(zero_stage) >= 1, 1 / np.asarray(dp, dtype=float), 1.0)
    return optimizer_step_s(ctx, dp_params_per_rank(ctx, tp, pp) * shard, offload_optimizer)


def evaluate_terms(ctx: CostContext, knobs: Knobs) -> StepTerms:
    """Evaluate the cost model on (arrays of) strategies. No validity checks here: callers pass
    strategies that satisfy the rules (planner.rules)."""
    k = knobs.as_dict()
    t = np.asarray(k["tp"], dtype=float)
    p = np.asarray(k["pp"], dtype=float)
    d = np.asarray(k["dp"], dtype=float)
    v = np.asarray(k["interleave"], dtype=float)
    n = ctx.job.global_batch / (d * np.asarray(k["micro_batch"], dtype=float))
    blocks = ctx.model.layers / p

    piece = block_pieces(
        ctx,
        k["tp"],
        k["micro_batch"],
        k["recompute"],
        k["sequence_parallel"],
        k["tp_overlap"],
        k["offload_weights"],
        k["offload_activations"],
    )
    head = lm_head_time_s(ctx, k["tp"], k["micro_batch"])
    pp_per_micro_batch = np.where(
        p > 1, 2 * v * pp_message_s(ctx, k["tp"], k["micro_batch"], t * d * p), 0.0
    )
    per_micro_batch = blocks * piece.total_s + head + pp_per_micro_batch

    after_backward, before_forward, per_mb_comm = dp_comm_times_s(
        ctx, k["tp"], k["pp"], k["dp"], k["zero_stage"], k["recompute"]
    )
    overlap = np.asarray(k["dp_overlap"], dtype=bool)
    backward_window = np.where(overlap, blocks * piece.backward_window_s, 0.0)
    forward_window = np.where(overlap, blocks * piece.forward_window_s, 0.0)
    dp_exposed = (
        np.maximum(0.0, after_backward - backward_window)
        + np.maximum(0.0, before_forward - forward_window)
        + n * np.maximum(0.0, per_mb_comm - forward_window - backward_window)
    )
    optimizer = optimizer_time_s(
        ctx, k["tp"], k["pp"], k["dp"], k["zero_stage"], k["offload_optimizer"]
    )
    step = (n + (p - 1) / v) * per_micro_batch + dp_exposed + optimizer
    model_flops = model_flops_per_step(ctx)
    hardware_flops = model_flops + recompute_flops_per_step(ctx, k["recompute"])
    capacity = step * t * p * d * ctx.peak_flops
    return StepTerms(
        micro_batches=n,
        forward_s=n * (blocks * piece.forward_s + head / 3),
        backward_s=n * (blocks * piece.backward_s + 2 * head / 3),
        recompute_s=n * blocks * piece.recompute_s,
        tp_comm_s=n * blocks * piece.tp_exposed_s,
        pp_comm_s=n * pp_per_micro_batch,
        offload_s=n * blocks * (piece.offload_forward_s + piece.offload_backward_s),
        bubble_s=(p - 1) / v * per_micro_batch,
        dp_comm_s=dp_exposed,
        optimizer_s=optimizer,
        step_time_s=step,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        mfu=model_flops / capacity,
        hfu=hardware_flops / capacity,
        tokens_per_s=ctx.job.global_batch * ctx.seq_len / step,
        first_stage=stage_memory(ctx, k, n, last=False),
        last_stage=stage_memory(ctx, k, n, last=True),
    )
