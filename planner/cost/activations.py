"""Activation bytes one transformer block stores per micro-batch on one rank, by what the
stack's recompute policy keeps (StackProfile.selective_policy) and in which precision it keeps
the GEMM inputs (StackProfile.fp8_activations).

Widths per token, in units of h (the hidden size): q = a·(d_qk + d_v)/(2h) for Q and for the
attention output (1 for standard attention), kv for K or for V (k·d_h/h; KV replicated when
t > k), f' = f/h for the FFN intermediate (f = (k + shared)·f_e in an MoE block), p = k_r·(MoE
share) token copies an MoE block sends to its experts. Bytes per token (× s·b·h for the block):

- **none** (Korthikanti et al. 2022 §4, generalised to GQA, SwiGLU and MoE; eager stacks
  keep two more tensors, below): the two norm
  inputs 4, the dropout masks 2 (with dropout), the QKV and FFN inputs 2·g, the expert inputs
  g·p — replicated over TP ranks unless sequence parallelism splits them; Q 2q, K and V 4·kv,
  the attention output 2q (+ q: its fp8 copy, the output projection's saved input, when g = 1),
  the activation function's input (SwiGLU 2·2f': gate and up; GeLU 2f') and the second FFN
  GEMM's input g·f' — split over t; the attention scores (4 + mask)·a·s/h (÷t) unless a flash
  kernel never materialises them. g = 2 (16-bit), or 1 under fp8 training where the stack keeps
  the fp8 copy of a GEMM input for its weight gradient (Transformer Engine's Linear:
  NVIDIA/TransformerEngine@fedd9ddc (v2.7) transformer_engine/pytorch/module/linear.py keeps
  ``saved_inputmat`` as the quantized input with column-wise usage only; DeepSeek-V3 Technical
  Report arXiv:2412.19437 §3.3.2 'cache activations in FP8 format for the backward pass of the
  Linear operator'). For GPT shapes in 16 bits this is s·b·h·(34 + 5·a·s/h) (Korthikanti's
  eq. 1), for Llama 3 70B 33.5·s·b·h, 29·s·b·h with fp8 GEMM inputs.
- **selective**, by policy:
  ``attention_core`` — the above without the attention scores (Korthikanti's selective
  recompute; the same as none under flash attention);
  ``torchtitan_op`` — torchtitan's per-op selective checkpointing (``selective_ac_option =
  'op'``, pytorch/torchtitan@9dec370a torchtitan/parallelisms/parallelize_llama.py ``_save_list``
  and ``_custom_policy``: the outputs of aten.mm are saved 'except every second mm', and those
  of the flash/efficient SDPA and of the TP reduce-scatters), i.e. on torchtitan's Llama block
  (mm order wq, wk, wv, wo, w1, w3, w2): the block input 2 (÷t under SP), wq's output 2q, wv's
  2·kv, the SDPA output 2q, w1's 2f' (GeLU: the first FFN GEMM's) split over t, w2's 2 (a row-
  parallel GEMM's full-width partial sum, SwiGLU only), and under SP the two reduce-scatter
  outputs 4/t (t > 1); the expert inputs g·p as under none. 15.5·s·b·h for Llama 3 8B at t = 1;
  ``deepseek`` — DeepSeek-V3's (Technical Report §3.2.3: 'We recompute all RMSNorm operations
  and MLA up-projections during back-propagation'; §3.3.2: the attention output cached in a
  custom E5M6 format, the SwiGLU inputs of the MoE cached in FP8 and its output recomputed):
  the norm inputs 4, the dropout masks, the dispatched expert inputs g·p, the MLA latents
  2·(q_lora + kv_lora + rope)/h (Q, K and V otherwise), the attention output e·q (e = 1.5 for
  E5M6 under fp8, else 2) and the SwiGLU (GeLU) input g·2f' (g·f'); norm outputs, the QKV and
  FFN inputs and the second FFN GEMM's input are rebuilt. 21.6·s·b·h for DeepSeek-V3's average
  block under fp8 (61.5 when everything is stored in 16 bits).
- **full**: the block input, 2 (÷t under SP).

Eager stacks (no fused kernels, not compiled: CostContext.fused_elementwise) also keep silu's
output, 2f' (silu(x1)·x3 saves both factors of the product), and a stack that repeats GQA's K
and V to the query heads before attention (StackProfile.expands_kv: torchtitan's repeat_kv
before SDPA) keeps them at the query width, 4q instead of 4·kv. Measured for this project on an
H200 (benchmarks/gpu/memory_peaks.py, benchmarks/gpu/results/memory_peaks_h200.json): eager
Llama blocks with PyTorch's fused RMSNorm, SDPA and repeat_interleave'd K/V save 47.6, 36.9 and
43.5·s·b·h at Llama 3.2 1B, 3B and 3.1 8B widths, where the formula gives 48.0, 37.3 and 44.0
(tests/test_memory_measured.py); without the two eager terms 37.0, 29.3 and 34.0. An RMSNorm
written op by op (HuggingFace's LlamaRMSNorm: fp32 upcast, variance, rsqrt) keeps 8.5 more,
measured the same way; no catalog stack runs one.

Context parallelism stores b/cp of each micro-batch's tokens per rank: every term above with
b/cp in place of b (the caller passes the local micro-batch).
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.flops import PARTIAL_POLICIES, ArrayLike, kv_heads_per_rank

E5M6_BYTES = 1.5
"""DeepSeek-V3's custom 12-bit format for the attention output (Technical Report §3.3.2)."""


def gemm_input_bytes(ctx: CostContext) -> int:
    """Bytes per saved GEMM input value: 1 under low-precision (FP8/FP4 recipe) training on a
    stack that keeps the fp8 copy (StackProfile.fp8_activations), else 2."""
    fp8 = ctx.recipe.low_precision and ctx.stack.fp8_activations
    return 1 if fp8 else ACTIVATION_BYTES


def block_bytes(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> np.ndarray:
    """Activation bytes one block stores per micro-batch on one rank under the stack's policies
    (module docstring). Depends on (tp, micro_batch, recompute, sequence_parallel; AxoNN's
    tp_column, tp_depth). On AxoNN's grid (X = ``column``, Z = ``depth``) the replicated
    tensors (norm inputs, residuals, the block input) are [s·b/Z, h/X] (÷ X·Z instead of 1)
    and the split ones (QKV, attention, FFN) are on heads and FFN width / Y of s·b/Z tokens
    (÷ Y·Z = t/X instead of t; MA: megatron/initialize.py:379-381, transformer.py:446-451);
    Megatron's form is X = Z = 1."""
    m = ctx.model
    tp_ranks = np.asarray(tp, dtype=float)
    x = np.asarray(column, dtype=float)
    unsplit_ranks = x * np.asarray(depth, dtype=float)
    t = tp_ranks / x  # the Y·Z ranks the split tensors are divided over (tp when X = 1)
    split = np.asarray(sp, dtype=bool)
    code = np.asarray(recompute)
    sbh = np.asarray(mb, dtype=float) * ctx.seq_len * m.hidden
    g = gemm_input_bytes(ctx)
    masks = 2.0 if m.dropout else 0.0  # two 1-byte dropout masks
    experts = g * m.experts_per_token * m.moe_share
    swiglu = m.ffn_kind == "swiglu"
    f = m.ffn_intermediate_width / m.hidden
    act_in = (2 if swiglu else 1) * f  # values entering the activation function
    head_units = (m.qk_head_dim + m.value_head_dim) / 2 / m.hidden
    q = m.heads * head_units
    kv = kv_heads_per_rank(ctx, tp) * tp_ranks * head_units

    def per_rank(replicated, sharded, unsplit=0.0) -> np.ndarray:
        """Bytes per rank: ``replicated`` split over t only under SP (else over AxoNN's X·Z),
        ``sharded`` always over t."""
        replicated = np.where(split, replicated / t, replicated / unsplit_ranks)
        return (replicated + sharded / t + unsplit) * sbh

    fp8_copy = q if g == 1 else 0.0
    # eager silu(gate)·up keeps silu's output for the product's backward
    eager_glu = 2 * f if swiglu and not ctx.fused_elementwise else 0.0
    saved_kv = q if ctx.stack.expands_kv else kv
    stored = per_rank(
        4 + masks + 2 * g + experts,
        2 * q + 4 * saved_kv + 2 * q + fp8_copy + 2 * act_in + g * f + eager_glu,
    )
    core = (5 if m.dropout else 4) * m.heads * ctx.seq_len / m.hidden * sbh / t
    keep_core = (code == 0) & (not ctx.flash)
    none = stored + np.where(keep_core, core, 0.0)
    policy = ctx.stack.selective_policy
    if policy == "torchtitan_op":
        selective = per_rank(
            2 + experts,
            2 * q + 2 * kv + 2 * q + 2 * f + np.where(split & (tp_ranks > 1), 4.0, 0.0),
            2.0 if swiglu else 0.0,
        )
    elif policy == "deepseek":
        if m.is_latent_attention:
            latent = 2 * (m.q_lora_rank + m.kv_lora_rank + m.rope_head_dim) / m.hidden
            qkv = 0.0
        else:
            latent, qkv = 0.0, 2 * q + 4 * kv
        out = E5M6_BYTES if ctx.recipe.low_precision else ACTIVATION_BYTES
        selective = per_rank(4 + masks + experts + latent, qkv + out * q + g * act_in)
    else:
        selective = stored
    block_input = ACTIVATION_BYTES * sbh * np.where(split, 1 / t, 1 / unsplit_ranks)
    return np.where(code == 2, block_input, np.where(code == 1, selective, none))


def rebuilt_bytes(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    column: ArrayLike = 1,
    depth: ArrayLike = 1,
) -> np.ndarray:
    """What one block rebuilds during its backward, resident while it runs: under full
    recompute its whole activations (recompute none); under a selective policy that recomputes
    GEMMs or norms (torchtitan_op, deepseek) the part it did not keep; nothing otherwise."""
    code = np.asarray(recompute)
    whole = block_bytes(ctx, tp, mb, 0, sp, column, depth)
    partial = ctx.stack.selective_policy in PARTIAL_POLICIES
    kept = block_bytes(ctx, tp, mb, 1, sp, column, depth) if partial else whole
    return np.where(code == 2, whole, np.where(code == 1, whole - kept, 0.0))
