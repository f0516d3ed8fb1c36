"""The communication each parallel dimension adds to a step and the share of it that stays exposed:
context parallelism's K/V ring per block, the pipeline's point-to-point activations, and data
parallelism's gradient reductions and ZeRO gathers per block, bucket or buffer (the formulas:
planner.cost.step's docstring, DESIGN.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import calculon
from planner.cost.compute import BlockTimes
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.flops import (
    ArrayLike,
    kv_heads_per_rank,
)
from planner.cost.memory import (
    StageParams,
)
from planner.cost.network import (
    point_to_point_s,
    ring_parts_s,
)
from planner.cost.precision import block_weight_bytes
from planner.specs import PLACEMENT_CODES, StackProfile


def recomputed_tp_gathers(ctx: CostContext, recompute: ArrayLike) -> np.ndarray:
    """TP all-gathers per collective site (the attention's and a dense FFN's) that the
    backward's recompute runs again: 1 under selective recompute with torchtitan's per-op
    policy, else 0 (full recompute repeats the whole forward, counted by the caller).

    torchtitan's policy saves the outputs of every other mm, SDPA and the TP reduce-scatters
    and prefers to recompute the rest (pytorch/torchtitan@820504e
    torchtitan/models/llama3/parallelize_llama.py ``_save_list``, ``_custom_policy``): the
    recomputed wk and w3 (planner.cost.flops.recomputed_gemm_shares) read the sequence-parallel
    all-gathers of the attention and FFN inputs (its TP plan's PrepareModuleInput, Shard(1) →
    Replicate), which are not saved, so both gathers run again; torch.compile's partitioner
    recomputes a collective that a user's checkpoint region tags for recompute (PyTorch
    torch/_functorch/partitioners.py ``force_save_collectives``). The reduce-scatter outputs
    are saved and are not redone."""
    code = np.asarray(recompute)
    op_policy = ctx.stack.selective_policy == "torchtitan_op"
    return np.where((code == 1) & op_policy, 1.0, 0.0)


def tp_collective_passes(ctx: CostContext, recompute: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(reduce-scatters, all-gathers) per TP collective site of a block per micro-batch: one
    of each in the forward, the backward and a full recompute (with SP; without it each pair
    is one all-reduce of the same volume), and the gathers a per-op selective recompute runs
    again (recomputed_tp_gathers)."""
    code = np.asarray(recompute)
    scatters = 2.0 + (code == 2)
    return scatters, scatters + recomputed_tp_gathers(ctx, code)


def sp_gather_bytes(ctx: CostContext) -> float:
    """Bytes per element of a sequence-parallel all-gather's tensor: 2 (bf16), or, for the
    low-precision share of the blocks under a recipe that casts the local shard before it
    gathers (PrecisionRecipe.quantized_gather: torchao's tensorwise Float8ColwiseParallel,
    Transformer Engine), the recipe's 1-byte format (its ``param_bytes``)."""
    recipe, share = ctx.recipe, ctx.low_precision_share
    if not recipe.quantized_gather or recipe.param_bytes is None:
        return float(ACTIVATION_BYTES)
    return (1 - share) * ACTIVATION_BYTES + share * recipe.param_bytes


def sp_layout_copy_s(
    ctx: CostContext,
    tp: ArrayLike,
    local_mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    sites: ArrayLike,
) -> np.ndarray:
    """Seconds per block of the layout copies a stack with ``sp_layout_copies`` makes around
    its sequence-parallel collectives (0 otherwise, without SP or at t = 1):
    each all-gather and reduce-scatter (one of each per collective site, ``sites``, in the
    forward, the backward and a full recompute, and the re-run gathers of
    recomputed_tp_gathers: tp_collective_passes) copies the whole b·s·h tensor once, reading
    and writing it (2·e·b·s·h bytes; e = 2, or sp_gather_bytes for a gather) at the
    memory-bound rate.

    Source: PyTorch torch/distributed/_functional_collectives.py, which DTensor's
    Shard(1) ↔ Replicate redistributions call: all_gather_tensor with gather_dim != 0 runs
    ``torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)`` after the gather,
    reduce_scatter_tensor with scatter_dim != 0 ``torch.cat(torch.chunk(self, group_size,
    dim=scatter_dim))`` before it. torchtitan's Llama TP plan shards its [b, s, h] activations
    on dim 1 (pytorch/torchtitan@820504e torchtitan/models/llama3/parallelize_llama.py
    apply_tp, whose note says folding b and s would accelerate Sequence Parallel); its PR #437
    measured the two cats at 0.18 ms of an 8k-token FFN's 3 ms on an H100 (6 %). AsyncTP
    (tp_overlap) replaces the cats by its fused ops' own passes of about the same size, and the
    same copy is charged: _fused_matmul_reduce_scatter_impl (PyTorch
    torch/distributed/_symmetric_memory/__init__.py) sums the t partial products in a pass of
    its own over the whole b·s·h output (``reduce_fn``, where NCCL's reduce-scatter reduces in
    flight) after moving the scatter dim of its input to the front, and
    _fused_all_gather_matmul_impl returns the gathered input as a strided view
    (``unflatten``: movedim(0, gather_dim)) that cannot be flattened to the [b·s, h] matrix
    of the weight-gradient GEMM without a copy."""
    t = np.asarray(tp, dtype=float)
    code = np.asarray(recompute)
    if not ctx.stack.sp_layout_copies:
        return np.zeros(np.broadcast(t, code).shape)
    scatters, gathers = tp_collective_passes(ctx, code)
    site_count = np.asarray(sites, dtype=float)
    elements = np.asarray(local_mb, dtype=float) * ctx.seq_len * ctx.model.hidden
    copied = site_count * (scatters * ACTIVATION_BYTES + gathers * sp_gather_bytes(ctx)) * elements
    seconds = 2 * copied / ctx.memory_bound_bytes_per_s
    applies = np.asarray(sp, dtype=bool) & (t > 1)
    return np.where(applies, seconds, 0.0)


def cp_exposed_s(
    ctx: CostContext,
    tp: ArrayLike,
    cp: ArrayLike,
    local_mb: np.ndarray,
    recompute: np.ndarray,
    times: BlockTimes,
) -> np.ndarray:
    """Exposed K/V ring traffic of context parallelism per block per micro-batch (0 for cp = 1):
    per pass, max(0, ring time − attention-core time); the backward moves twice the forward's
    bytes, and a full recompute repeats the forward's ring."""
    m = ctx.model
    c = np.asarray(cp, dtype=float)
    chunk_bytes = 2 * local_mb * ctx.seq_len * kv_heads_per_rank(ctx, tp) * m.head_dim
    step_s = point_to_point_s(ctx, np.asarray(tp) * c, ACTIVATION_BYTES * chunk_bytes)
    ring_forward = (c - 1) * step_s
    forward = np.maximum(0.0, ring_forward - times.attention_forward_s)
    backward = np.maximum(0.0, 2 * ring_forward - times.attention_backward_s)
    return np.where(c > 1, forward * (1 + (recompute == 2)) + backward, 0.0)


def pp_message_s(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    span: ArrayLike,
    cp: ArrayLike = 1,
    sp: ArrayLike = True,
) -> np.ndarray:
    """One stage-to-stage transfer: the b·s·h·e/cp bytes of a micro-batch's activations (each
    CP rank sends its own chunk), divided over the t TP ranks where sequence parallelism has
    split them or the stack scatters them (StackProfile.pp_scatter_gather), whole from each TP
    rank otherwise, and the stack's pp_messages_per_transfer − 1 metadata messages beside
    them, on the tier the whole job spans (network.point_to_point_s). Depends on (tp, cp,
    micro_batch), sequence parallelism where the stack does not scatter, and the GPU count."""
    local_mb = np.asarray(mb, dtype=float) / np.asarray(cp, dtype=float)
    nbytes = ACTIVATION_BYTES * local_mb * ctx.seq_len * ctx.model.hidden
    split = np.asarray(sp, dtype=bool) | ctx.stack.pp_scatter_gather
    shares = np.where(split, np.asarray(tp, dtype=float), 1.0)
    return point_to_point_s(ctx, span, nbytes / shares, ctx.stack.pp_messages_per_transfer)


def pp_transfers(ctx: CostContext, stage: str) -> int:
    """Stage-to-stage transfers per micro-batch and model chunk on a ``stage``'s critical path
    where the stack does not overlap them: the first stage sends activations and receives
    gradients, the last receives activations and sends gradients (2); a middle stage does
    both, 4 where the stack runs each transfer after the one before
    (StackProfile.pp_serial_transfers: nanotron's send, receive, send, receive, each waited
    on), 2 where it batches each send with the receive beside it."""
    return 4 if stage == "middle" and ctx.stack.pp_serial_transfers else 2


def group_spans(
    tp: ArrayLike, cp: ArrayLike, pp: ArrayLike, dp: ArrayLike, placement: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(GPUs a DP group spans, GPUs the pipeline spans) under the rank order: t·c·d and t·c·d·p
    for TP, CP, DP, PP; t·c·p·d and t·c·p for TP, PP, DP."""
    inner = np.asarray(tp) * np.asarray(cp)
    p, d = np.asarray(pp), np.asarray(dp)
    pp_inside = np.asarray(placement) == PLACEMENT_CODES["tp-pp-dp"]
    return inner * d * np.where(pp_inside, p, 1), inner * p * np.where(pp_inside, 1, d)


@dataclass(frozen=True)
class DpCommTimes:
    """A stage's DP communication per step, unhidden: the transfer (bandwidth) parts, which
    hide under compute with DP overlap, and the ring latencies, which never do."""

    after_backward_s: np.ndarray
    """Once per step, after the last backward (ZeRO-0 all-reduce, ZeRO-1 reduce-scatter)."""
    before_forward_s: np.ndarray
    """Once per step, before the first forward (ZeRO-1/2 weight all-gather)."""
    per_micro_batch_s: np.ndarray
    """Every micro-batch (ZeRO-2 reduce-scatter; ZeRO-3 also the weight all-gathers)."""
    latency_per_step_s: np.ndarray
    """Ring latency of the once-per-step collectives."""
    latency_per_micro_batch_s: np.ndarray
    """Ring latency of the per-micro-batch collectives."""


def dp_collectives(
    ctx: CostContext,
    params: ArrayLike,
    blocks: ArrayLike,
    ranks: ArrayLike,
    zero_stage: ArrayLike = 0,
) -> np.ndarray:
    """Collectives one DP reduction or gather of a stage's ``params`` (over ``blocks`` blocks)
    takes on ``ranks`` ranks, by the stack's unit (StackProfile.dp_collective_unit, or
    zero3_collective_unit under ZeRO-3 where the stack sets it): one per block plus one for
    the embedding/head (FSDP), ⌈params / max(b₀, b₁·g)⌉ buckets (Megatron-Core's DDP:
    b₀ = 40M, b₁ = 1M), or one for the whole buffer; ZeRO-1/2 and ZeRO-3 take their own
    units where the stack states them (zero1_collective_unit, zero3_collective_unit)."""
    stack = ctx.stack

    def count(unit: str) -> np.ndarray:
        if unit == "block":
            return np.asarray(blocks, dtype=float) + 1.0
        if unit == "buffer":
            return np.ones(np.shape(params))
        bucket = np.maximum(
            stack.dp_bucket_params,
            stack.dp_bucket_params_per_rank * np.asarray(ranks, dtype=float),
        )
        return np.maximum(1.0, np.ceil(np.asarray(params, dtype=float) / bucket))

    zero = np.asarray(zero_stage)
    counts = count(stack.dp_collective_unit)
    if stack.zero1_collective_unit is not None:
        counts = np.where((zero == 1) | (zero == 2), count(stack.zero1_collective_unit), counts)
    if stack.zero3_collective_unit is not None:
        counts = np.where(zero == 3, count(stack.zero3_collective_unit), counts)
    return counts


def regathers_under_recompute(stack: StackProfile) -> bool:
    """Whether full recompute gathers ZeRO-3's weights again. FSDP (per-block units)
    recomputes a block inside that block's backward, whose weights are gathered already; other
    ZeRO-3 implementations gather them again for the recompute. The unit is ZeRO-3's own where
    the stack sets one (Megatron-FSDP's per-layer units). Where it does not, DP traffic does not
    depend on recompute (the solver's DP tables then drop that axis)."""
    return (stack.zero3_collective_unit or stack.dp_collective_unit) != "block"


def dp_comm_times_s(
    ctx: CostContext,
    params: StageParams,
    blocks: ArrayLike,
    span: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    recompute: ArrayLike,
    cp: ArrayLike = 1,
    expert_dp: ArrayLike = 1,
    interleave: ArrayLike = 1,
    pp: ArrayLike = 1,
) -> DpCommTimes:
    """DP communication of a stage of ``blocks`` blocks whose ranks hold ``params`` each, over
    the d·cp ranks that hold the same weights, spanning ``span`` GPUs (group_spans); the
    routed experts among them are reduced over their ``expert_dp`` ranks
    (planner/cost/experts.py) on the same span, after the dense ones. Each collective pays the
    ring latency once (network.ring_latency_s: g − 1 hops at the latency of the tier each
    crosses; dp_collectives says how many collectives there are): measured, MPT's step on
    H100s grows with the GPU count at a fixed per-GPU batch by 2–9 µs per added ring step per
    per-block collective (llm-foundry's H100 table, 128 → 512 GPUs; the model: every hop at the
    scale-out latency once the ring leaves its domain) while its transfers hide under compute —
    a ring is a chain of g−1 dependent hand-offs that the compute kernels on every rank delay.
    Depends on (tp, cp, dp, zero_stage, recompute, ep, expert_tp), the stage's layout and the
    placement. Under Calculon's arithmetic, Calculon's per-block collectives
    (calculon.dp_parts_s): the hideable part after the backward, the rest a latency that never
    hides: the last chunk's share after the backward, the other chunks' before the forward
    (their windows: step.evaluate_terms), depending on the interleave v. The parameter
    all-gathers (ZeRO-1/2's once per step, ZeRO-3's per micro-batch) move the blocks'
    parameters at precision.block_weight_bytes (the recipe's format under JobSpec.fp8_params:
    Megatron-Core's distributed optimizer and Megatron FSDP gather the fp8 parameters) and the
    embedding/head at 2 bytes; the gradient reductions are unchanged. Where the stack reshards
    nothing under PP (StackProfile.zero3_unsharded_under_pp, torchtitan) ZeRO-3 with pp > 1
    gathers each unit once per step, before the first forward, and reduce-scatters its
    accumulated gradients once, after the last backward: ZeRO-1's pattern, per unit."""
    if ctx.calculon:
        ranks = np.asarray(dp) * np.asarray(cp)
        last, others, shown = calculon.dp_parts_s(
            ctx, params.block, blocks, ranks, span, zero_stage, interleave
        )
        nothing = np.zeros_like(shown)
        return DpCommTimes(last, others, nothing, shown, nothing)
    zero = np.asarray(zero_stage)
    regathers = regathers_under_recompute(ctx.stack)
    gathers_per_micro_batch = 2 + regathers * (np.asarray(recompute) == 2)
    experts = np.asarray(params.experts, dtype=float)
    # (ranks, parameters, of which block parameters): the blocks' gather at block_weight_bytes
    dense_blocks = np.asarray(params.blocks, dtype=float) - experts
    groups = [
        (
            np.asarray(dp) * np.asarray(cp),
            np.asarray(params.total, dtype=float) - experts,
            dense_blocks,
        )
    ]
    if ctx.model.is_moe:
        groups.append((np.asarray(expert_dp, dtype=float), experts, experts))
    weight_bytes = block_weight_bytes(ctx)
    once_per_step = ctx.stack.zero3_unsharded_under_pp & (zero == 3) & (np.asarray(pp) > 1)
    sharded_per_mb = (zero == 3) & ~once_per_step
    zero1_all_reduce = ctx.stack.zero1_all_reduce
    after = before = per_mb = latency_step = latency_mb = 0.0
    for ranks, group_params, block_params in groups:
        grads = ctx.grad_bytes * group_params
        gathered = ACTIVATION_BYTES * (group_params - block_params) + weight_bytes * block_params
        count = dp_collectives(ctx, group_params, blocks, ranks, zero)
        ar_t, ar_l = ring_parts_s(ctx, ranks, span, grads, count, passes=2)
        rs_t, rs_l = ring_parts_s(ctx, ranks, span, grads, count)
        ag_t, ag_l = ring_parts_s(ctx, ranks, span, gathered, count)
        if zero1_all_reduce:  # the stack all-reduces the whole gradients under ZeRO-1
            rs_t, rs_l = np.where(zero == 1, ar_t, rs_t), np.where(zero == 1, ar_l, rs_l)
        once_reduce = (zero == 1) | once_per_step
        once_gather = (zero == 1) | (zero == 2) | once_per_step
        after = after + np.where(zero == 0, ar_t, np.where(once_reduce, rs_t, 0.0))
        before = before + np.where(once_gather, ag_t, 0.0)
        per_mb = per_mb + np.where(
            zero == 2, rs_t, np.where(sharded_per_mb, rs_t + gathers_per_micro_batch * ag_t, 0.0)
        )
        present = group_params > 0
        step_latency = np.where(zero == 0, ar_l, np.where(once_reduce, rs_l, 0.0))
        step_latency = step_latency + np.where(once_gather, ag_l, 0.0)
        mb_latency = np.where(
            zero == 2, rs_l, np.where(sharded_per_mb, rs_l + gathers_per_micro_batch * ag_l, 0.0)
        )
        latency_step = latency_step + np.where(present, step_latency, 0.0)
        latency_mb = latency_mb + np.where(present, mb_latency, 0.0)
    return DpCommTimes(
        after_backward_s=np.asarray(after),
        before_forward_s=np.asarray(before),
        per_micro_batch_s=np.asarray(per_mb),
        latency_per_step_s=np.asarray(latency_step),
        latency_per_micro_batch_s=np.asarray(latency_mb),
    )
