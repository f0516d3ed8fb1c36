"""Compute time of one transformer block on one TP × CP rank, per micro-batch.

A rank computes b/cp of the micro-batch's tokens (context parallelism splits each sequence over
cp ranks; Megatron-Core CP) and 1/t of each weight matrix. Per block:

- weight GEMMs: Σ FLOPs / (rate · efficiency(GEMM FLOPs)) / ``gemm_efficiency``, where
  efficiency() is the accelerator's raw matmul curve and ``gemm_efficiency`` the stack's share
  of it in a real step. The low-precision share of the blocks (CostContext.
  low_precision_share) runs at the recipe format's rate (its peak × the format's plateau over
  bf16's × the sustained clock fraction) / the recipe's ``gemm_efficiency``, the rest at the
  bf16 rate (bf16 peak × the clock fraction);
- the attention core (scores and attention · V). With a fused flash kernel, causal attention
  skips the masked half: forward FLOPs are half of 4·b·s²·q, the backward 2.5 × the forward
  (it recomputes the scores; Dao 2023, §3.1), each at the stack's ``attention_kernel`` measured
  on the accelerator for a chunk of s/cp tokens (the ring step of CP), / the stack's
  ``attention_efficiency``. Materialised attention (the 2021–22 Megatron runs) computes the whole
  s×s scores as batched GEMMs on the matmul curve, backward 2 × forward;
- memory-bound kernels at the achievable HBM bandwidth × the stack's
  ``memory_bound_efficiency``. Bytes per block forward (e = 2): two layer norms 4·e·s·b·h; two
  bias-dropout-residual adds 2·(3·e + 1)·s·b·h (the 1 is the dropout mask, if the model uses
  dropout); the activation function 2·e·s·b·f (GeLU) or 3·e·s·b·f (SwiGLU); with materialised
  attention the softmax (2·e) and its dropout (2·e + 1) over a·s²·b elements. Layer norms and
  residual adds run on the full sequence on every TP rank unless sequence parallelism splits
  them; the rest splits over t. Backward costs twice the forward. A stack without fused
  kernels that is not compiled (CostContext.fused_elementwise) runs SwiGLU (Llama-style:
  RMSNorm, rotary) blocks' elementwise work as PyTorch eager ops, which adds per element:
  RMSNorm 32 bytes (at::rms_norm's composite: upcast to fp32, pow, mean, x·rsqrt, cast back,
  × weight read and write 36 bytes against a fused kernel's 4), SwiGLU 4 bytes per
  intermediate element (silu 4 and the product 6 against 6 fused), rotary 24 bytes per query
  and key element (torchtitan apply_rotary_emb: fp32 complex view 6, complex product 16,
  cast back 6 against 4 fused; the fused pass itself is not charged in either mode);
- the low-precision recipe's quantize / amax / transpose kernels (planner/cost/precision.py),
  memory-bound;
- the stack's fixed ``layer_overhead_us`` per block (a third in the forward, two thirds in the
  backward): kernel launches and framework work that do not shrink with the block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import calculon
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.efficiency import attention_kernel_efficiency, matmul_time_s
from planner.cost.experts import imbalance
from planner.cost.flops import (
    ArrayLike,
    block_gemms,
    kv_heads_per_rank,
    logits_forward_flops,
    recomputed_gemm_shares,
)
from planner.cost.precision import quantize_bytes

FLASH_BACKWARD_FLOPS = 2.5
"""Backward / forward FLOPs of a flash-attention kernel: five matrix products (the scores
recomputed, dV, dP, dQ, dK) against two (Dao 2023, FlashAttention-2, §4.1)."""
CAUSAL_FLOPS = 0.5
"""A causal flash kernel skips the masked (upper) half of the score tiles."""
EAGER_RMSNORM_BYTES = 32
"""Extra bytes per element of an eager RMSNorm over a fused one (module docstring; PyTorch
aten/src/ATen/native/layer_norm.cpp rms_norm, the composite torchtitan's nn.RMSNorm ran)."""
EAGER_SWIGLU_BYTES = 4
"""Extra bytes per FFN intermediate element of eager silu(x1)·x3 over a fused kernel."""
EAGER_ROPE_BYTES = 24
"""Extra bytes per query/key element of torchtitan's eager apply_rotary_emb
(torchtitan/models/llama3/model.py) over a fused rotary kernel."""


@dataclass(frozen=True)
class BlockTimes:
    """Seconds per block per micro-batch on one rank. Depends on (tp, cp, micro_batch,
    recompute, sequence_parallel, ep)."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    forward_gemm_s: np.ndarray
    """The weight-GEMM part of the forward: the window TP overlap can hide communication in."""
    attention_forward_s: np.ndarray
    """The attention core's forward: the window CP's K/V exchange hides under."""
    attention_backward_s: np.ndarray
    offload_forward_window_s: np.ndarray | None = None
    """What an offload transfer hides under in the forward; None: the forward (Calculon's
    arithmetic: its flop time, as its transfers cannot overlap the block's HBM traffic)."""
    offload_backward_window_s: np.ndarray | None = None
    """Likewise in the backward; None: the backward and the recompute."""

    @property
    def offload_forward_window(self) -> np.ndarray:
        if self.offload_forward_window_s is None:
            return self.forward_s
        return self.offload_forward_window_s

    @property
    def offload_backward_window(self) -> np.ndarray:
        if self.offload_backward_window_s is None:
            return self.backward_s + self.recompute_s
        return self.offload_backward_window_s


def _memory_bound_forward_bytes(
    ctx: CostContext,
    tp: ArrayLike,
    local_mb: ArrayLike,
    sp: ArrayLike,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """(bytes outside the attention core, bytes of the materialised softmax) per rank. On
    AxoNN's grid (X = ``column``, Z = ``depth``) the norms and residual adds run on the
    [s·b/Z, h/X] slice (replicated over Y; Megatron's replicated case is X = Z = 1) and the
    FFN activation and softmax on Y·Z = t/X of their tensors (heads and FFN width over Y, the
    tokens over Z; MA: megatron/model/transformer.py:786-806)."""
    m, s, e = ctx.model, ctx.seq_len, ACTIVATION_BYTES
    t = np.asarray(tp, dtype=float)
    x = np.asarray(column, dtype=float)
    sbh = np.asarray(local_mb, dtype=float) * s * m.hidden
    mask = 1 if m.dropout else 0
    norms_and_residuals = (4 * e + 2 * (3 * e + mask)) * sbh
    norms_and_residuals = np.where(
        np.asarray(sp, dtype=bool),
        norms_and_residuals / t,
        norms_and_residuals / (x * np.asarray(depth, dtype=float)),
    )
    t = t / x  # the Y·Z ranks the FFN and attention tensors split over
    width = m.ffn_intermediate_width / m.hidden
    activation = (3 if m.ffn_kind == "swiglu" else 2) * e * sbh * width / t
    # MoE blocks permute each token to its k experts and back: k copies written and read twice
    permute = 4 * e * sbh * m.experts_per_token * m.moe_share / t
    if not ctx.fused_elementwise and m.ffn_kind == "swiglu":
        norms = 2 * EAGER_RMSNORM_BYTES * sbh
        replicated = norms / (x * np.asarray(depth, dtype=float))
        norms = np.where(np.asarray(sp, dtype=bool), norms / (t * x), replicated)
        query_key = m.attention_width / t + m.head_dim * kv_heads_per_rank(ctx, tp)
        rope = EAGER_ROPE_BYTES * sbh * query_key / m.hidden
        activation = activation + norms + rope + EAGER_SWIGLU_BYTES * sbh * width / t
    if ctx.flash:
        softmax = np.zeros_like(sbh)
    else:
        softmax = (2 * e + (2 * e + mask if m.dropout else 0)) * m.heads * s * sbh / m.hidden / t
    return norms_and_residuals + activation + permute, softmax


def attention_core_s(
    ctx: CostContext, core_flops: np.ndarray, cp: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the attention core whose whole (unmasked) forward is
    ``core_flops`` per rank (see the module docstring)."""
    accel, stack = ctx.system.accelerator, ctx.stack
    if not ctx.flash:
        forward = matmul_time_s(accel, ctx.bf16_rate_flops, core_flops) / stack.attention_efficiency
        return forward, 2 * forward
    causal = CAUSAL_FLOPS * np.asarray(core_flops, dtype=float)
    points = accel.attention_kernels.get(stack.attention_kernel)
    if points is None:  # no measurement of this kernel here: the matmul curve instead
        forward = matmul_time_s(accel, ctx.bf16_rate_flops, causal) / stack.attention_efficiency
        return forward, FLASH_BACKWARD_FLOPS * forward
    chunk = ctx.seq_len / np.asarray(cp, dtype=float)
    forward_eff, backward_eff = attention_kernel_efficiency(points, chunk)
    rate = ctx.bf16_rate_flops * stack.attention_efficiency
    return causal / (rate * forward_eff), FLASH_BACKWARD_FLOPS * causal / (rate * backward_eff)


def block_times(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    cp: ArrayLike = 1,
    ep: ArrayLike = 1,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> BlockTimes:
    """Forward, backward and recompute time of one block per micro-batch on one rank; the
    busiest expert-parallel rank runs ``expert_imbalance`` × the mean routed-expert GEMMs.
    Under Calculon's arithmetic, Calculon's layers (planner/cost/calculon.py calculon_block).

    On AxoNN's grid (``column`` X, ``depth`` Z; planner/cost/axonn_comm.py) a GPU's weight GEMMs
    are [s·b/Z, in/X]·[in/X, out/Y]: 1/t of the FLOPs, as in Megatron's form, on the same
    matmul curve; the attention core runs on heads/Y of s·b/Z tokens, t/X of Megatron's
    (replicated over X: the QKV output is all-reduced over X, MA: transformer.py:225, 446-451)."""
    if ctx.calculon:
        return _calculon_times(ctx, tp, mb, recompute, sp)
    accel, stack = ctx.system.accelerator, ctx.stack
    local_mb = np.asarray(mb, dtype=float) / np.asarray(cp, dtype=float)
    gemms = block_gemms(ctx, tp, local_mb, ep)
    busiest = imbalance(ctx, ep)

    # the recipe's low-precision share of each GEMM at its rate, the rest in bf16
    share = ctx.low_precision_share
    rates = [
        (weight, rate)
        for weight, rate in (
            (1 - share, ctx.bf16_rate_flops),
            (share / ctx.recipe.gemm_efficiency, ctx.gemm_rate_flops),
        )
        if weight > 0
    ]
    kind_s = [
        count
        * (busiest if routed else 1.0)
        * sum(weight * matmul_time_s(accel, rate, flops) for weight, rate in rates)
        for count, flops, routed in zip(gemms.counts, gemms.projections, gemms.routed, strict=True)
    ]
    gemm_s = sum(kind_s) / stack.gemm_efficiency
    core = gemms.attention_core * np.asarray(column, dtype=float)
    core_forward, core_backward = attention_core_s(ctx, core, cp)
    other_bytes, softmax_bytes = _memory_bound_forward_bytes(ctx, tp, local_mb, sp, column, depth)
    cast_forward, cast_backward = quantize_bytes(ctx, tp, local_mb, sp, ep)
    rate = ctx.memory_bound_bytes_per_s
    other_s, softmax_s = other_bytes / rate, softmax_bytes / rate
    overhead_s = stack.layer_overhead_us * 1e-6
    forward = gemm_s + core_forward + other_s + softmax_s + cast_forward / rate + overhead_s / 3
    backward = (
        2 * gemm_s
        + core_backward
        + 2 * (other_s + softmax_s)
        + cast_backward / rate
        + 2 * overhead_s / 3
    )
    code = np.asarray(recompute)
    shares = recomputed_gemm_shares(ctx, tp)
    if shares is None:  # attention_core: the scores (none under a flash kernel)
        selective = 0.0 if ctx.flash else core_forward + softmax_s
    else:  # the policy's GEMMs and the memory-bound kernels (planner/cost/activations.py)
        redone = sum(share * time for share, time in zip(shares, kind_s, strict=True))
        selective = redone / stack.gemm_efficiency + other_s
    recompute_s = np.where(code == 2, forward, np.where(code == 1, selective, 0.0))
    return BlockTimes(
        forward_s=forward,
        backward_s=backward,
        recompute_s=recompute_s,
        forward_gemm_s=gemm_s,
        attention_forward_s=np.broadcast_to(core_forward, np.shape(forward)),
        attention_backward_s=np.broadcast_to(core_backward, np.shape(forward)),
    )


def _calculon_times(
    ctx: CostContext, tp: ArrayLike, mb: ArrayLike, recompute: ArrayLike, sp: ArrayLike
) -> BlockTimes:
    """Calculon's block (calculon.calculon_block): forward = fw, backward = agrad + wgrad,
    recompute = the rebuilt layers' fw, each flop + memory time; the TP overlap's slowdown
    is the TP term's (step.block_pieces). Offload hides under the flop time of the forward
    and of the backward plus the recompute (llm.py _compute_batch_stats: the transfer plus
    the block's memory time against the block's time)."""
    block = calculon.calculon_block(ctx, tp, mb, recompute, sp)
    zero = np.zeros_like(block.forward_s)
    return BlockTimes(
        forward_s=block.forward_s,
        backward_s=block.agrad_s + block.wgrad_s,
        recompute_s=block.recompute_s,
        forward_gemm_s=zero,
        attention_forward_s=zero,
        attention_backward_s=zero,
        offload_forward_window_s=block.forward_flop_s,
        offload_backward_window_s=block.backward_flop_s + block.recompute_s,
    )


def lm_head_time_s(ctx: CostContext, tp: ArrayLike, mb: ArrayLike, cp: ArrayLike = 1):
    """Forward + backward of the LM head and the loss on the last stage, per micro-batch, on
    one rank's b/cp sequences. Depends on (tp, cp, micro_batch). Logits GEMM (vocab-parallel
    over t, in bf16 under every precision recipe: planner.specs.precision), then the fused
    cross entropy that writes fp32 logits, reads them and writes their
    gradient (3 × 4 bytes each). None under Calculon's arithmetic, which models no head."""
    t = np.asarray(tp, dtype=float)
    if ctx.calculon:
        return np.zeros(np.broadcast(t, np.asarray(mb), np.asarray(cp)).shape)
    local_mb = np.asarray(mb, dtype=float) / np.asarray(cp, dtype=float)
    flops = logits_forward_flops(ctx, local_mb) / t
    rate = ctx.bf16_rate_flops
    gemm = matmul_time_s(ctx.system.accelerator, rate, flops) / ctx.stack.gemm_efficiency
    loss_bytes = 12 * local_mb * ctx.seq_len * ctx.model.vocab / t
    return 3 * gemm + loss_bytes / ctx.memory_bound_bytes_per_s
