"""Step time and memory of whole strategies, vectorised over knob arrays.

With n = B/(d·b) micro-batches per pipeline, k_i blocks on stage i (L/p each unless the strategy
states ``stage_layers``) and v virtual stages per rank, the 1F1B (interleaved) schedule takes
(Narayanan et al. SC21 §2.2):

    pipeline = (n + (p − 1)/v) · T
    T        = max_i (k_i · U + [i last] · head + PP comm_i)
    U        = fwd + bwd + recompute + TP, CP and offload exposed

per step, where every term of T is per micro-batch on the slowest stage (with partial
recompute, Megatron's block method, r = min(recompute_layers, k_i) of a stage's blocks cost U
under full recompute and the other k_i − r U under the strategy's base mode): the LM head runs
on the last, PP comm is 2·v point-to-point messages of M = b·s·h·e/t bytes' time (activations
forward, gradients backward; Megatron's scatter/gather optimisation divides them by t). Where
the stack overlaps pipeline sends and receives with compute (interleaved schedule only), the v
forward messages hide under the stage's forward pass and the v backward ones under its backward,
and only the excess shows: PP comm_i = max(0, v·M − F_i) + max(0, v·M − B_i) (pp_exposed_s). The
bubble is the (p − 1)/v · T part. Then

    step = pipeline + DP exposed + optimizer step + the stack's per-step overhead.

Ranks are ordered TP, CP, DP, PP (Megatron-Core's default order): a CP group spans t·cp GPUs, a
DP group t·cp·d, the pipeline t·cp·d·p; or TP, PP, DP (``--use-tp-pp-dp-mapping``, cp = 1): the
pipeline spans t·p GPUs and a DP group t·p·d (group_spans). Context parallelism (Megatron-Core's
ring attention) passes each rank's K and V chunk around the cp ranks: (cp − 1) point-to-point
steps of 2·(b·s/cp)·k·d_h/t·e bytes per block forward, twice that backward (K, V and their
gradients), each hidden under the attention core of the chunk in hand; the excess is exposed.
Weights are replicated over cp, so the gradients are reduced over the d·cp ranks.

DP communication per step, NCCL's rings over d·cp ranks spread over t·cp·d GPUs (network.py):
ZeRO-0 all-reduces the gradients; ZeRO-1 reduce-scatters them and all-gathers the updated
weights; ZeRO-2 reduce-scatters them every micro-batch (sharded gradients cannot accumulate) and
all-gathers the weights once; ZeRO-3 also all-gathers the weights before each forward and backward
(and the recompute, except under FSDP, whose recompute runs inside the block's backward) of every
micro-batch. With DP overlap, the once-per-step reduction hides
under the backward of the last micro-batch, the weight all-gather under the forward of the first,
and per-micro-batch traffic under that micro-batch's passes — ZeRO-2's gradient reduce-scatter
under the backward that produces the gradients (DeepSpeed's overlap_comm overlaps the reduction
with the backward), ZeRO-3's gathers and reduce-scatter under the forward and backward:
exposed = max(0, comm − window), where a window is the stage's pass including its exposed
offload stalls (the DP link is free while the stage waits on its offload link). No window hides
two transfers: ZeRO-2's weight gather has the forward of the first micro-batch to itself (with
the forward counted for both, a longer offload stall had shortened the step). Only the
transfers hide: each collective's ring latency (its g − 1 hops, each at its tier's latency) shows
in full, once per block (FSDP stacks; Megatron-Core's ZeRO-3, Megatron-FSDP), per bucket
(Megatron-Core, DeepSpeed) or per buffer, as the stack's dp_collective_unit (zero3_collective_unit
under ZeRO-3) says (dp_comm_times_s, dp_collectives). Each stage
reduces its own gradients under its own passes, so the DP term is the worst stage kind's (first,
middle, last), as is the optimizer step. Mixture-of-experts blocks add the expert-parallel token
dispatch and combine to U and reduce their routed experts' gradients over the
expert-data-parallel ranks (planner/cost/experts.py). Overlaps are what the stack can do: a
strategy's ``dp_overlap`` or ``tp_overlap`` takes effect only where its stack profile has it; TP
overlap leaves the stack's ``tp_overlap_contention`` share of the hidden time exposed.

Over 500 lines by design: the step's composition (block pieces, stages, pipeline, DP exposure,
optimizer) is one formula that evaluation, the solver's tables and the oracle share; the
Calculon arithmetic's hooks (planner/cost/calculon.py) took it past 500.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from planner.cost import calculon
from planner.cost.axonn_comm import axonn_exposed_s
from planner.cost.compute import block_times, lm_head_time_s
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.experts import expert_dp_size, expert_exposed_s, expert_traffic_s
from planner.cost.flops import (
    ArrayLike,
    model_flops_per_step,
    recompute_flops_per_step,
)
from planner.cost.interleave import bubble_share, chunk_overhead_s, fill_drain_messages_s
from planner.cost.knobs import Knobs
from planner.cost.memory import (
    STAGES,
    StageMemory,
    block_activation_bytes,
    block_params_per_rank,
    stage_memory,
    stage_params,
)
from planner.cost.network import reduce_scatter_s
from planner.cost.offload import offload_exposed_s, offloaded_share, optimizer_step_s
from planner.cost.parallel_comm import (
    DpCommTimes,
    cp_exposed_s,
    dp_comm_times_s,
    group_spans,
    pp_message_s,
    pp_transfers,
    sp_layout_copy_s,
    tp_collective_passes,
)
from planner.specs import RECOMPUTE_CODES


@dataclass(frozen=True)
class StepTerms:
    """Everything the cost model says about a batch of strategies (arrays, broadcast shape)."""

    micro_batches: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    tp_comm_s: np.ndarray
    cp_comm_s: np.ndarray
    ep_comm_s: np.ndarray
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
    middle_stage: StageMemory
    """The second stage, the first of those between the first and the last (where pp > 2;
    otherwise a copy of the first stage's memory)."""
    last_stage: StageMemory

    def breakdown(self) -> dict[str, np.ndarray]:
        """Step-time terms that add up to ``step_time_s``."""
        return {
            "forward": self.forward_s,
            "backward": self.backward_s,
            "recompute": self.recompute_s,
            "tp_comm": self.tp_comm_s,
            "cp_comm": self.cp_comm_s,
            "ep_comm": self.ep_comm_s,
            "pp_comm": self.pp_comm_s,
            "offload": self.offload_s,
            "bubble": self.bubble_s,
            "dp_comm": self.dp_comm_s,
            "optimizer": self.optimizer_s,
        }

    @property
    def stages(self) -> tuple[StageMemory, StageMemory, StageMemory]:
        return (self.first_stage, self.middle_stage, self.last_stage)

    @property
    def hbm_bytes(self) -> np.ndarray:
        """HBM needed per GPU: the most loaded stage."""
        return np.maximum.reduce([stage.hbm_total for stage in self.stages])

    def offload_bytes(self, tier: int) -> np.ndarray:
        """Bytes per GPU in offload tier ``tier`` (≥ 1), the most loaded stage."""
        return np.maximum.reduce([stage.offloaded[tier - 1] for stage in self.stages])


@dataclass(frozen=True)
class BlockPieces:
    """Seconds per block per micro-batch on one rank: compute, and the exposed TP, CP, expert
    and offload time. Depends on (tp, cp, micro_batch, recompute, sequence_parallel,
    tp_overlap, ep, expert_tp, offload_weights, offload_activations)."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    tp_exposed_s: np.ndarray
    cp_exposed_s: np.ndarray
    ep_exposed_s: np.ndarray
    offload_forward_s: np.ndarray
    offload_backward_s: np.ndarray
    calculon_window_s: np.ndarray
    """Under Calculon's arithmetic, what DP traffic hides under in a block's backward: its
    flop time and recompute (Calculon's DP cannot overlap HBM traffic) with the offload
    stalls; 0 otherwise."""

    @property
    def total_s(self) -> np.ndarray:
        """Everything one block costs per micro-batch on the stage's critical path."""
        return (
            self.forward_s
            + self.backward_s
            + self.recompute_s
            + self.tp_exposed_s
            + self.cp_exposed_s
            + self.ep_exposed_s
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
    cp: ArrayLike = 1,
    ep: ArrayLike = 1,
    expert_tp: ArrayLike = 0,
    optimizer_link_s: ArrayLike = 0.0,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> BlockPieces:
    """Per block per micro-batch costs on one rank (b/cp of the micro-batch's tokens). TP: a
    reduce-scatter and an all-gather (with SP; without it one all-reduce of the same volume,
    priced as the two: one more NCCL base latency) of b·s·h·e/cp bytes
    after attention and one after a dense FFN, in the forward, the backward and a full
    recompute (and the all-gathers a per-op selective recompute re-runs:
    parallel_comm.tp_collective_passes); an MoE block's FFN has one only for its shared
    experts (its routed experts' traffic is the expert term, planner/cost/experts.py); with TP
    overlap (where the stack has it) they hide under the weight GEMMs of those passes. A stack
    that gathers on the sequence dimension adds its layout copies (parallel_comm.
    sp_layout_copy_s) to the TP term. CP: the K/V ring of the module
    docstring. Under Calculon's arithmetic the TP term is Calculon's per-GEMM tiled overlap
    (calculon.calculon_block tp_s) and ``optimizer_link_s`` the optimizer state streamed in
    each backward (calculon.optimizer_stream_s). Under a stack that runs AxoNN's tensor
    parallelism (StackProfile.tp_form), AxoNN's collectives on the (``column``, tp/(column·depth),
    ``depth``) grid instead of Megatron's (planner/cost/axonn_comm.py; a mixture of experts keeps
    Megatron's accounting, its grid being 1D)."""
    m = ctx.model
    t = np.asarray(tp, dtype=float)
    code = np.asarray(recompute)
    local_mb = np.asarray(mb, dtype=float) / np.asarray(cp, dtype=float)
    times = block_times(ctx, tp, mb, code, sp, cp, ep, column, depth)
    activation_bytes = ACTIVATION_BYTES * local_mb * ctx.seq_len
    ffn_collectives = 1 - m.moe_share + m.moe_share * (m.shared_experts > 0)
    scatters, gathers = tp_collective_passes(ctx, code)
    tensor_bytes = activation_bytes * m.hidden
    # each collective a reduce-scatter or an all-gather of the tensor (an all-reduce without
    # SP priced as the two, one NCCL base latency more: the TP term then does not depend on SP)
    one_pass = reduce_scatter_s(ctx, t, t, tensor_bytes)
    tp_raw = (1 + ffn_collectives) * (scatters + gathers) * one_pass
    tp_window = times.forward_gemm_s * (3 + (code == 2))
    hidden = np.minimum(tp_raw, tp_window)
    overlapped = tp_raw - hidden * (1 - ctx.stack.tp_overlap_contention)
    overlap_on = np.asarray(tp_overlap, dtype=bool) & ctx.stack.tp_overlap
    copies = sp_layout_copy_s(ctx, tp, local_mb, code, sp, 1 + ffn_collectives)
    tp_exposed = np.where(overlap_on, overlapped, tp_raw) + copies
    if ctx.calculon:
        overlap = np.asarray(tp_overlap, dtype=bool) & ctx.stack.tp_overlap
        tp_exposed = calculon.calculon_block(ctx, tp, mb, code, sp, overlap).tp_s
    elif ctx.stack.tp_form == "axonn" and not m.is_moe:
        tp_exposed = axonn_exposed_s(ctx, tp, column, depth, local_mb, code, times, tp_overlap)
    expert_traffic = expert_traffic_s(ctx, tp, expert_tp, ep, local_mb, code)
    compute_s = times.forward_s + times.backward_s + times.recompute_s
    offload_forward, offload_backward = offload_exposed_s(
        ctx,
        offload_weights,
        offload_activations,
        times,
        block_params_per_rank(ctx, tp, ep, expert_tp),
        block_activation_bytes(ctx, tp, local_mb, code, sp, column, depth),
        optimizer_link_s,
    )
    return BlockPieces(
        forward_s=times.forward_s,
        backward_s=times.backward_s,
        recompute_s=times.recompute_s,
        tp_exposed_s=tp_exposed,
        cp_exposed_s=cp_exposed_s(ctx, tp, cp, local_mb, code, times),
        ep_exposed_s=expert_exposed_s(ctx, expert_traffic, compute_s),
        offload_forward_s=offload_forward,
        offload_backward_s=offload_backward,
        calculon_window_s=(
            times.offload_backward_window + offload_backward if ctx.calculon else np.zeros(())
        ),
    )


def stage_pieces(
    base: BlockPieces, full: BlockPieces | None, blocks: np.ndarray, recompute_layers: ArrayLike
) -> BlockPieces:
    """A stage's per-micro-batch sums of the block pieces: (k − r)·base + r·full per field,
    with r = min(recompute_layers, k) blocks fully recomputed (Megatron's block method) and
    ``full`` the pieces under full recompute (None where no strategy recomputes partly)."""
    k = np.asarray(blocks, dtype=float)
    if full is None:
        return BlockPieces(**{f.name: k * getattr(base, f.name) for f in fields(BlockPieces)})
    r = np.minimum(np.asarray(recompute_layers, dtype=float), k)
    return BlockPieces(
        **{
            f.name: (k - r) * getattr(base, f.name) + r * getattr(full, f.name)
            for f in fields(BlockPieces)
        }
    )


def optimizer_time_s(
    ctx: CostContext,
    params: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    offload_optimizer: ArrayLike,
    cp: ArrayLike = 1,
    expert_params: ArrayLike = 0,
    expert_dp: ArrayLike = 1,
    tp: ArrayLike = 1,
    blocks: ArrayLike = 1,
) -> np.ndarray:
    """The optimizer step on a stage's rank state, ``params`` parameters of which
    ``expert_params`` routed experts, ZeRO-sharded over d·cp ranks (the experts over their
    ``expert_dp``), plus the stack's fixed per-step overhead. Under Calculon's arithmetic,
    Calculon's step of the stage's ``blocks`` blocks at ``tp`` (calculon.optimizer_step_s)."""
    if ctx.calculon:
        ranks = np.asarray(dp, dtype=float) * np.asarray(cp, dtype=float)
        return calculon.optimizer_step_s(ctx, tp, blocks, ranks, zero_stage) + (
            ctx.stack.step_overhead_s
        )
    experts = np.asarray(expert_params, dtype=float)
    dense = np.asarray(params, dtype=float) - experts
    sharded = np.asarray(zero_stage) >= 1
    dense_ranks = np.asarray(dp, dtype=float) * np.asarray(cp, dtype=float)
    held = np.where(
        sharded, dense / dense_ranks + experts / np.asarray(expert_dp, dtype=float), dense + experts
    )
    return optimizer_step_s(ctx, held, offload_optimizer) + ctx.stack.step_overhead_s


def layout_blocks(
    ctx: CostContext, pp: ArrayLike, first: ArrayLike, middle: ArrayLike, last: ArrayLike
) -> dict[str, np.ndarray]:
    """{stage kind: blocks}; a 0 stands for the even layout's layers / pp."""
    even = ctx.model.layers / np.asarray(pp, dtype=float)
    given = {"first": first, "middle": middle, "last": last}
    return {
        stage: np.where(np.asarray(value) > 0, np.asarray(value, dtype=float), even)
        for stage, value in given.items()
    }


def stage_present(pp: ArrayLike, stage: str) -> np.ndarray:
    """Whether a pipeline of pp stages has a stage of this kind distinct from the others: the
    first and last always (the same stage when p = 1), a middle one when p > 2."""
    p = np.asarray(pp)
    return p > 2 if stage == "middle" else np.ones(p.shape, dtype=bool)


def evaluate_terms(ctx: CostContext, knobs: Knobs) -> StepTerms:
    """Evaluate the cost model on (arrays of) strategies. No validity checks here: callers pass
    strategies that satisfy the rules (planner.space.rules).

    With uneven stages the pipeline is the slowest stage's timeline (n + (p − 1)·s)·T, T its
    micro-batch time (first·U, middle·U or last·U + head, with its PP messages) and s its bubble
    share (interleave.bubble_share: 1/v, or c_max/k for unequal virtual stages), and every
    per-micro-batch term is that stage's; DP exposure and the optimizer step are the worst
    stage's (each stage reduces its own gradients under its own compute)."""
    k = knobs.as_dict()
    t = np.asarray(k["tp"], dtype=float)
    c = np.asarray(k["cp"], dtype=float)
    p = np.asarray(k["pp"], dtype=float)
    d = np.asarray(k["dp"], dtype=float)
    v = np.asarray(k["interleave"], dtype=float)
    n = ctx.job.global_batch / (d * np.asarray(k["micro_batch"], dtype=float))
    blocks = layout_blocks(ctx, p, k["first_blocks"], k["middle_blocks"], k["last_blocks"])

    optimizer_link = (
        calculon.optimizer_stream_s(
            ctx, k["tp"], d * c, k["zero_stage"], k["offload_optimizer"], offloaded_share
        )
        if ctx.calculon
        else 0.0
    )

    def pieces(recompute: ArrayLike) -> BlockPieces:
        return block_pieces(
            ctx,
            k["tp"],
            k["micro_batch"],
            recompute,
            k["sequence_parallel"],
            k["tp_overlap"],
            k["offload_weights"],
            k["offload_activations"],
            k["cp"],
            k["ep"],
            k["expert_tp"],
            optimizer_link,
            k["tp_column"],
            k["tp_depth"],
        )

    partial = np.asarray(k["recompute_layers"])
    full = pieces(RECOMPUTE_CODES["full"]) if np.any(partial > 0) else None
    stage = {
        kind: stage_pieces(pieces(k["recompute"]), full, blocks[kind], partial) for kind in STAGES
    }
    head = lm_head_time_s(ctx, k["tp"], k["micro_batch"], k["cp"])
    dp_span, pipeline_span = group_spans(t, c, p, d, k["placement"])
    message = np.where(
        p > 1,
        pp_message_s(ctx, k["tp"], k["micro_batch"], pipeline_span, c, k["sequence_parallel"]),
        0.0,
    )
    hidden_p2p = (v > 1) & ctx.stack.pp_overlap
    chunks_s = chunk_overhead_s(ctx, p, v)
    pp_s = {
        kind: pp_exposed_s(message, v, stage[kind], hidden_p2p, pp_transfers(ctx, kind)) + chunks_s
        for kind in STAGES
    }
    first_s = stage["first"].total_s + pp_s["first"]
    middle_s = np.where(stage_present(p, "middle"), stage["middle"].total_s + pp_s["middle"], 0.0)
    last_s = stage["last"].total_s + head + pp_s["last"]
    # Each stage's own timeline: its n micro-batches and its p − 1 fill and drain chunk steps
    # (bubble share s of its T: 1/v for equal chunks, c_max/k for unequal ones); the slowest
    # stage's sets the step. With equal shares that is the stage of the largest T.
    share = {kind: bubble_share(v, k["chunk_blocks"], blocks[kind]) for kind in STAGES}
    spans_s = {
        kind: (n + (p - 1) * share[kind]) * time_s
        for kind, time_s in (("first", first_s), ("middle", middle_s), ("last", last_s))
    }
    slowest_span_s = np.maximum.reduce(list(spans_s.values()))
    last_slowest = spans_s["last"] >= slowest_span_s
    first_slowest = ~last_slowest & (spans_s["first"] >= spans_s["middle"])
    critical = BlockPieces(
        **{
            f.name: np.where(
                last_slowest,
                getattr(stage["last"], f.name),
                np.where(
                    first_slowest, getattr(stage["first"], f.name), getattr(stage["middle"], f.name)
                ),
            )
            for f in fields(BlockPieces)
        }
    )
    critical_head = np.where(last_slowest, head, 0.0)
    pp_per_micro_batch = np.where(
        last_slowest, pp_s["last"], np.where(first_slowest, pp_s["first"], pp_s["middle"])
    )
    per_micro_batch = np.where(last_slowest, last_s, np.where(first_slowest, first_s, middle_s))
    critical_share = np.where(
        last_slowest, share["last"], np.where(first_slowest, share["first"], share["middle"])
    )
    bubble = (p - 1) * critical_share * per_micro_batch
    if not ctx.calculon:  # Calculon's bubble is (p − 1)/v·T (planner/cost/calculon.py)
        bubble = bubble + fill_drain_messages_s(p, v, message, hidden_p2p)

    overlap = dp_overlap_on(ctx, k["dp_overlap"], k["zero_stage"])
    dp_exposed = np.zeros(np.broadcast(t, c, p, d, n).shape)
    optimizer = np.zeros(())
    expert_dp = expert_dp_size(t, c, d, k["ep"], k["expert_tp"])
    for kind in STAGES:
        params = stage_params(ctx, k["tp"], p, blocks[kind], kind, k["ep"], k["expert_tp"])
        comm = dp_comm_times_s(
            ctx,
            params,
            blocks[kind],
            dp_span,
            k["dp"],
            k["zero_stage"],
            k["recompute"],
            k["cp"],
            expert_dp,
            k["interleave"],
            p,
        )
        # Calculon (calculon.dp_parts_s): the last chunk's DP traffic hides under that chunk's
        # backward of one micro-batch (1/v of the stage's), the other chunks' under the p
        # micro-batches that pass through them (llm.py _compute_batch_stats: overlap_window
        # = pipeline_par × chunk_dp_overlap_time): p·(v − 1)/v of the stage's backward.
        backward_window = np.where(overlap, stage[kind].backward_window_s, 0.0)
        forward_window = np.where(overlap, stage[kind].forward_window_s, 0.0)
        if ctx.calculon:
            window = np.where(overlap, stage[kind].calculon_window_s, 0.0)
            backward_window, forward_window = window / v, p * (v - 1) / v * window
        per_mb_window = np.where(
            np.asarray(k["zero_stage"]) == 2, backward_window, forward_window + backward_window
        )
        exposed = dp_exposed_s(ctx, comm, forward_window, backward_window, per_mb_window, p, v, n)
        stage_optimizer = optimizer_time_s(
            ctx,
            params.total,
            k["dp"],
            k["zero_stage"],
            k["offload_optimizer"],
            k["cp"],
            params.experts,
            expert_dp,
            k["tp"],
            blocks[kind],
        )
        present = stage_present(p, kind)
        dp_exposed = np.maximum(dp_exposed, np.where(present, exposed, 0.0))
        optimizer = np.maximum(optimizer, np.where(present, stage_optimizer, 0.0))
    step = n * per_micro_batch + bubble + dp_exposed + optimizer
    model_flops = model_flops_per_step(ctx)
    share = recomputed_share(ctx, p, blocks, partial)
    hardware_flops = (
        model_flops
        + (1 - share) * recompute_flops_per_step(ctx, k["recompute"])
        + share * recompute_flops_per_step(ctx, RECOMPUTE_CODES["full"])
    )
    capacity = step * t * c * p * d * ctx.peak_flops
    memory = {kind: stage_memory(ctx, k, n, blocks[kind], kind) for kind in STAGES}
    return StepTerms(
        micro_batches=n,
        forward_s=n * (critical.forward_s + critical_head / 3),
        backward_s=n * (critical.backward_s + 2 * critical_head / 3),
        recompute_s=n * critical.recompute_s,
        tp_comm_s=n * critical.tp_exposed_s,
        cp_comm_s=n * critical.cp_exposed_s,
        ep_comm_s=n * critical.ep_exposed_s,
        pp_comm_s=n * pp_per_micro_batch,
        offload_s=n * (critical.offload_forward_s + critical.offload_backward_s),
        bubble_s=bubble,
        dp_comm_s=dp_exposed,
        optimizer_s=optimizer,
        step_time_s=step,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        mfu=model_flops / capacity,
        hfu=hardware_flops / capacity,
        tokens_per_s=ctx.job.global_batch * ctx.seq_len / step,
        first_stage=memory["first"],
        middle_stage=_where_present(p, memory["middle"], memory["first"]),
        last_stage=memory["last"],
    )


def dp_exposed_s(
    ctx: CostContext,
    comm: DpCommTimes,
    forward_window: np.ndarray,
    backward_window: np.ndarray,
    per_mb_window: np.ndarray,
    p: np.ndarray,
    v: np.ndarray,
    n: np.ndarray,
) -> np.ndarray:
    """A stage's exposed DP time per step: the transfers beyond their windows (zero without
    DP overlap), the stack's dp_overlap_contention share u of what hides, and the ring latencies.

    Interleaved (v > 1), the once-per-step collectives go chunk by chunk: Megatron-Core's
    interleaved schedule launches a model chunk's gradient reduction after that chunk's last
    micro-batch backward and its parameter all-gather when the chunk before it starts its first
    forward, chunks 0 and 1 at once (NVIDIA/Megatron-LM@d98e8a64dd
    megatron/core/pipeline_parallel/schedules.py backward_step_helper_postprocess,
    forward_step_helper_preprocess; grad_sync_func is start_grad_sync under the default
    align_grad_reduce, megatron/training/training.py). On the DP link, first come first served:

    - Reductions. The backward of the last group of p micro-batches runs chunk v − 1 first
      and chunk 0 last, so chunk j's R/v is released j·p chunk steps (B/v each, B the stage's
      backward per micro-batch) before the backward ends (the ranks of a pipeline launch
      together: the schedule offsets each rank's launch by its pipeline rank for that). The
      last reduction ends max_j((j + 1)·R/v − j·p·B/v) after the backward, a maximum of terms
      linear in j, so at j = 0 or j = v − 1:

          after = max(R/v, R − (v − 1)·p·B/v)

    - Gathers. Chunk 0's G/v hides bucket by bucket under the first micro-batch's chunk-0
      forward (F/v), chunk j ≥ 1 is needed j·p chunk steps (F/v each) into the forwards, and
      the link never idles while it is behind, so gather j ends (j + 1)·G/v in; its lateness,
      maximised over j (j = 0, and the ends j = 1 and j = v − 1 of the linear rest):

          before = max(0, (G − F)/v, (2G − p·F)/v, G − (v − 1)·p·F/v)

    At v = 1 these are max(0, R − B) and max(0, G − F) (the one chunk's reduction launches
    bucket by bucket inside the last backward). Without overlap (B = F = 0) they are R and G.
    Calculon's arithmetic (calculon.dp_parts_s) has its own windows and no contention.

    Contention: hidden = comm − excess, exposed = excess + u·hidden; u is fitted per stack
    (planner.accuracy.calibration) like tp_overlap_contention: NCCL's kernels run on the SMs
    and HBM of the compute they overlap."""
    # Calculon's windows come split by chunk from the caller: one chunk's formulas, no contention.
    v = np.ones_like(v) if ctx.calculon else v
    contention = 0.0 if ctx.calculon else ctx.stack.dp_overlap_contention
    reduction, gather = comm.after_backward_s, comm.before_forward_s
    chunks_after = (v - 1) * p / v  # backward passes of one micro-batch behind chunk v − 1
    after = np.where(
        v > 1,
        np.maximum(reduction / v, reduction - chunks_after * backward_window),
        np.maximum(0.0, reduction - backward_window),
    )
    before = np.maximum(
        np.maximum(0.0, (gather - forward_window) / v),
        np.where(
            v > 1,
            np.maximum(
                (2 * gather - p * forward_window) / v, gather - chunks_after * forward_window
            ),
            0.0,
        ),
    )
    per_mb = np.maximum(0.0, comm.per_micro_batch_s - per_mb_window)
    excess = after + before + n * per_mb
    hidden = reduction + gather + n * comm.per_micro_batch_s - excess
    return (
        excess + contention * hidden + comm.latency_per_step_s + n * comm.latency_per_micro_batch_s
    )


def recomputed_share(
    ctx: CostContext, pp: np.ndarray, blocks: dict[str, np.ndarray], recompute_layers: ArrayLike
) -> np.ndarray:
    """The share of all blocks that partial recompute rebuilds: Σ over stages of
    min(recompute_layers, k_i), over the layers (0 without partial recompute)."""
    r = np.asarray(recompute_layers, dtype=float)
    rebuilt = {kind: np.minimum(r, blocks[kind]) for kind in STAGES}
    total = (
        rebuilt["first"]
        + np.where(pp > 2, (pp - 2) * rebuilt["middle"], 0.0)
        + np.where(pp > 1, rebuilt["last"], 0.0)
    )
    return total / ctx.model.layers


def _where_present(pp: np.ndarray, middle: StageMemory, first: StageMemory) -> StageMemory:
    """The middle stage's memory where there is one (p > 2), the first stage's elsewhere (so
    that a maximum over stages is unaffected)."""
    present = stage_present(pp, "middle")

    def pick(a, b):
        return np.where(present, a, b)

    return StageMemory(
        weights=pick(middle.weights, first.weights),
        gradients=pick(middle.gradients, first.gradients),
        optimizer=pick(middle.optimizer, first.optimizer),
        activations=pick(middle.activations, first.activations),
        logits=pick(middle.logits, first.logits),
        reserve=pick(middle.reserve, first.reserve),
        offloaded=tuple(pick(a, b) for a, b in zip(middle.offloaded, first.offloaded, strict=True)),
        offloaded_items=tuple(
            {key: pick(a[key], b[key]) for key in a}
            for a, b in zip(middle.offloaded_items, first.offloaded_items, strict=True)
        ),
    )


def dp_overlap_on(ctx: CostContext, dp_overlap: ArrayLike, zero_stage: ArrayLike) -> np.ndarray:
    """Whether a strategy's DP traffic overlaps compute: it asks for it and its stack can,
    under ZeRO-1/2 only where the stack also overlaps the sharded optimizer's reduction and
    gather (StackProfile.sharded_dp_overlap)."""
    zero = np.asarray(zero_stage)
    sharded = (zero == 1) | (zero == 2)
    can = ctx.stack.dp_overlap & (ctx.stack.sharded_dp_overlap | ~sharded)
    return np.asarray(dp_overlap, dtype=bool) & can


def pp_exposed_s(
    message_s: np.ndarray,
    v: np.ndarray,
    stage: BlockPieces,
    hidden: np.ndarray,
    transfers: int = 2,
) -> np.ndarray:
    """A stage's pipeline messages per micro-batch on its critical path, for one transfer of
    ``message_s`` (pp_message_s; 0 where p = 1) and v virtual stages: ``transfers``·v·M
    (parallel_comm.pp_transfers) sent in turn with the compute, or, where the stack overlaps
    them (``hidden``: its pp_overlap with v > 1,
    Megatron-Core's overlap_p2p_comm), what exceeds the passes they run under. Each of the v
    model chunks sends its activations while the next chunk computes its forward, and its
    input gradients while the next computes its backward, so the v forward messages hide under
    the stage's forward pass F and the v backward ones under its backward B (recompute and
    offload stalls included, as the DP windows): max(0, v·M − F) + max(0, v·M − B)."""
    sent = v * message_s
    overlapped = np.maximum(0.0, sent - stage.forward_window_s) + np.maximum(
        0.0, sent - stage.backward_window_s
    )
    return np.where(hidden, overlapped, transfers * sent)
