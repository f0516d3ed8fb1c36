"""FLOP counts (a multiply-add is 2 FLOPs).

Per block, forward, per micro-batch of b sequences of length s (Narayanan et al. SC21 eq. 3,
generalised to grouped-query attention and SwiGLU):

- QKV projection     2·b·s·h·(q + 2·k·d_h)
- attention scores   2·b·s²·q
- attention · V      2·b·s²·q
- output projection  2·b·s·q·h

where q = a·d_h is the attention width (= h for all but a few models, e.g. PaLM).
- FFN                2·b·s·h·f per matrix (2 matrices for GeLU, 3 for SwiGLU)

Backward is twice the forward. The LM head (logits) is 2·b·s·h·V forward. With these, a GPT
model's FLOPs per step are 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) exactly (SC21 eq. 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.context import CostContext

ArrayLike = np.ndarray | float | int


@dataclass(frozen=True)
class BlockGemms:
    """Forward FLOPs of one block's matrix products on one TP rank, per micro-batch."""

    projections: tuple[np.ndarray, ...]
    """Weight GEMMs: QKV, output projection, each FFN matrix."""
    attention_core: np.ndarray
    """Scores and attention · V (batched over heads), together."""


def kv_heads_per_rank(ctx: CostContext, tp: ArrayLike) -> np.ndarray:
    """KV heads held by one TP rank: k/t, or 1 (replicated) when t exceeds the KV heads."""
    return np.maximum(ctx.model.kv_heads, np.asarray(tp)) / np.asarray(tp)


def block_gemms(ctx: CostContext, tp: ArrayLike, mb: ArrayLike) -> BlockGemms:
    """Per-rank forward GEMM FLOPs of one block. Depends on (tp, micro_batch)."""
    m, s = ctx.model, ctx.seq_len
    t = np.asarray(tp, dtype=float)
    tokens = np.asarray(mb, dtype=float) * s
    q = m.attention_width
    qkv_columns = q / t + 2 * m.head_dim * kv_heads_per_rank(ctx, tp)
    qkv = 2 * tokens * m.hidden * qkv_columns
    proj = 2 * tokens * q * m.hidden / t
    ffn = 2 * tokens * m.hidden * m.ffn_hidden / t
    core = 4 * tokens * s * q / t
    return BlockGemms(projections=(qkv, proj) + (ffn,) * m.ffn_matrices, attention_core=core)


def block_forward_flops(ctx: CostContext, sequences: ArrayLike) -> np.ndarray:
    """Whole-model (unsharded) forward FLOPs of one block for ``sequences`` sequences."""
    gemms = block_gemms(ctx, 1, sequences)
    return sum(gemms.projections) + gemms.attention_core


def logits_forward_flops(ctx: CostContext, sequences: ArrayLike) -> np.ndarray:
    """Whole-model forward FLOPs of the LM head: 2·b·s·h·V."""
    m = ctx.model
    return 2 * np.asarray(sequences, dtype=float) * ctx.seq_len * m.hidden * m.vocab


def model_flops_per_step(ctx: CostContext) -> float:
    """FLOPs of one training step without recompute (forward + backward = 3 × forward); the
    numerator of MFU (Korthikanti et al. 2022, §6)."""
    batch = ctx.job.global_batch
    forward = ctx.model.layers * block_forward_flops(ctx, batch) + logits_forward_flops(ctx, batch)
    return float(3 * forward)


def recompute_flops_per_step(ctx: CostContext, recompute: ArrayLike) -> np.ndarray:
    """Extra FLOPs of activation recomputation per step: full adds one block forward, selective
    the attention core (scores and attention · V). ``recompute``: 0 none, 1 selective, 2 full.
    With a flash-attention kernel, selective recompute is what the kernel's backward already
    does; by the usual convention that is not counted, so selective adds nothing there."""
    batch, layers = ctx.job.global_batch, ctx.model.layers
    whole = block_forward_flops(ctx, batch)
    core = block_gemms(ctx, 1, batch).attention_core
    code = np.asarray(recompute)
    selective = 0.0 if ctx.flash else core
    return layers * np.where(code == 2, whole, np.where(code == 1, selective, 0.0))
