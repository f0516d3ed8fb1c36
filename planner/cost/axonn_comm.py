"""AxoNN's tensor parallelism: the collectives of one transformer block on its 3D grid and the share
of them that stays exposed (Singh et al. IPDPS'24, arXiv:2305.13525; SC24, arXiv:2502.08145).

Sources: axonn-ai/axonn @660a224 (``fc`` = axonn/intra_layer/fully_connected.py, ``icomm`` =
axonn/intra_layer/communication.py, ``ovl`` = axonn/intra_layer/overlap_communication.py,
``comm`` = axonn/communication.py) and axonn-ai/Megatron-AxoNN @6d60f45 (``MA:``).

The grid. tp = X·Y·Z: X (``tp_column``, AxoNN's G_intra_c, "inner") splits a layer's input
features, Y (row, G_intra_r, "outer") its output features and the attention heads, Z
(``tp_depth``, G_intra_d) shards the flattened local weight block and splits the micro-batch
(T = s·b/Z tokens per GPU). Ranks are ordered X fastest, then Y, Z, pipeline, data (``comm``:76-88),
so an X group spans X GPUs, a Y group X·Y and a Z group X·Y·Z (each priced on the tiers it
spans, planner/cost/network.py). Megatron-AxoNN pairs a non-transposed layer (QKV, FFN up) with a
transposed one (attention output, FFN down; inner and outer swap, ``fc``:218-219), as Megatron
pairs column- and row-parallel layers. With X = Z = 1 every collective below is Megatron's:
two all-reduces of b·s·h over t per pass.

Per block per micro-batch, e = 2 bytes per element, q the attention width, c_qkv = q + 2·k·d_h the
QKV output, f_up the FFN up-projection output (2·f for SwiGLU), f the FFN width, P the block's
weights on one GPU (P·Z = P_block/(X·Y) gathered):

- forward, blocking (``fc``:119, ``async_op=False``): all-reduces over X of e·T·c_qkv/Y (QKV)
  and e·T·f_up/Y (FFN up); over Y of e·T·h/X twice (attention output, FFN down);
- backward: all-reduces of the input gradients over Y of e·T·h/X twice (QKV, FFN up) and over X
  of e·T·q/Y (attention output) and e·T·f/Y (FFN down) (``fc``:141-145); with AxoNN's overlap
  (``--overlap-axonn-comm``: OVERLAP_ALL_REDUCE) each is issued asynchronously and runs under the
  same layer's weight-gradient GEMM (``fc``:141-162), whose FLOPs equal the forward's: exposed
  max(0, AR_bwd − GEMM_fwd);
- a full recompute repeats the forward's collectives;
- over Z (when Z > 1): an all-gather of the weights, e·P·Z gathered, in the forward, again in
  the backward (@660a224 does not keep the forward's gather, ``fc``:127-130) and in the recompute
  forward; a reduce-scatter of the weight gradients, e·P·Z (``fc``:153-159). With
  ``--overlap-axonn-all-gather`` the forward (and recompute-forward) gathers are prefetched one
  layer ahead (``ovl``:55-121), exposed max(0, AG − forward); the backward gather is blocking;
  with ``--overlap-axonn-reduce-scatter`` the reduce-scatter runs under the rest of the backward
  (``ovl``:33-47): exposed max(0, RS − backward). The three overlap flags are the strategy's
  ``tp_overlap`` (on where the stack has it). Weights are not cached across the step (the
  ``--num-layers-for-caching-weights-in-depth-tensor-parallel-all-gather`` knob is 0 here).

The data-parallel all-reduce of the 1/(X·Y·Z) gradient shards runs after the backward without
overlap (Megatron-AxoNN rejects ``--overlap-grad-reduce``, MA: megatron/arguments.py:180-181):
the stack's dp_overlap is off and planner/cost/parallel_comm.py prices it; the gradient shard
per GPU is Megatron's P/t.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from planner.cost.compute import BlockTimes
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.flops import ArrayLike
from planner.cost.memory import gathered_block_params, grid_sizes
from planner.cost.network import all_gather_s, all_reduce_s, reduce_scatter_s, tier_index


def axonn_collectives_s(
    ctx: CostContext, tp: ArrayLike, column: ArrayLike, depth: ArrayLike, mb: ArrayLike
) -> dict[str, np.ndarray]:
    """Unhidden seconds per block per micro-batch of each collective family (module docstring):
    ``forward_x``, ``forward_y`` (blocking all-reduces), ``backward_x``, ``backward_y``
    (input-gradient all-reduces), ``gather_z`` (one weight all-gather), ``scatter_z`` (the
    gradient reduce-scatter)."""
    m = ctx.model
    x, y, z = grid_sizes(tp, column, depth)
    tokens = ACTIVATION_BYTES * np.asarray(mb, dtype=float) * ctx.seq_len / z
    x_span, y_span, z_span = x, x * y, x * y * z
    q = m.attention_width
    qkv = q + 2 * m.kv_heads * m.head_dim
    up = m.ffn_hidden * (m.ffn_matrices - 1)

    def over_x(width: float) -> np.ndarray:
        return all_reduce_s(ctx, x, x_span, tokens * width / y)

    def over_y(width: float) -> np.ndarray:
        return all_reduce_s(ctx, y, y_span, tokens * width / x)

    weights = ACTIVATION_BYTES * gathered_block_params(ctx, tp, column, depth)
    return {
        "forward_x": over_x(qkv) + over_x(up),
        "forward_y": 2 * over_y(m.hidden),
        "backward_x": over_x(q) + over_x(m.ffn_hidden),
        "backward_y": 2 * over_y(m.hidden),
        "gather_z": all_gather_s(ctx, z, z_span, weights),
        "scatter_z": reduce_scatter_s(ctx, z, z_span, weights),
    }


def axonn_exposed_s(
    ctx: CostContext,
    tp: ArrayLike,
    column: ArrayLike,
    depth: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    times: BlockTimes,
    overlap: ArrayLike,
) -> np.ndarray:
    """Exposed TP time per block per micro-batch on AxoNN's grid: the forward all-reduces in full
    (twice under full recompute), the backward ones and the Z collectives less what AxoNN's
    overlap hides (module docstring)."""
    c = axonn_collectives_s(ctx, tp, column, depth, mb)
    full = np.asarray(recompute) == 2
    forward = c["forward_x"] + c["forward_y"]
    backward = c["backward_x"] + c["backward_y"]
    gathers_hidden = 1 + full
    raw = forward * (1 + full) + backward + c["gather_z"] * (2 + full) + c["scatter_z"]
    hidden = (
        forward * (1 + full)
        + np.maximum(0.0, backward - times.forward_gemm_s)
        + gathers_hidden * np.maximum(0.0, c["gather_z"] - times.forward_s)
        + c["gather_z"]
        + np.maximum(0.0, c["scatter_z"] - times.backward_s)
    )
    on = np.asarray(overlap, dtype=bool) & ctx.stack.tp_overlap
    return np.where(on, hidden, raw)


class GroupComm(BaseModel):
    """One dimension of AxoNN's grid: its ranks, the GPUs its group spans (rank order X, Y, Z),
    the outermost network tier it uses and its collectives' unhidden seconds per step on the
    pipeline stage of layers/pp blocks."""

    ranks: int
    span_gpus: int
    tier: str
    collectives_s_per_step: float


class TensorParallelReport(BaseModel):
    """The tensor-parallel form of a strategy under a stack that runs AxoNN's layers: ``form``
    is ``axonn-3d`` (X·Z > 1) or ``megatron-1d`` (the grid 1 × tp × 1), and per dimension
    (``column`` X, ``row`` Y, ``depth`` Z) what its collectives cost before overlap
    (axonn_collectives_s × the passes × micro-batches × blocks per stage)."""

    form: str
    column: GroupComm
    row: GroupComm
    depth: GroupComm


def tensor_parallel_report(
    ctx: CostContext, tp: int, column: int, depth: int, mb: int, recompute: str, pp: int, n: float
) -> TensorParallelReport:
    """The report of one strategy's grid (TensorParallelReport)."""
    c = axonn_collectives_s(ctx, tp, column, depth, mb)
    full = 1 if recompute == "full" else 0
    per_step = n * ctx.model.layers / pp
    row = tp // (column * depth)
    seconds = {
        "column": c["forward_x"] * (1 + full) + c["backward_x"],
        "row": c["forward_y"] * (1 + full) + c["backward_y"],
        "depth": c["gather_z"] * (2 + full) + c["scatter_z"],
    }
    spans = {"column": column, "row": column * row, "depth": tp}
    ranks = {"column": column, "row": row, "depth": depth}
    tiers = ctx.system.network_tiers

    def group(name: str) -> GroupComm:
        index = int(tier_index(ctx, spans[name])) if ranks[name] > 1 else 0
        return GroupComm(
            ranks=ranks[name],
            span_gpus=spans[name],
            tier=tiers[index].name if ranks[name] > 1 else "none",
            collectives_s_per_step=float(seconds[name]) * per_step,
        )

    return TensorParallelReport(
        form="axonn-3d" if column * depth > 1 else "megatron-1d",
        column=group("column"),
        row=group("row"),
        depth=group("depth"),
    )
