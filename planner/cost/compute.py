"""Compute time of one transformer block on one TP rank, per micro-batch.

time = Σ GEMM FLOPs / (peak · efficiency(GEMM FLOPs) · stack) + memory-bound bytes / HBM
bandwidth, where efficiency() is the accelerator's matmul curve (raw GEMM benchmarks) and stack
its ``gemm_stack_efficiency`` (what a training stack achieves of it, calibrated); the attention
core runs at ``attention_efficiency`` times the curve instead.

Memory-bound traffic per block forward (bytes, e = 2): two layer norms 4·e·s·b·h; two
bias-dropout-residual adds 2·(3·e + 1)·s·b·h (the 1 is the dropout mask, if the model uses
dropout); the activation function 2·e·s·b·f (GeLU) or 3·e·s·b·f (SwiGLU); with materialised
attention the softmax (2·e) and its dropout (2·e + 1) over a·s²·b elements. Layer norms and the
residual adds run on the full sequence on every TP rank unless sequence parallelism splits them;
the rest splits over t. Backward costs twice the forward.

Flash attention fuses the softmax into one kernel (no memory-bound softmax traffic) and its
backward recomputes the scores: 3 × the forward attention-core FLOPs instead of 2 ×.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.efficiency import matmul_time_s
from planner.cost.flops import ArrayLike, block_gemms, logits_forward_flops


@dataclass(frozen=True)
class BlockTimes:
    """Seconds per block per micro-batch on one rank. Depends on (tp, micro_batch, recompute,
    sequence_parallel)."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    forward_gemm_s: np.ndarray
    """The weight-GEMM part of the forward: the window TP overlap can hide communication in."""


def _memory_bound_forward_bytes(
    ctx: CostContext, tp: ArrayLike, mb: ArrayLike, sp: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(bytes outside the attention core, bytes of the materialised softmax) per rank."""
    m, s, e = ctx.model, ctx.seq_len, ACTIVATION_BYTES
    t = np.asarray(tp, dtype=float)
    sbh = np.asarray(mb, dtype=float) * s * m.hidden
    mask = 1 if m.dropout else 0
    norms_and_residuals = (4 * e + 2 * (3 * e + mask)) * sbh
    norms_and_residuals = np.where(
        np.asarray(sp, dtype=bool), norms_and_residuals / t, norms_and_residuals
    )
    activation = (3 if m.ffn_kind == "swiglu" else 2) * e * sbh * m.ffn_hidden / m.hidden / t
    if ctx.flash:
        softmax = np.zeros_like(sbh)
    else:
        softmax = (2 * e + (2 * e + mask if m.dropout else 0)) * m.heads * s * sbh / m.hidden / t
    return norms_and_residuals + activation, softmax


def block_times(
    ctx: CostContext, tp: ArrayLike, mb: ArrayLike, recompute: ArrayLike, sp: ArrayLike
) -> BlockTimes:
    """Forward, backward and recompute time of one block per micro-batch on one rank."""
    accel, peak, hbm = ctx.system.accelerator, ctx.peak_flops, ctx.hbm_bytes_per_s
    gemms = block_gemms(ctx, tp, mb)
    gemm_s = (
        sum(matmul_time_s(accel, peak, flops) for flops in gemms.projections)
        / accel.gemm_stack_efficiency
    )
    core_s = matmul_time_s(accel, peak, gemms.attention_core) / accel.attention_efficiency
    other_bytes, softmax_bytes = _memory_bound_forward_bytes(ctx, tp, mb, sp)
    other_s, softmax_s = other_bytes / hbm, softmax_bytes / hbm
    forward = gemm_s + core_s + other_s + softmax_s
    backward = 2 * gemm_s + (3 if ctx.flash else 2) * core_s + 2 * (other_s + softmax_s)
    code = np.asarray(recompute)
    selective = 0.0 if ctx.flash else core_s + softmax_s
    recompute_s = np.where(code == 2, forward, np.where(code == 1, selective, 0.0))
    return BlockTimes(
        forward_s=forward, backward_s=backward, recompute_s=recompute_s, forward_gemm_s=gemm_s
    )


def lm_head_time_s(ctx: CostContext, tp: ArrayLike, mb: ArrayLike) -> np.ndarray:
    """Forward + backward of the LM head and the loss on the last stage, per micro-batch.
    Depends on (tp, micro_batch). Logits GEMM (vocab-parallel over t), then the fused cross
    entropy that writes fp32 logits, reads them and writes their gradient (3 × 4 bytes each)."""
    t = np.asarray(tp, dtype=float)
    flops = logits_forward_flops(ctx, mb) / t
    accel = ctx.system.accelerator
    gemm = matmul_time_s(accel, ctx.peak_flops, flops) / accel.gemm_stack_efficiency
    loss_bytes = 12 * np.asarray(mb, dtype=float) * ctx.seq_len * ctx.model.vocab / t
    return 3 * gemm + loss_bytes / ctx.hbm_bytes_per_s
