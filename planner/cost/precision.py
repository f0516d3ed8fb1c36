"""What a low-precision recipe (planner.specs.precision, ``JobSpec.precision``) costs besides
its GEMMs: the memory-bound quantize / amax / transpose traffic around every low-precision
linear layer, and the cached low-precision weight copies in memory.

Per rank and micro-batch of T = b·s/cp tokens, a linear layer with K inputs and N outputs
(N, or K for a row-parallel layer, split over t) casts its input (T·K elements), its output
gradient (T·N) and its weight (K·N). Under sequence parallelism, a recipe that gathers in low
precision casts the local shard of a column-parallel layer's input (and of a row-parallel
layer's output gradient), T·K/t; one that gathers in bf16 (torchao rowwise) casts the whole
gathered tensor on every rank. Bytes (recipe fields, bytes per element):

    forward  = ½·(Σ T·K · input_cast + Σ K·N · weight_cast·[weights not cached])
    backward = forward + Σ T·N · grad_cast

(the forward casts the input and the weight, the backward re-casts or transposes them and
casts the gradient; where the stack caches the cast weights, Transformer Engine's once-per-
step cast is not charged). The linear layers are the attention projections, the FFN matrices
(each counted as its own module, as torchtitan's w1, w2, w3), the routed and shared experts;
the router, the attention core and the LM head stay in bf16. Blocks kept in bf16 (first/last)
cost nothing: everything is scaled by the low-precision share of the blocks
(CostContext.low_precision_share), as the GEMM time is.
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.flops import ArrayLike, kv_heads_per_rank


def _linears(ctx: CostContext, tp: ArrayLike, local_mb: ArrayLike, ep: ArrayLike):
    """(tokens, K, N, count, column_parallel) of one average block's low-precision linear
    layers on one rank (K and N already split over t)."""
    m, s = ctx.model, ctx.seq_len
    t = np.asarray(tp, dtype=float)
    tokens = np.asarray(local_mb, dtype=float) * s
    layers = []
    if m.is_latent_attention:
        layers += [(tokens, rows, columns / t, 1.0, True) for rows, columns in m.latent_projections]
    else:
        q = m.attention_width
        qkv = q / t + 2 * m.head_dim * kv_heads_per_rank(ctx, tp)
        layers += [(tokens, m.hidden, qkv, 1.0, True), (tokens, q / t, m.hidden, 1.0, False)]

    def ffn(rows: ArrayLike, width: float, count: float) -> list:
        up = [(rows, m.hidden, width / t, count, True)] * (m.ffn_matrices - 1)
        return up + [(rows, width / t, m.hidden, count, False)]

    if m.moe_share < 1:
        layers += ffn(tokens, m.ffn_hidden, 1 - m.moe_share)
    if m.moe_share > 0:
        shards = np.asarray(ep, dtype=float)
        layers += ffn(
            tokens * m.experts_per_token * shards / m.experts,
            m.expert_width,
            m.moe_share * m.experts / shards,
        )
        if m.shared_experts:
            layers += ffn(tokens, m.shared_experts * m.expert_width, m.moe_share)
    return layers


def quantize_bytes(
    ctx: CostContext, tp: ArrayLike, local_mb: ArrayLike, sp: ArrayLike, ep: ArrayLike = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) memory-bound bytes of the recipe's casts per block per micro-batch
    on one rank (module docstring); zero under bf16."""
    recipe = ctx.recipe
    share = ctx.low_precision_share
    if share == 0 or not (recipe.input_cast_bytes or recipe.grad_cast_bytes):
        zero = np.zeros(np.broadcast(np.asarray(tp), np.asarray(local_mb)).shape)
        return zero, zero
    t = np.asarray(tp, dtype=float)
    local_cast = np.asarray(sp, dtype=bool) & recipe.quantized_gather
    weight_cast = 0.0 if ctx.stack.caches_low_precision_weights else recipe.weight_cast_bytes
    inputs = grads = weights = 0.0
    for tokens, k, n, count, column in _linears(ctx, tp, local_mb, ep):
        gathered = np.where(local_cast, 1 / t, 1.0)
        inputs = inputs + count * tokens * k * (gathered if column else 1.0)
        grads = grads + count * tokens * n * (1.0 if column else gathered)
        weights = weights + count * k * n
    forward = 0.5 * (inputs * recipe.input_cast_bytes + weights * weight_cast) * share
    backward = forward + grads * recipe.grad_cast_bytes * share
    return np.asarray(forward), np.asarray(backward)


def kept_param_bytes(ctx: CostContext) -> float:
    """Bytes per element of a low-precision block's parameter kept in the recipe's format
    (JobSpec.fp8_params: the recipe's param_bytes), else bf16's ACTIVATION_BYTES."""
    if ctx.job.fp8_params and ctx.recipe.param_bytes is not None:
        return ctx.recipe.param_bytes
    return float(ACTIVATION_BYTES)


def block_weight_bytes(ctx: CostContext) -> float:
    """Bytes per held block parameter, averaged over the blocks: (1 − f)·2 + f·p, with f the
    low-precision share of the blocks and p kept_param_bytes (2 unless JobSpec.fp8_params).
    The ZeRO/FSDP parameter all-gathers move the same bytes (planner/cost/parallel_comm.py)."""
    share = ctx.low_precision_share
    return (1 - share) * ACTIVATION_BYTES + share * kept_param_bytes(ctx)


def weight_copy_bytes(ctx: CostContext, held_block_params: ArrayLike) -> np.ndarray:
    """HBM bytes of the cached low-precision weight copies (the recipe's weight_copy_bytes
    per element of the low-precision blocks' weights a rank holds), where the stack caches
    them (StackProfile.caches_low_precision_weights); 0 otherwise. A parameter kept in the
    recipe's format (JobSpec.fp8_params) is itself one of the copies: weight_copy_bytes −
    param_bytes remain (fp8 tensorwise: the transpose, 1 byte; MXFP8: the column-wise copy)."""
    if not ctx.stack.caches_low_precision_weights:
        return np.zeros_like(np.asarray(held_block_params, dtype=float))
    copy = ctx.recipe.weight_copy_bytes
    if ctx.job.fp8_params and ctx.recipe.param_bytes is not None:
        copy = max(0.0, copy - ctx.recipe.param_bytes)
    per_param = copy * ctx.low_precision_share
    return per_param * np.asarray(held_block_params, dtype=float)
