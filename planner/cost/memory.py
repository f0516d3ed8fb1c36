"""Memory per GPU: activations (Korthikanti et al. 2022) and model state (ZeRO, Rajbhandari
et al. 2020), for the first, the middle and the last pipeline stage.

Activations stored per block per micro-batch: planner/cost/activations.py (Korthikanti et al.
§4 generalised to grouped-query attention, SwiGLU, MoE and latent attention, in 16 bits or with
the fp8 GEMM inputs a stack keeps, under the stack's selective-recompute policy). For GPT
shapes (k = a, f = 4h, GeLU, dropout) in 16 bits this is s·b·h·(34 + 5·a·s/h) with no
parallelism, s·b·h·(10 + 24/t + 5·a·s/(h·t)) with TP, and s·b·h·(34 + 5·a·s/h)/t with TP + SP
(their eq. 1–4). Full recompute keeps only each block's input, 2·sbh (÷t with SP). Context
parallelism stores b/cp of each micro-batch's tokens per rank (and 1/cp of the scores when
materialised).

Model state follows the stack's conventions: its gradient dtype, optimizer bytes per parameter
and HBM reserve, with offloading the blocks it keeps resident (``offload_resident_blocks``),
under ZeRO-3 what it keeps gathered (``zero3_root_gathered``, ``zero3_unsharded_under_pp``).
Weights are replicated over the cp ranks, so ZeRO and the distributed optimizer shard over the
dp·cp ranks that hold the same weights (Megatron-Core's data-parallel-with-CP group); routed
experts are split over ep·etp ranks and shard over the edp = t·cp·dp/(ep·etp) ranks that hold
the same experts (planner/cost/experts.py). Activations do not depend on the expert layout: a
rank holds 1/t of the routed token copies whatever it is (balanced routing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import activations, calculon
from planner.cost.context import ACTIVATION_BYTES, BYTES_PER_GIB, CostContext
from planner.cost.experts import expert_dp_size, expert_tp_size
from planner.cost.flops import ArrayLike, kv_heads_per_rank
from planner.cost.offload import offloaded_share
from planner.cost.precision import block_weight_bytes, weight_copy_bytes
from planner.specs import RECOMPUTE_CODES

FULL = RECOMPUTE_CODES["full"]
ZERO3_GATHERED_BLOCKS = 2
"""ZeRO-3 units gathered at once: the one in use and the prefetched next (the two largest of
the stage's blocks, embedding and LM head; _two_largest_units)."""


def block_activation_bytes(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> np.ndarray:
    """Activation bytes one block stores per micro-batch on one rank (activations.block_bytes,
    AxoNN's grid included). Depends on (tp, micro_batch, recompute, sequence_parallel; AxoNN's
    tp_column, tp_depth). Calculon's storage space under its arithmetic
    (calculon.stored_activation_bytes)."""
    if ctx.calculon:
        return calculon.stored_activation_bytes(ctx, tp, mb, recompute, sp)
    return activations.block_bytes(ctx, tp, mb, recompute, sp, column, depth)


def grid_sizes(tp: ArrayLike, column: ArrayLike, depth: ArrayLike):
    """(X, Y, Z) as float arrays: Y = tp / (X·Z)."""
    x = np.asarray(column, dtype=float)
    z = np.asarray(depth, dtype=float)
    return x, np.asarray(tp, dtype=float) / (x * z), z


def gathered_block_params(ctx: CostContext, tp: ArrayLike, column: ArrayLike, depth: ArrayLike):
    """One block's weights gathered over Z on one GPU: P_block/(X·Y) (its depth shards
    together; axonn-ai/axonn@660a224 intra_layer/fully_connected.py:62-70). The dense block
    (AxoNN's grid is modelled for dense models)."""
    x, y, _ = grid_sizes(tp, column, depth)
    return ctx.model.block_params / (x * y)


GATHERED_BLOCKS_IN_FLIGHT = 2
"""Gathered weight blocks resident at once under the depth all-gather: the layer running and
the next one prefetched (axonn-ai/axonn@660a224
intra_layer/overlap_communication.py:124-149)."""


def gathered_weight_bytes(
    ctx: CostContext, tp: ArrayLike, column: ArrayLike, depth: ArrayLike
) -> np.ndarray:
    """HBM per GPU of the weights gathered over Z (0 when Z = 1): 2 blocks of e·P_block/(X·Y)."""
    z = np.asarray(depth, dtype=float)
    nbytes = (
        GATHERED_BLOCKS_IN_FLIGHT * ACTIVATION_BYTES * gathered_block_params(ctx, tp, column, depth)
    )
    return np.where(z > 1, nbytes, 0.0)


def in_flight_micro_batches(
    ahead: ArrayLike,
    interleave: ArrayLike,
    micro_batches: ArrayLike,
    pp: ArrayLike | None = None,
) -> np.ndarray:
    """Micro-batches whose activations a stage with ``ahead`` stages from it to the end (p for
    the first) holds at once under 1F1B: min(n, ahead), times 1 + (p − 1)/(p·v) with the
    interleaved schedule (Korthikanti et al. §4.2.3)."""
    p = np.asarray(ahead if pp is None else pp, dtype=float)
    v = np.asarray(interleave, dtype=float)
    factor = np.where(v > 1, 1 + (p - 1) / (p * v), 1.0)
    return np.minimum(np.asarray(micro_batches, dtype=float), np.asarray(ahead)) * factor


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one rank of a stage: its blocks' share and its embedding/head share."""

    blocks: np.ndarray
    block: np.ndarray
    """One block's parameters on one rank."""
    extra: np.ndarray
    """Input embedding and/or LM head on this rank (vocab-parallel over t)."""
    experts: np.ndarray
    """The routed experts among ``blocks`` (sharded and reduced over the expert layout)."""
    expert_block: np.ndarray
    """The routed experts among ``block``."""

    @property
    def total(self) -> np.ndarray:
        return self.blocks + self.extra


def block_params_per_rank(
    ctx: CostContext, tp: ArrayLike, ep: ArrayLike = 1, expert_tp: ArrayLike = 0
) -> np.ndarray:
    """One block's parameters on one rank: 1/t of its dense part (KV projections replicated
    when t > k) and 1/(ep·etp) of its routed experts (planner/cost/experts.py)."""
    m = ctx.model
    t = np.asarray(tp, dtype=float)
    kv_cols = 2 * m.head_dim * m.kv_heads
    replicated_kv = 2 * m.head_dim * kv_heads_per_rank(ctx, tp) * t - kv_cols
    dense = (m.block_params - m.routed_expert_params + m.hidden * replicated_kv) / t
    return dense + routed_params_per_rank(ctx, tp, ep, expert_tp)


def routed_params_per_rank(
    ctx: CostContext, tp: ArrayLike, ep: ArrayLike = 1, expert_tp: ArrayLike = 0
) -> np.ndarray:
    """One (average) block's routed-expert parameters on one rank: E/ep experts at 1/etp."""
    shards = np.asarray(ep, dtype=float) * expert_tp_size(tp, expert_tp)
    return ctx.model.routed_expert_params / shards


STAGES = ("first", "middle", "last")
"""Stage kinds of a pipeline: Megatron's layouts have a free first and last stage and equal
stages between them, so the three kinds cover every stage."""


def stage_params(
    ctx: CostContext,
    tp: ArrayLike,
    pp: ArrayLike,
    blocks: ArrayLike,
    stage: str,
    ep: ArrayLike = 1,
    expert_tp: ArrayLike = 0,
) -> StageParams:
    """Parameters per rank on a ``stage`` ("first", "middle" or "last") of ``blocks`` blocks.

    The first stage holds the input embedding, the last the LM head (a tied copy when p > 1, as
    Megatron does) and the final norm, the middle stages blocks only. With p = 1 the one stage
    holds both (one matrix when tied). Under Calculon's arithmetic no stage holds either, and
    a block is Calculon's weights (calculon.weight_elements)."""
    m = ctx.model
    if ctx.calculon:
        block = calculon.weight_elements(ctx, tp)
        count = np.asarray(blocks, dtype=float)
        nothing = 0.0 * block
        return StageParams(
            blocks=block * count, block=block, extra=nothing, experts=nothing, expert_block=nothing
        )
    t = np.asarray(tp, dtype=float)
    p = np.asarray(pp, dtype=float)
    block = block_params_per_rank(ctx, tp, ep, expert_tp)
    expert_block = routed_params_per_rank(ctx, tp, ep, expert_tp)
    matrix = m.vocab * m.hidden / t
    single_stage = matrix * (1 if m.tied_embeddings else 2)
    own = {"first": matrix, "middle": 0.0 * matrix, "last": matrix + 2 * m.hidden}[stage]
    extra = np.where(p == 1, single_stage + (2 * m.hidden if stage == "last" else 0), own)
    count = np.asarray(blocks, dtype=float)
    return StageParams(
        blocks=block * count,
        block=block,
        extra=extra,
        experts=expert_block * count,
        expert_block=expert_block,
    )


@dataclass(frozen=True)
class StageMemory:
    """Bytes per GPU of one pipeline stage, by item, in HBM and in each offload tier."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    logits: np.ndarray
    reserve: np.ndarray
    offloaded: tuple[np.ndarray, ...]
    """Bytes per GPU in offload tier 1, 2, ... (index 0 is tier 1)."""
    offloaded_items: tuple[dict[str, np.ndarray], ...]

    @property
    def hbm_total(self) -> np.ndarray:
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.logits
            + self.reserve
        )

    def items(self) -> dict[str, np.ndarray]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "logits": self.logits,
            "reserve": self.reserve,
        }


@dataclass(frozen=True)
class ModelState:
    """Bytes per GPU of weights, gradients and optimizer state: in HBM, and per offload tier
    (index 0 is tier 1). Depends on (tp, pp, dp, zero_stage, offload_weights,
    offload_optimizer)."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    offloaded: tuple[dict[str, np.ndarray], ...]

    @property
    def hbm(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer


def model_state(
    ctx: CostContext,
    tp: ArrayLike,
    pp: ArrayLike,
    blocks: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    offload_weights: ArrayLike,
    offload_optimizer: ArrayLike,
    stage: str,
    ep: ArrayLike = 1,
    expert_tp: ArrayLike = 0,
    expert_dp: ArrayLike | None = None,
) -> ModelState:
    """Model state of a ``stage`` of ``blocks`` blocks.

    Per rank: weights e·P, gradients g·P, optimizer o·P (the stack's bytes per parameter, 12
    for fp32 master weights and two Adam moments); ZeRO-1 divides the optimizer by d, ZeRO-2
    also the gradients, ZeRO-3 also the weights (plus the gathered blocks); ``dp`` is the number
    of ranks that shard the dense parameters (dp·cp under context parallelism); ZeRO-3 holds
    two gathered units beside the shards, the two largest of this stage's blocks, embedding and
    LM head, or, where the stack keeps FSDP2's root unit gathered (``zero3_root_gathered``),
    two blocks and the whole embedding and head; ``expert_dp``
    the number that shard the routed experts (edp, planner/cost/experts.py; default ``dp``).
    Where the stack reshards nothing under PP (``zero3_unsharded_under_pp``, torchtitan),
    ZeRO-3 with p > 1 holds every unit gathered, e·(blocks·P_block + extra), and the
    unsharded gradients, g·(blocks·P_block + extra), in place of the shards (reduce-scattered
    once, after the last backward); with p = 1 or d = 1 nothing changes.
    Offloading a share q of the weights (with their gradients) moves q of the blocks' shards to
    the offload tier and keeps q of the stack's resident blocks in HBM beside the other 1 − q:
    HBM e·((1 − q)·(blocks·shard + gathered) + q·resident + extra·shard); the embedding and LM
    head stay in HBM. Block weights take precision.block_weight_bytes each (e, or the recipe's
    format under JobSpec.fp8_params) and the recipe adds its cached low-precision copies of the
    held block weights (planner/cost/precision.py weight_copy_bytes). Offloading a share of the
    optimizer state moves that share. Under
    Calculon's arithmetic, Calculon's optimizer sharding (calculon.model_state)."""
    if ctx.calculon:
        tiers = range(1, len(ctx.system.memory_tiers))

        def share(code: ArrayLike) -> tuple[np.ndarray, list[np.ndarray]]:
            return offloaded_share(code), [offloaded_share(code, tier) for tier in tiers]

        weights, gradients, optimizer, offloaded = calculon.model_state(
            ctx, tp, blocks, dp, zero_stage, share(offload_weights), share(offload_optimizer)
        )
        return ModelState(weights, gradients, optimizer, tuple(offloaded))
    e, g = ACTIVATION_BYTES, ctx.grad_bytes
    zero = np.asarray(zero_stage)
    d = np.asarray(dp, dtype=float)
    d_experts = d if expert_dp is None else np.asarray(expert_dp, dtype=float)
    params = stage_params(ctx, tp, pp, blocks, stage, ep, expert_tp)
    blocks_per_stage = np.asarray(blocks, dtype=float)

    def sharded(dense: np.ndarray, experts: np.ndarray, level: int) -> np.ndarray:
        """dense + experts parameters per rank, each divided by its sharding group where the
        ZeRO stage reaches ``level`` (ZeRO-3 with one rank keeps the weights whole)."""
        dense_shard = np.where((zero >= level) & (d > 1), 1 / d, 1.0)
        expert_shard = np.where((zero >= level) & (d_experts > 1), 1 / d_experts, 1.0)
        return dense * dense_shard + experts * expert_shard

    dense_blocks = params.blocks - params.experts
    block_weights = sharded(dense_blocks, params.experts, 3)
    block_grads = sharded(dense_blocks, params.experts, 2)
    extra_weights = sharded(params.extra, 0.0, 3)
    extra_grads = sharded(params.extra, 0.0, 2)
    whole_block = params.block - params.expert_block
    block_gathered = params.block - sharded(whole_block, params.expert_block, 3)
    # the embedding and the LM head are gathered whole too (ZeRO-3): one unit each, or FSDP2's
    # root unit holding both, which stays gathered from the head's forward to its backward
    extra_gathered = params.extra - extra_weights
    if ctx.stack.zero3_root_gathered:
        root_gathered = extra_gathered
        gathered = np.minimum(ZERO3_GATHERED_BLOCKS, blocks_per_stage) * block_gathered
    else:
        root_gathered = 0.0 * extra_gathered
        gathered = _two_largest_units(ctx, pp, block_gathered, blocks_per_stage, extra_gathered)
    # a stack that reshards nothing under PP: every unit gathered, the gradients unsharded
    under_pp = ctx.stack.zero3_unsharded_under_pp & (zero == 3) & (np.asarray(pp) > 1)
    gathered = np.where(under_pp, blocks_per_stage * block_gathered, gathered)
    root_gathered = np.where(under_pp, extra_gathered, root_gathered)
    held_block_grads = np.where(under_pp, params.blocks, block_grads)
    held_extra_grads = np.where(under_pp, params.extra, extra_grads)
    working = np.minimum(ctx.stack.offload_resident_blocks, blocks_per_stage) * params.block
    optimizer_bytes = ctx.optimizer_bytes_per_param * sharded(
        dense_blocks + params.extra, params.experts, 1
    )

    q_w = offloaded_share(offload_weights)
    q_o = offloaded_share(offload_optimizer)
    kept = 1 - q_w
    held_block_weights = kept * (block_weights + gathered) + q_w * working
    # block weights at the recipe's format where kept so (JobSpec.fp8_params), else bf16
    weights = block_weight_bytes(ctx) * held_block_weights + e * (extra_weights + root_gathered)
    # the precision recipe's cached low-precision copies of the held block weights
    weights = weights + weight_copy_bytes(ctx, held_block_weights)
    gradients = g * (kept * held_block_grads + q_w * working + held_extra_grads)
    offloaded = tuple(
        {
            "weights": offloaded_share(offload_weights, tier)
            * block_weight_bytes(ctx)
            * block_weights,
            "gradients": offloaded_share(offload_weights, tier) * g * block_grads,
            "optimizer": offloaded_share(offload_optimizer, tier) * optimizer_bytes,
        }
        for tier in range(1, len(ctx.system.memory_tiers))
    )
    return ModelState(
        weights=weights,
        gradients=gradients,
        optimizer=(1 - q_o) * optimizer_bytes,
        offloaded=offloaded,
    )


def _two_largest_units(
    ctx: CostContext,
    pp: ArrayLike,
    block: np.ndarray,
    blocks: np.ndarray,
    extra: np.ndarray,
) -> np.ndarray:
    """What ZeRO-3 holds gathered beyond the shards: the two largest of the stage's units (the
    one in use and the prefetched next), ``blocks`` units of ``block`` and the embedding and
    LM head (``extra``: one unit, or two equal ones where a one-stage pipeline holds both
    untied matrices). Never more than all the units, so more sharding never needs more."""
    both = (np.asarray(pp) == 1) & (not ctx.model.tied_embeddings)
    count = np.where(extra > 0, np.where(both, 2, 1), 0)
    unit = extra / np.where(both, 2, 1)
    extra_first = (count > 0) & (unit > block)
    none = 0.0 * unit
    after_extra = np.where(count >= 2, unit, np.where(blocks >= 1, block, none))
    after_block = np.where(blocks >= 2, block, np.where(count > 0, unit, none))
    return np.where(extra_first, unit + after_extra, block + after_block)


def rebuilt_activation_bytes(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    offload_activations: ArrayLike = 0,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> np.ndarray:
    """What one block rebuilds during its backward, resident while it runs
    (activations.rebuilt_bytes: full recompute its whole activations, a partial selective
    policy the part it did not keep). Depends on (tp, micro_batch, recompute,
    sequence_parallel; AxoNN's tp_column, tp_depth). Under Calculon's arithmetic, Calculon's
    working space and activation gradients of one block (calculon.resident_activation_bytes,
    which also depends on the activations' offload share)."""
    if ctx.calculon:
        share = offloaded_share(offload_activations)
        return calculon.resident_activation_bytes(ctx, tp, mb, recompute, sp, share)
    return activations.rebuilt_bytes(ctx, tp, mb, recompute, sp, column, depth)


def logits_bytes(ctx: CostContext, tp: ArrayLike, mb: ArrayLike) -> np.ndarray:
    """The last stage's logits of one micro-batch, vocab-parallel: c·b·s·V/t with c the stack's
    ``logits_bytes`` (4: one fp32 tensor; the loss's copies and gradients at the stack's peak),
    none under Calculon's arithmetic."""
    if ctx.calculon:
        return np.zeros(np.broadcast(np.asarray(tp), np.asarray(mb)).shape)
    tokens = np.asarray(mb, dtype=float) * ctx.seq_len
    return ctx.stack.logits_bytes * tokens * ctx.model.vocab / np.asarray(tp, dtype=float)


def stage_memory(
    ctx: CostContext,
    k: dict[str, np.ndarray],
    micro_batches: np.ndarray,
    blocks: np.ndarray,
    stage: str,
) -> StageMemory:
    """Memory of a ``stage`` ("first", "middle" or "last") of ``blocks`` blocks for knob arrays
    ``k`` (keys as in step.Knobs): the model state, the stored activations of the in-flight
    micro-batches (1F1B: min(n, p) on the first stage, min(n, p − 1) on the second, the first
    of the middle ones, one on the last; of an offloaded share q, only q of the stack's resident
    blocks stay), the block rebuilt by full recompute, the logits on the last stage and the HBM
    reserve. Each rank holds b/cp of a micro-batch's tokens."""
    cp = np.asarray(k["cp"], dtype=float)
    local_mb = np.asarray(k["micro_batch"], dtype=float) / cp
    state = model_state(
        ctx,
        k["tp"],
        k["pp"],
        blocks,
        np.asarray(k["dp"]) * cp,
        k["zero_stage"],
        k["offload_weights"],
        k["offload_optimizer"],
        stage,
        k["ep"],
        k["expert_tp"],
        expert_dp_size(k["tp"], cp, k["dp"], k["ep"], k["expert_tp"]),
    )
    blocks_per_stage = np.asarray(blocks, dtype=float)
    grid = (k["tp_column"], k["tp_depth"])
    per_block = block_activation_bytes(
        ctx, k["tp"], local_mb, k["recompute"], k["sequence_parallel"], *grid
    )
    if stage == "last":
        in_flight = np.ones_like(np.asarray(micro_batches, dtype=float))
    else:
        ahead = np.asarray(k["pp"]) - (1 if stage == "middle" else 0)
        in_flight = in_flight_micro_batches(ahead, k["interleave"], micro_batches, k["pp"])
    recomputed = np.minimum(np.asarray(k["recompute_layers"], dtype=float), blocks_per_stage)
    full = block_activation_bytes(ctx, k["tp"], local_mb, FULL, k["sequence_parallel"], *grid)
    stored = ((blocks_per_stage - recomputed) * per_block + recomputed * full) * in_flight
    rebuilt = rebuilt_activation_bytes(
        ctx,
        k["tp"],
        local_mb,
        np.where(recomputed > 0, FULL, k["recompute"]),
        k["sequence_parallel"],
        k["offload_activations"],
        *grid,
    ) + gathered_weight_bytes(ctx, k["tp"], *grid)
    act_working = np.minimum(ctx.stack.offload_resident_blocks, blocks_per_stage) * per_block
    q_a = offloaded_share(k["offload_activations"])

    offloaded_items = tuple(
        {**items, "activations": offloaded_share(k["offload_activations"], tier) * stored}
        for tier, items in enumerate(state.offloaded, start=1)
    )
    return StageMemory(
        weights=state.weights,
        gradients=state.gradients,
        optimizer=state.optimizer,
        activations=(1 - q_a) * stored + q_a * act_working + rebuilt,
        logits=logits_bytes(ctx, k["tp"], local_mb) if stage == "last" else np.zeros(()),
        reserve=np.asarray(ctx.hbm_reserve_bytes),
        offloaded=tuple(sum(items.values()) for items in offloaded_items),
        offloaded_items=offloaded_items,
    )


def memory_floor_gpus(ctx: CostContext) -> float:
    """The fewest GPUs whose memory, every tier together, holds the blocks' model state
    (model_state):

        N ≥ (e + g + o) · L · P_block / (usable HBM + Σ offload tier capacities)

    with e = 2 bytes of weights, g the gradient bytes and o the optimizer bytes per parameter.
    A rank of a stage of k blocks holds at least k · P_block / (t·cp·dp) parameters' state,
    fully sharded (ZeRO-3 over dp·cp, the routed experts over ep·etp·edp = t·cp·dp; KV heads
    replicated over t only add), in HBM or, offloaded, in a tier; the heaviest stage has
    k ≥ L / p, so one GPU holds at least (e + g + o) · L · P_block / N. Embeddings,
    activations, gathered blocks and the reserve only add."""
    per_param = ACTIVATION_BYTES + ctx.grad_bytes + ctx.optimizer_bytes_per_param
    tiers = ctx.system.memory_tiers
    capacity_bytes = BYTES_PER_GIB * (
        tiers[0].capacity_gib * ctx.hbm_usable_fraction + sum(t.capacity_gib for t in tiers[1:])
    )
    return per_param * ctx.model.layers * ctx.model.block_params / capacity_bytes
