"""Calculon's arithmetic (calculon-ai/calculon @ caa4b11f8fe1fee3ba57adaacb7590d7deabd053), for
the stacks whose profile says ``arithmetic: calculon``: the SC23 multi-trillion poster's model,
reproduced so that planner's answers on the poster's problems are like for like.

The existing cost terms call these functions where the mode is on (planner/cost/compute.py,
step.py, offload.py, parallel_comm.py, memory.py), so that evaluation, the solver's tables and
the oracle still share one cost model. What differs from planner's own arithmetic
(/work/notes/calculon.md, D1–D14):

- a block is Calculon's list of layers (llm.py ``_build_attn_block``, ``_build_mlp_block``, the
  tensor-parallel-overlap form: fused QKV, LinearOverlapped GEMMs), each with its FLOPs and the
  bytes it touches per pass (layers.py ``Layer.get_fw/agrad/wgrad_mem_accessed``: a Linear
  reads its weight every micro-batch); a layer's time is flop time + memory time (system.py
  ``get_processing_time``, ``processing_mode: no_overlap``), each at a *step* efficiency of the
  operation's own size (processor.py ``Processor.efficiency``, memory.py
  ``Memory.efficiency``); GEMMs and batched attention products run on the matrix unit, every
  other layer (norms, GeLU, softmax, dropout, residuals, TP reductions, the optimizer) on the
  vector unit (layers.py ``Layer.compute_flops_time``);
- a collective pays one latency: α + size·(1 + offset/g)/(β·efficiency) (network.py
  ``Network.time``), size the whole buffer;
- TP overlap tile by tile (layers.py ``LinearOverlapped.compute_processing_time``): t tiles per
  GEMM, the GEMM's FLOPs slowed by 1/(1 − u) while communicating (u the network's
  processor_usage); the communication hides under that GEMM alone, the excess shows;
- offload streams weights, stored activations and (with optimizer offload) the block's optimizer
  state every micro-batch, and cannot overlap the block's own HBM time (llm.py
  ``_get_fw/bw_offload_size``, ``_compute_batch_stats``);
- optimizer sharding keeps one unsharded fp32 gradient block and 1/d of the 16-bit gradients
  of the others (ZeRO-2's memory), with one reduce-scatter and all-gather per block and step
  (ZeRO-1's traffic): under this arithmetic ``zero_stage`` 1 is Calculon's
  ``optimizer_sharding`` and 0 its absence (ZeRO-2/3 are not Calculon's, rules.py);
- DP overlap exposes one block's collective and a processor_usage share of the rest;
- no embedding, LM head or logits (Calculon models the blocks only).

Over 500 lines by design: one module holds Calculon's whole arithmetic, the layer list and the
batch-level formulas built on it, each next to the Calculon function it cites; split, the
citations and the shared layer sums would scatter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.network import tier_index
from planner.errors import InputError
from planner.specs.system import CalculonTables, StepEfficiency

ArrayLike = np.ndarray | float | int
E = ACTIVATION_BYTES
FP32_GRAD_BYTES = 4
"""Calculon accumulates the block being computed's gradients in fp32 (Layer.get_weight_grad,
sharded=False)."""
OPTIMIZER_FLOPS_PER_PARAM = 11
"""Adam's vector FLOPs per gradient element (layers.py Layer.get_optim_step_flops)."""
RESIDENT_STATE_BLOCKS = 2
"""Blocks of offloaded weights and optimizer state kept in HBM (llm.py get_weight_space_min,
get_optimizer_space_min)."""
MIN_OFFLOAD_BLOCKS = 3
"""Calculon refuses offloading with fewer blocks per processor (llm.py compile: 'Offloading
requires each processor to handle at least 3 blocks')."""


def enabled(ctx: CostContext) -> bool:
    """Whether the job's stack runs Calculon's arithmetic."""
    return ctx.stack.arithmetic == "calculon"


def tables(ctx: CostContext) -> CalculonTables:
    """The system's Calculon tables; an input error where it has none."""
    found = ctx.system.calculon
    m = ctx.model
    if m.is_moe or m.is_latent_attention or m.kv_heads != m.heads or m.ffn_kind != "gelu":
        raise InputError(
            f"model {m.name!r}: Calculon's arithmetic (stack {ctx.stack.name!r}) models dense "
            "GPT blocks (multi-head attention, kv_heads = heads, GeLU FFN, no experts or latent "
            "attention); allowed: such a model, or another stack"
        )
    if found is None:
        raise InputError(
            f"stack {ctx.stack.name!r} runs Calculon's arithmetic, which needs the system's "
            f"calculon tables; system {ctx.system.name!r} has none (system field calculon; "
            "allowed: a system that states them, e.g. h100-offload-512g-poster)"
        )
    return found


def step_efficiency(rows: tuple[StepEfficiency, ...], size: ArrayLike, unit: float) -> np.ndarray:
    """The efficiency of the largest row whose ``at_least``·unit the size reaches (Calculon's
    first row, in its descending order, that the operation reaches)."""
    x = np.asarray(size, dtype=float)
    result = np.full(x.shape, rows[0].efficiency)
    for row in rows[1:]:
        result = np.where(x >= row.at_least * unit, row.efficiency, result)
    return result


def matrix_s(ctx: CostContext, flops: ArrayLike) -> np.ndarray:
    """A matrix-unit operation: flops / (peak · efficiency(flops))."""
    f = np.asarray(flops, dtype=float)
    eff = step_efficiency(tables(ctx).matrix_efficiency, f, 1e9)
    return f / (ctx.peak_flops * eff)


def vector_s(ctx: CostContext, flops: ArrayLike) -> np.ndarray:
    """A vector-unit operation (system.py get_vector_throughput)."""
    f = np.asarray(flops, dtype=float)
    calc = tables(ctx)
    return f / (calc.vector_tflops * 1e12 * step_efficiency(calc.vector_efficiency, f, 1e9))


def hbm_s(ctx: CostContext, nbytes: ArrayLike) -> np.ndarray:
    """An operation's HBM traffic: bytes / (bandwidth · efficiency(bytes)) (Layer.
    compute_mem_time)."""
    b = np.asarray(nbytes, dtype=float)
    eff = step_efficiency(tables(ctx).hbm_efficiency, b, 1e6)
    return b / (ctx.system.hbm.bandwidth_gbps * 1e9 * eff)


def offload_s(ctx: CostContext, nbytes: ArrayLike, tier: int = 1) -> np.ndarray:
    """One transfer to or from offload tier ``tier`` (system.py compute_offload_time)."""
    b = np.asarray(nbytes, dtype=float)
    eff = step_efficiency(tables(ctx).offload_efficiency, b, 1e6)
    return b / (ctx.system.memory_tiers[tier].bandwidth_gbps * 1e9 * eff)


def network_s(
    ctx: CostContext, tier: np.ndarray, op: str, nbytes: ArrayLike, group: ArrayLike
) -> np.ndarray:
    """network.py Network.time: α + size·(1 + offset/g)/(β·efficiency), offset the tier's
    all-reduce offset for ``all_reduce`` and 0 otherwise (the poster file's ops); 0 where the
    group has one rank or nothing moves."""
    tiers = ctx.system.network_tiers
    bandwidth = np.array([t.bandwidth_gbps * 1e9 * t.efficiency for t in tiers])[tier]
    latency = np.array([t.latency_us * 1e-6 for t in tiers])[tier]
    offset = np.asarray(tables(ctx).all_reduce_offset, dtype=float)[tier] if op == "ar" else 0.0
    g = np.asarray(group, dtype=float)
    size = np.asarray(nbytes, dtype=float)
    time = latency + size * (1 + offset / g) / bandwidth
    return np.where((g > 1) & (size > 0), time, 0.0)


def processor_usage(ctx: CostContext, tier: np.ndarray) -> np.ndarray:
    return np.asarray(tables(ctx).processor_usage, dtype=float)[tier]


@dataclass(frozen=True)
class _Layer:
    """One Calculon layer on one rank per micro-batch (arrays): FLOPs and bytes touched per pass
    (fw, agrad, wgrad), its weights (elements), the activation bytes it keeps and whether they
    count as working space and as storage, its activation-gradient bytes, and its recompute
    flag. ``gemm`` marks a LinearOverlapped with its TP collective (conjugate: RS/AR after it)."""

    matrix: bool
    flops: tuple[np.ndarray, np.ndarray, np.ndarray]
    nbytes: tuple[np.ndarray, np.ndarray, np.ndarray]
    weights: float | np.ndarray = 0.0
    activation: np.ndarray | float = 0.0
    reused: bool = False
    stored: np.ndarray | bool = True
    output: np.ndarray | float = 0.0
    output_stored: np.ndarray | bool = True
    act_grad: np.ndarray | float = 0.0
    recompute: np.ndarray | bool = False
    gemm: str | None = None
    """None, or 'ag' (QKV, MLP1: all-gather before) / 'rs' (projection, MLP2: reduce after)."""
    recomm: np.ndarray | bool = False


def _linear(m, n, k, act, act_grad, recompute, gemm, recomm=False) -> _Layer:
    """layers.py LinearOverlapped (and Linear): m×n by n×k."""
    inputs, output, weights = m * n, m * k, n * k
    fw = 2.0 * m * n * k
    return _Layer(
        matrix=True,
        flops=(fw, fw, fw),
        nbytes=(
            E * (inputs + output + weights),
            E * (weights + act + act_grad),
            E * (weights + act + act_grad),
        ),
        weights=weights,
        activation=E * act,
        act_grad=E * act_grad,
        recompute=recompute,
        gemm=gemm,
        recomm=recomm,
    )


def _elementwise(size, fw, agrad, wgrad=0.0, weights=0.0, *, act=None, grads=None, **kw) -> _Layer:
    """A vector-unit layer over ``size`` elements (LayerNorm, residual add): inputs and outputs
    of ``size``; agrad and wgrad bytes (weights + activation + activation grads)·e."""
    act = size if act is None else act
    grads = size if grads is None else grads
    inputs = kw.pop("inputs", size)
    return _Layer(
        matrix=False,
        flops=(fw * size, agrad * size, wgrad * size),
        nbytes=(
            E * (inputs + size + weights),
            E * (weights + act + grads),
            E * (weights + act + grads) if weights else 0.0 * size,
        ),
        weights=weights,
        activation=E * act,
        act_grad=E * grads,
        **kw,
    )


def _dropout(size, **kw) -> _Layer:
    """layers.py DropOut: a 1-byte mask is its activation; fw and agrad touch input, output
    and mask."""
    touched = 2 * E * size + size
    return _Layer(
        matrix=False,
        flops=(size, size, 0.0 * size),
        nbytes=(touched, touched, 0.0 * size),
        activation=size,
        act_grad=size,
        output=E * size,
        **kw,
    )


def block_layers(
    ctx: CostContext, tp: ArrayLike, mb: ArrayLike, recompute: ArrayLike, sp: ArrayLike
) -> list[_Layer]:
    """Calculon's attention and MLP blocks (llm.py _build_attn_block, _build_mlp_block, with
    tensor_par_overlap on: fused QKV, LinearOverlapped), ``sp`` its rs_ag (sequence parallel)
    communication, otherwise ar; fused GeLU; multi-head attention of a = heads, d = head_dim
    (heads·d may differ from hidden, as in Calculon's generated shapes)."""
    m, s = ctx.model, ctx.seq_len
    t = np.asarray(tp, dtype=float)
    b = np.asarray(mb, dtype=float)
    code = np.asarray(recompute)
    split = np.asarray(sp, dtype=bool) & (t > 1)
    full, attn = code == 2, code >= 1
    h, f, a, d = m.hidden, m.ffn_hidden, m.heads, m.head_dim
    bs = b * s
    act = bs * h
    small = np.where(split, act / t, act)  # the SP-split activation (pick(_sequence_par, ...))
    batch = b * a / t
    scores = batch * s * s
    layers: list[_Layer] = []

    def fork(size) -> _Layer:  # layers.py Fork, 2 users; fw touches nothing
        return _Layer(
            matrix=False,
            flops=(0.0 * size, 2 * size, 0.0 * size),
            nbytes=(0.0 * size, 3 * E * size, 0.0 * size),
            activation=E * size,
            recompute=full,
        )

    def norm() -> _Layer:  # layers.py LayerNorm: 9 / 14 / 7 FLOPs per element
        return _elementwise(small, 9, 14, 7, 2 * h, reused=True, stored=False, recompute=full)

    def residual() -> _Layer:  # layers.py ElementWise of two operands
        return _Layer(
            matrix=False,
            flops=(small, 2 * small, 0.0 * small),
            nbytes=(3 * E * small, 3 * E * small, 0.0 * small),
            activation=2 * E * small,
            reused=True,
            stored=False,
            act_grad=E * small,
            recompute=full,
        )

    def gathered(n, k) -> _Layer:  # AG (rs_ag) or identity (ar) before an m×n×(k/t) GEMM
        act_in = np.where(split, bs * n / t, bs * n)
        grads = np.where(split, bs * k / t, 0.0)
        return _linear(bs, n, k / t, act_in, grads, full, "ag", recomm=full)

    def reduced(n, k) -> _Layer:  # RS (rs_ag) or AR (ar) after an m×(n/t)×k GEMM
        act_in = np.where(split, bs * n / t, 0.0)
        grads = np.where(split, 2 * bs * k / t, 2 * bs * k)
        return _linear(bs, n / t, k, act_in, grads, full, "rs", recomm=full)

    # attention block
    layers += [fork(small), norm(), gathered(h, 3 * a * d)]
    layers[-1] = _replace_recomm(layers[-1], attn)  # recompute_ag_flag (attn_only or full)
    layers.append(
        _Layer(  # BatchMatMul K·Q
            matrix=True,
            flops=(2 * batch * s * d * s, 4 * batch * s * d * s, 0.0 * batch),
            nbytes=(E * (2 * batch * s * d + scores), E * (2 * batch * s * d + scores), 0.0 * b),
            activation=E * 2 * batch * s * d,
            output=E * scores,
            output_stored=~attn,
            act_grad=E * scores,
            recompute=attn,
        )
    )
    layers.append(
        _Layer(  # SoftMax: 5 / 8 FLOPs per element, agrad touches what fw does
            matrix=False,
            flops=(5 * scores, 8 * scores, 0.0 * scores),
            nbytes=(2 * E * scores, 2 * E * scores, 0.0 * scores),
            activation=E * scores,
            output=E * scores,
            output_stored=~attn,
            act_grad=E * scores,
            recompute=attn,
        )
    )
    layers.append(_dropout(scores, stored=~attn, recompute=attn))
    layers.append(
        _Layer(  # BatchMatMul attention·V
            matrix=True,
            flops=(2 * batch * s * s * d, 4 * batch * s * s * d, 0.0 * batch),
            nbytes=(
                E * (batch * (s * s + s * d) + batch * s * d),
                E * (batch * (s * s + s * d) + batch * s * d),
                0.0 * batch,
            ),
            activation=E * batch * (s * s + s * d),
            output=E * batch * s * d,
            act_grad=E * batch * s * d,
            recompute=full,
        )
    )
    layers += [reduced(a * d, h), _dropout(small, recompute=full), residual()]
    # MLP block
    layers += [fork(small), norm(), gathered(h, f)]
    gelu = f * bs / t  # fused: keeps no activation or gradient
    layers.append(
        _Layer(
            matrix=False,
            flops=(8 * gelu, 13 * gelu, 0.0 * gelu),
            nbytes=(2 * E * gelu, 2 * E * gelu, 0.0 * gelu),
            output=E * gelu,
            recompute=full,
        )
    )
    layers += [reduced(f, h), _dropout(small, recompute=full), residual()]
    return layers


def _replace_recomm(layer: _Layer, recomm) -> _Layer:
    return replace(layer, recomm=recomm)


@dataclass(frozen=True)
class CalculonBlock:
    """One block per micro-batch on one rank under Calculon's arithmetic (seconds, bytes)."""

    forward_s: np.ndarray
    """Σ layers' fw processing time (flop + memory time), no TP slowdown."""
    agrad_s: np.ndarray
    wgrad_s: np.ndarray
    recompute_s: np.ndarray
    """Σ fw processing time of the layers the recompute mode rebuilds."""
    forward_flop_s: np.ndarray
    backward_flop_s: np.ndarray
    """agrad + wgrad flop time: with the recompute time, what offload can hide under."""
    forward_mem_s: np.ndarray
    backward_mem_s: np.ndarray
    tp_s: np.ndarray
    """What TP adds per micro-batch: the overlap's slowdown and the exposed communication
    (forward, backward, recompute and its re-communication), or without overlap the whole
    collectives and their layers' own time."""
    weight_elements: np.ndarray
    weight_bytes: np.ndarray
    act_working_bytes: np.ndarray
    act_storage_bytes: np.ndarray
    """Stored activations (0 under full recompute, which keeps the checkpoint instead)."""
    act_checkpoint_bytes: np.ndarray
    act_grad_bytes: np.ndarray


def calculon_block(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    tp_overlap: ArrayLike = 1,
) -> CalculonBlock:
    """Sum Calculon's layers (llm.py _compute_block_stats) for one block per micro-batch."""
    t = np.asarray(tp, dtype=float)
    # With one TP rank there is no TP collective to choose: Calculon's ar form (its rs_ag
    # form would keep a few more activation-gradient bytes, layers.py LinearOverlapped).
    split = np.asarray(sp, dtype=bool) & (t > 1)
    overlap = np.asarray(tp_overlap, dtype=bool)
    code = np.asarray(recompute)
    layers = block_layers(ctx, t, mb, code, split)
    tier = tier_index(ctx, np.asarray(tp))
    usage = processor_usage(ctx, tier)
    zero = np.zeros(np.broadcast(t, np.asarray(mb), code, split, overlap).shape)
    fw = agrad = wgrad = re = fw_flop = bw_flop = fw_mem = bw_mem = tp_extra = zero
    weights = working = storage = grads = zero
    act_full = np.asarray(mb, dtype=float) * ctx.seq_len * ctx.model.hidden
    for layer in layers:
        flop = [matrix_s(ctx, x) if layer.matrix else vector_s(ctx, x) for x in layer.flops]
        mem = [hbm_s(ctx, x) for x in layer.nbytes]
        plain = [flop[i] + mem[i] for i in range(3)]
        fw, agrad, wgrad = fw + plain[0], agrad + plain[1], wgrad + plain[2]
        fw_flop, bw_flop = fw_flop + flop[0], bw_flop + flop[1] + flop[2]
        fw_mem, bw_mem = fw_mem + mem[0], bw_mem + mem[1] + mem[2]
        rebuilt = np.asarray(layer.recompute, dtype=bool)
        re = re + np.where(rebuilt, plain[0], 0.0)
        weights = weights + layer.weights
        if not layer.reused:
            working = working + layer.activation
        storage = (
            storage
            + layer.activation
            - np.where(np.asarray(layer.output_stored, dtype=bool), 0.0, layer.output)
            - np.where(np.asarray(layer.stored, dtype=bool), 0.0, layer.activation)
        )
        grads = grads + layer.act_grad
        if layer.gemm is None:
            continue
        # TP collective of this GEMM (LinearOverlapped.compute_net_time): the gathered
        # GEMM all-gathers its input before it (fw) and reduce-scatters its input gradient
        # (agrad); the reduced GEMM reduce-scatters its output (fw) and all-gathers its output
        # gradient (agrad); with ar, the reduction is an all-reduce and the other an identity.
        nbytes = E * act_full
        red_flops = act_full * (t - 1) / t
        red_s = vector_s(ctx, red_flops)  # the reduction's vector work, in its net time
        if layer.gemm == "ag":
            net_fw = np.where(split, network_s(ctx, tier, "ag", nbytes, t), 0.0)
            net_ag = np.where(
                split, network_s(ctx, tier, "rs", nbytes, t), network_s(ctx, tier, "ar", nbytes, t)
            )
            net_ag = np.where(t > 1, net_ag + red_s, 0.0)
        else:
            net_fw = np.where(
                split, network_s(ctx, tier, "rs", nbytes, t), network_s(ctx, tier, "ar", nbytes, t)
            )
            net_fw = np.where(t > 1, net_fw + red_s, 0.0)
            net_ag = np.where(split, network_s(ctx, tier, "ag", nbytes, t), 0.0)
        recomm_net = np.where(
            np.asarray(layer.recomm, dtype=bool),
            np.where(
                layer.gemm == "ag",
                np.where(split, network_s(ctx, tier, "ag", nbytes, t), 0.0),
                np.where(
                    split,
                    network_s(ctx, tier, "rs", nbytes, t),
                    network_s(ctx, tier, "ar", nbytes, t),
                ),
            ),
            0.0,
        )
        extra = []
        for stage, net in ((0, net_fw), (1, net_ag)):
            tiles = t
            slowed = flop[stage] / (1 - usage)
            net_tile, slowed_tile = net / tiles, slowed / tiles
            exposed_ring = np.where(
                net_tile > slowed_tile, (tiles - 1) * (net_tile - slowed_tile), 0
            )
            time_ring = np.where(
                net_tile > slowed_tile,
                plain[stage] / tiles + (tiles - 1) * (slowed + mem[stage]) / tiles,
                plain[stage] + (tiles - 1) * net_tile * usage,
            )
            slowdown = np.where(net > 0, time_ring - plain[stage], 0.0)
            exposed_ring = np.where(net > 0, exposed_ring, 0.0)
            # Without overlap (TPComm layers): the collective and the TPComm layer's own
            # processing (its input and output read and written, 2·e·b·s·h bytes) show whole.
            own = np.where(net > 0, hbm_s(ctx, 2 * nbytes), 0.0)
            extra.append((slowdown, exposed_ring, net + own))
        (fw_slow, fw_exp, fw_none), (ag_slow, ag_exp, ag_none) = extra
        ring = fw_slow + fw_exp + ag_slow + ag_exp
        ring = ring + np.where(rebuilt, fw_slow, 0.0)
        ring = ring + np.where(recomm_net > 0, fw_exp, 0.0)
        none = fw_none + ag_none + recomm_net
        tp_extra = tp_extra + np.where(overlap, ring, none)
    full = code == 2
    checkpoint = np.where(full, E * act_full, 0.0)
    return CalculonBlock(
        forward_s=fw,
        agrad_s=agrad,
        wgrad_s=wgrad,
        recompute_s=re,
        forward_flop_s=fw_flop,
        backward_flop_s=bw_flop,
        forward_mem_s=fw_mem,
        backward_mem_s=bw_mem,
        tp_s=tp_extra,
        weight_elements=weights + zero,
        weight_bytes=E * weights + zero,
        act_working_bytes=working + zero,
        act_storage_bytes=np.where(full, 0.0, storage),
        act_checkpoint_bytes=checkpoint + zero,
        act_grad_bytes=grads + zero,
    )


def weight_groups(ctx: CostContext, tp: ArrayLike) -> list[np.ndarray]:
    """The weight tensors of one block on one rank, in elements: two layer norms (2·h each),
    QKV h·3ad/t, the projection ad/t·h, the two MLP matrices h·f/t (Calculon's layers have no
    biases)."""
    m = ctx.model
    t = np.asarray(tp, dtype=float)
    h, width = m.hidden, m.heads * m.head_dim
    return [
        2.0 * h + 0 * t,
        2.0 * h + 0 * t,
        h * 3 * width / t,
        width * h / t,
        h * m.ffn_hidden / t,
        m.ffn_hidden * h / t,
    ]


def weight_elements(ctx: CostContext, tp: ArrayLike) -> np.ndarray:
    """One block's weights on one rank (elements)."""
    return sum(weight_groups(ctx, tp))


def _shard(zero_stage: ArrayLike, ranks: ArrayLike) -> np.ndarray:
    """Calculon's optimizer_sharding divides gradients and optimizer state by the DP ranks;
    under this arithmetic zero_stage ≥ 1 is that sharding (module docstring)."""
    return np.where(np.asarray(zero_stage) >= 1, np.asarray(ranks, dtype=float), 1.0)


def model_state(
    ctx: CostContext,
    tp: ArrayLike,
    blocks: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    weight_share: tuple[np.ndarray, list[np.ndarray]],
    optimizer_share: tuple[np.ndarray, list[np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, np.ndarray]]]:
    """(weights, gradients, optimizer in HBM, [per offload tier: those items]) per rank of a
    stage of k blocks, llm.py _compute_batch_stats and _get_mem_cap_reqs: weights k·W, or the
    two resident blocks when offloaded (all k in the tier); gradients one block unsharded fp32
    (4 bytes) plus k − 1 blocks of 16-bit gradients sharded over d, or, with the optimizer
    offloaded, one unsharded and one sharded block (all k sharded ones in the tier); the
    optimizer state 12/d bytes per parameter, k blocks or two resident when offloaded.
    Shares are (overall, per tier) as offload.offloaded_share gives them."""
    n = weight_elements(ctx, tp)
    k = np.asarray(blocks, dtype=float)
    shard = _shard(zero_stage, dp)
    block_w = E * n
    sharded_grads = E * n / shard
    block_o = ctx.optimizer_bytes_per_param * n / shard
    q_w, w_tiers = weight_share
    q_o, o_tiers = optimizer_share
    resident = np.minimum(RESIDENT_STATE_BLOCKS, k)
    weights = ((1 - q_w) * k + q_w * resident) * block_w
    gradients = FP32_GRAD_BYTES * n + ((1 - q_o) * (k - 1) + q_o) * sharded_grads
    optimizer = ((1 - q_o) * k + q_o * resident) * block_o
    tiers = [
        {
            "weights": q_wt * k * block_w,
            "gradients": q_ot * k * sharded_grads,
            "optimizer": q_ot * k * block_o,
        }
        for q_wt, q_ot in zip(w_tiers, o_tiers, strict=True)
    ]
    return weights, gradients, optimizer, tiers


def optimizer_step_s(
    ctx: CostContext, tp: ArrayLike, blocks: ArrayLike, dp: ArrayLike, zero_stage: ArrayLike
) -> np.ndarray:
    """The optimizer step of a stage of k blocks: per weight tensor, 11 vector FLOPs per
    (sharded) gradient element plus its 12-byte state read at HBM speed, each at its own size's
    efficiency (Layer.get_optim_step_flops, get_optim_step_mem_accessed), times k (llm.py
    _optim_time). Offloaded state is streamed in the backward (optimizer_stream_s), not here."""
    shard = _shard(zero_stage, dp)
    per_block = sum(
        vector_s(ctx, OPTIMIZER_FLOPS_PER_PARAM * n / shard)
        + hbm_s(ctx, ctx.optimizer_bytes_per_param * n / shard)
        for n in weight_groups(ctx, tp)
    )
    return np.asarray(blocks, dtype=float) * per_block


def optimizer_stream_s(
    ctx: CostContext,
    tp: ArrayLike,
    dp: ArrayLike,
    zero_stage: ArrayLike,
    offload_optimizer: ArrayLike,
    share,
) -> np.ndarray:
    """Seconds per block per micro-batch that the block's offloaded optimizer state (12/d bytes
    per parameter) adds to the backward's offload link (llm.py _get_bw_offload_size: it
    streams with every micro-batch's backward). ``share`` is offload.offloaded_share."""
    state = ctx.optimizer_bytes_per_param * weight_elements(ctx, tp) / _shard(zero_stage, dp)
    if len(ctx.system.memory_tiers) < 2:  # no offload tier: nothing streams
        return 0.0 * state * np.asarray(offload_optimizer)
    return offload_s(ctx, share(offload_optimizer, 1) * state)


def block_dp_s(
    ctx: CostContext,
    block_elements: ArrayLike,
    ranks: ArrayLike,
    span: ArrayLike,
    zero_stage: ArrayLike,
) -> np.ndarray:
    """One block's DP collectives per step (llm.py _compute_batch_stats): its 16-bit weights'
    bytes reduce-scattered and all-gathered (optimizer sharding) or all-reduced, one latency
    each, on the tier the DP group spans."""
    nbytes = E * np.asarray(block_elements, dtype=float)
    tier = tier_index(ctx, span)
    sharded = network_s(ctx, tier, "rs", nbytes, ranks) + network_s(ctx, tier, "ag", nbytes, ranks)
    return np.where(np.asarray(zero_stage) >= 1, sharded, network_s(ctx, tier, "ar", nbytes, ranks))


def dp_parts_s(
    ctx: CostContext,
    block_elements: ArrayLike,
    blocks: ArrayLike,
    ranks: ArrayLike,
    span: ArrayLike,
    zero_stage: ArrayLike,
    interleave: ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(last chunk's hideable, other chunks' hideable, never hidden) DP time per step of a
    stage of k blocks in v chunks of c = k/v, D one block's collectives, u the DP network's
    processor_usage (llm.py _compute_batch_stats, data_par_overlap): the first block's D
    always shows, and the hidden rest slows the compute by u: never hidden D + u·(k − 1)·D;
    the last chunk's other c − 1 blocks, (1 − u)·(c − 1)·D, hide under that chunk's backward
    of one micro-batch; the other v − 1 chunks', (1 − u)·(v − 1)·c·D, under p micro-batches'
    passes through them (step.evaluate_terms sets the windows). Without overlap all k·D
    shows."""
    one = block_dp_s(ctx, block_elements, ranks, span, zero_stage)
    u = processor_usage(ctx, tier_index(ctx, span))
    k = np.asarray(blocks, dtype=float)
    chunk = k / np.asarray(interleave, dtype=float)
    last = (1 - u) * (chunk - 1) * one
    others = (1 - u) * (k - chunk) * one
    return last, others, one + u * (k - 1) * one


def stored_activation_bytes(
    ctx: CostContext, tp: ArrayLike, mb: ArrayLike, recompute: ArrayLike, sp: ArrayLike
) -> np.ndarray:
    """Activation bytes one block keeps per micro-batch in flight: Calculon's storage space,
    or under full recompute the block's input checkpoint b·s·h·e (llm.py
    _block_act_checkpoint_size)."""
    block = calculon_block(ctx, tp, mb, recompute, sp)
    return np.where(np.asarray(recompute) == 2, block.act_checkpoint_bytes, block.act_storage_bytes)


def resident_activation_bytes(
    ctx: CostContext,
    tp: ArrayLike,
    mb: ArrayLike,
    recompute: ArrayLike,
    sp: ArrayLike,
    offloaded: np.ndarray,
) -> np.ndarray:
    """What HBM holds beside the stored activations (stored × blocks × micro-batches in
    flight, of which an offloaded share q keeps one block): the working space and the
    activation gradients of one block, less the one block's storage Calculon does not count
    twice without offload (act_space = working + storage·(k·f − 1)), or with offloaded
    checkpoints (full recompute) a second checkpoint (get_act_checkpoint_size_min)."""
    block = calculon_block(ctx, tp, mb, recompute, sp)
    q = np.asarray(offloaded, dtype=float)
    full = np.asarray(recompute) == 2
    adjust = np.where(full, q * block.act_checkpoint_bytes, -(1 - q) * block.act_storage_bytes)
    return block.act_working_bytes + block.act_grad_bytes + adjust
