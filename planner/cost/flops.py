"""FLOP counts (a multiply-add is 2 FLOPs).

Per block, forward, per micro-batch of b sequences of length s (Narayanan et al. SC21 eq. 3,
generalised to grouped-query attention, SwiGLU, mixtures of experts and latent attention):

- QKV projection     2·b·s·h·(q + 2·k·d_h)
- attention scores   2·b·s²·q
- attention · V      2·b·s²·q
- output projection  2·b·s·q·h
- FFN                2·b·s·h·f per matrix (2 matrices for GeLU, 3 for SwiGLU); an MoE block
                     2·b·s·h·f_e·(k + shared) per matrix for top-k routing, plus the router
                     2·b·s·h·E

where q = a·d_h is the attention width (= h for all but a few models, e.g. PaLM). Latent
attention (DeepSeek-V2/V3) has its own five projections, and its core is 2·b·s²·a·(d_qk + d_v)
(= 4·b·s²·q when the query/key and value heads are d_h wide).

Backward is twice the forward. The LM head (logits) is 2·b·s·h·V forward. With these, a GPT
model's FLOPs per step are 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) exactly (SC21 eq. 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.context import CostContext

ArrayLike = np.ndarray | float | int
PARTIAL_POLICIES = ("torchtitan_op", "deepseek")
"""Selective-recompute policies (StackProfile.selective_policy) that rebuild part of a block
during its backward: weight GEMMs (recomputed_gemm_shares) and stored activations
(planner/cost/activations.py)."""


@dataclass(frozen=True)
class BlockGemms:
    """Forward FLOPs of one block's matrix products on one TP rank, per micro-batch."""

    projections: tuple[np.ndarray, ...]
    """FLOPs of each kind of weight GEMM: attention projections, FFN matrices, experts."""
    counts: tuple[float, ...]
    """How many GEMMs of each kind an average block runs (1 for a dense block's; an MoE
    block's routed experts are E GEMMs per matrix of b·s·k/E tokens each; averaged over the
    blocks by their share of dense and MoE blocks)."""
    routed: tuple[bool, ...]
    """Which kinds are routed experts (the busiest expert-parallel rank runs more of them)."""
    attention_core: np.ndarray
    """Scores and attention · V (batched over heads), together."""

    @property
    def projection_flops(self) -> np.ndarray:
        return sum(
            count * flops for count, flops in zip(self.counts, self.projections, strict=True)
        )


def kv_heads_per_rank(ctx: CostContext, tp: ArrayLike) -> np.ndarray:
    """KV heads held by one TP rank: k/t, or 1 (replicated) when t exceeds the KV heads."""
    return np.maximum(ctx.model.kv_heads, np.asarray(tp)) / np.asarray(tp)


def block_gemms(ctx: CostContext, tp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1) -> BlockGemms:
    """Per-rank forward GEMM FLOPs of one (average) block. Depends on (tp, micro_batch, ep).

    Latent attention runs its five projections (ModelSpec.latent_projections), each split over
    t (Megatron-Core splits the up-projections by head; its down-projections are small). An MoE
    block runs each token through ``experts_per_token`` routed experts and the shared ones; the
    router is an h × E GEMM. A rank does 1/t of the routed expert work whatever the expert
    layout (planner/cost/experts.py): E/ep GEMMs per matrix, each over the tokens that ep ranks
    route to one expert, b·s·k·ep/E, at 1/t of its width (ep = 1: every expert on every rank,
    split over t)."""
    m, s = ctx.model, ctx.seq_len
    t = np.asarray(tp, dtype=float)
    tokens = np.asarray(mb, dtype=float) * s
    if m.is_latent_attention:
        attention = [2 * tokens * rows * columns / t for rows, columns in m.latent_projections]
    else:
        q = m.attention_width
        qkv_columns = q / t + 2 * m.head_dim * kv_heads_per_rank(ctx, tp)
        attention = [2 * tokens * m.hidden * qkv_columns, 2 * tokens * q * m.hidden / t]
    gemms = [(flops, 1.0) for flops in attention]
    moe_share = m.moe_share
    if moe_share < 1:
        dense = 2 * tokens * m.hidden * m.ffn_hidden / t
        gemms += [(dense, 1 - moe_share)] * m.ffn_matrices
    if moe_share > 0:
        shards = np.asarray(ep, dtype=float)
        expert_tokens = tokens * m.experts_per_token * shards / m.experts
        expert = 2 * expert_tokens * m.hidden * m.expert_width / t
        gemms += [(expert, moe_share * m.experts / shards)] * m.ffn_matrices
        if m.shared_experts:
            shared = 2 * tokens * m.hidden * m.shared_experts * m.expert_width / t
            gemms += [(shared, moe_share)] * m.ffn_matrices
        gemms += [(2 * tokens * m.hidden * m.experts, moe_share)]
    core = 2 * tokens * s * m.heads * (m.qk_head_dim + m.value_head_dim) / t
    routed = len(attention) + (m.ffn_matrices if moe_share < 1 else 0)
    return BlockGemms(
        projections=tuple(flops for flops, _ in gemms),
        counts=tuple(count for _, count in gemms),
        routed=tuple(routed <= i < routed + m.ffn_matrices for i in range(len(gemms))),
        attention_core=core,
    )


def block_forward_flops(ctx: CostContext, sequences: ArrayLike) -> np.ndarray:
    """Whole-model (unsharded) forward FLOPs of one (average) block for ``sequences``
    sequences: an MoE block counts the experts each token passes through (active FLOPs)."""
    gemms = block_gemms(ctx, 1, sequences)
    return gemms.projection_flops + gemms.attention_core


def logits_forward_flops(ctx: CostContext, sequences: ArrayLike) -> np.ndarray:
    """Whole-model forward FLOPs of the LM head: 2·b·s·h·V."""
    m = ctx.model
    return 2 * np.asarray(sequences, dtype=float) * ctx.seq_len * m.hidden * m.vocab


def model_flops_per_step(ctx: CostContext) -> float:
    """FLOPs of one training step without recompute (forward + backward = 3 × forward); the
    numerator of MFU (Korthikanti et al. 2022, §6). Without the LM head under Calculon's
    arithmetic, which models none (llm.py get_useful_flops sums the blocks' layers)."""
    batch = ctx.job.global_batch
    head = 0.0 if ctx.stack.arithmetic == "calculon" else logits_forward_flops(ctx, batch)
    forward = ctx.model.layers * block_forward_flops(ctx, batch) + head
    return float(3 * forward)


def recompute_flops_per_step(ctx: CostContext, recompute: ArrayLike) -> np.ndarray:
    """Extra FLOPs of activation recomputation per step: full adds one block forward, selective
    the attention core (scores and attention · V). ``recompute``: 0 none, 1 selective, 2 full.
    With a flash-attention kernel, selective recompute is what the kernel's backward already
    does; by the usual convention that is not counted, so selective adds nothing there. Under
    a stack whose selective policy rebuilds weight GEMMs (torchtitan_op, deepseek), selective
    adds those GEMMs (recomputed_gemm_shares)."""
    batch, layers = ctx.job.global_batch, ctx.model.layers
    whole = block_forward_flops(ctx, batch)
    gemms = block_gemms(ctx, 1, batch)
    code = np.asarray(recompute)
    shares = recomputed_gemm_shares(ctx, 1)
    if shares is None:
        selective = 0.0 if ctx.flash else gemms.attention_core
    else:  # the GEMMs the policy runs again (recomputed_gemm_shares)
        selective = sum(
            share * count * flops
            for share, count, flops in zip(shares, gemms.counts, gemms.projections, strict=True)
        )
    return layers * np.where(code == 2, whole, np.where(code == 1, selective, 0.0))


def recomputed_gemm_shares(ctx: CostContext, tp: ArrayLike) -> tuple[ArrayLike, ...] | None:
    """Share of each weight-GEMM kind of flops.block_gemms (in its order: attention
    projections, then per FFN kind its ``ffn_matrices`` matrices, then the router) that the
    stack's selective policy runs again in the backward; None for ``attention_core``, which
    rebuilds no weight GEMM. ``torchtitan_op`` recomputes every second mm: wk (its share of the
    fused QKV projection), wo, and the FFN's second matrix (w3; GeLU's w2); under latent
    attention the second and fourth projections. ``deepseek`` recomputes the MLA
    up-projections. Both also rebuild the block's memory-bound kernels (norms, the activation
    function: compute.block_times)."""
    policy = ctx.stack.selective_policy
    if policy not in PARTIAL_POLICIES:
        return None
    m = ctx.model
    if m.is_latent_attention:
        count = len(m.latent_projections)
        # deepseek: the up-projections, q_up (with q_lora) and kv_up; torchtitan: every second
        ups = (2,) if policy == "deepseek" and not m.q_lora_rank else (1, 3)
        attention: list[ArrayLike] = [1.0 if i in ups else 0.0 for i in range(count)]
    elif policy == "deepseek":
        attention = [0.0, 0.0]
    else:
        kv_columns = m.head_dim * kv_heads_per_rank(ctx, tp)
        qkv_columns = m.attention_width / np.asarray(tp, dtype=float) + 2 * kv_columns
        attention = [kv_columns / qkv_columns, 1.0]
    second = [0.0, 1.0] + [0.0] * (m.ffn_matrices - 2)
    ffn = second if policy == "torchtitan_op" else [0.0] * m.ffn_matrices
    kinds = (m.moe_share < 1) + (m.moe_share > 0) * (1 + bool(m.shared_experts))
    router = [0.0] if m.moe_share > 0 else []
    return tuple(attention + ffn * kinds + router)
