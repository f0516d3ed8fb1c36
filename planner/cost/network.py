"""Communication time: which network tier a group runs on, and ring-collective costs.

Ranks are placed contiguously in the strategy's rank order (TP fastest; then CP, DP, PP by
default, or PP before DP: step.group_spans), so a group of g ranks at stride σ spans g·σ GPUs. A
group runs on the first tier whose domain holds its span; the last tier spans the system.

Ring collectives on g ranks with per-GPU bandwidth β (per direction, times the tier's
efficiency) and latency α (Thakur et al. 2005; NCCL's ring algorithm):
all-reduce 2·(g−1)/g·bytes/β + 2·(g−1)·α; reduce-scatter and all-gather (g−1)/g·bytes/β + (g−1)·α
(bytes: the full buffer each rank contributes or receives). All-to-all: each tier carries the
share of the buffer bound beyond the domain below it, the tiers at once (all_to_all_s).
Point-to-point: α + bytes/β.
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext
from planner.cost.flops import ArrayLike


def tier_index(ctx: CostContext, span_gpus: ArrayLike) -> np.ndarray:
    """Index of the first network tier whose domain holds ``span_gpus`` consecutive GPUs."""
    span = np.asarray(span_gpus)
    index = np.zeros(span.shape, dtype=int)
    for i, tier in enumerate(ctx.system.network_tiers[:-1]):
        index = np.where((index == i) & (span > (tier.domain_gpus or 0)), i + 1, index)
    return index


def _tier_arrays(ctx: CostContext, span_gpus: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(bytes/s, latency s) of the tier each span runs on."""
    tiers = ctx.system.network_tiers
    bandwidth = np.array([t.bandwidth_gbps * 1e9 * t.efficiency for t in tiers])
    latency = np.array([t.latency_us * 1e-6 for t in tiers])
    index = tier_index(ctx, span_gpus)
    return bandwidth[index], latency[index]


def all_reduce_s(ctx: CostContext, group: ArrayLike, span: ArrayLike, nbytes: ArrayLike):
    """Ring all-reduce of ``nbytes`` over ``group`` ranks spanning ``span`` GPUs (0 if g = 1)."""
    return 2 * reduce_scatter_s(ctx, group, span, nbytes)


def reduce_scatter_s(ctx: CostContext, group: ArrayLike, span: ArrayLike, nbytes: ArrayLike):
    """Ring reduce-scatter (or all-gather) of an ``nbytes`` buffer over ``group`` ranks."""
    return ring_transfer_s(ctx, group, span, nbytes) + ring_latency_s(ctx, group, span)


all_gather_s = reduce_scatter_s


def ring_transfer_s(ctx: CostContext, group: ArrayLike, span: ArrayLike, nbytes: ArrayLike):
    """The bandwidth part of a ring reduce-scatter or all-gather: (g−1)/g·bytes/β."""
    g = np.asarray(group, dtype=float)
    bandwidth, _ = _tier_arrays(ctx, span)
    return (g - 1) / g * np.asarray(nbytes, dtype=float) / bandwidth


def ring_latency_s(ctx: CostContext, group: ArrayLike, span: ArrayLike) -> np.ndarray:
    """The latency part of one ring reduce-scatter or all-gather: (g−1)·α."""
    _, latency = _tier_arrays(ctx, span)
    return (np.asarray(group, dtype=float) - 1) * latency


def all_to_all_s(
    ctx: CostContext,
    group: ArrayLike,
    stride: ArrayLike,
    nbytes: ArrayLike,
    beyond_first_share: ArrayLike = 1.0,
) -> np.ndarray:
    """All-to-all by pairwise exchange of an ``nbytes`` buffer over ``group`` ranks at
    ``stride`` GPUs apart. A rank sends 1/g of the buffer to each peer; the peers inside its
    tier-0 domain take the tier-0 links, those beyond the tier each spans next, and the links
    run at once: max over tiers i of bytes_i/β_i, with bytes_i = (g_i − g_{i−1})/g·bytes for
    g_i the group's ranks inside one tier-i domain (g_{−1} = 1), plus (g − 1)·α of the tier
    the whole group spans. ``beyond_first_share`` scales the bytes that leave the tier-0
    domain (routing that deduplicates them, planner/cost/experts.py)."""
    g = np.asarray(group, dtype=float)
    step = np.asarray(stride, dtype=float)
    data = np.asarray(nbytes, dtype=float)
    inside = np.ones_like(g * step)
    slowest = np.zeros_like(g * step * data)
    for i, tier in enumerate(ctx.system.network_tiers):
        last = i == len(ctx.system.network_tiers) - 1
        reach = g if last else np.minimum(g, np.maximum(1.0, (tier.domain_gpus or 0) // step))
        share = (reach - inside) / g * (1.0 if i == 0 else np.asarray(beyond_first_share))
        rate = tier.bandwidth_gbps * 1e9 * tier.efficiency
        slowest = np.maximum(slowest, share * data / rate)
        inside = np.maximum(inside, reach)
    _, latency = _tier_arrays(ctx, g * step)
    return slowest + (g - 1) * latency


def point_to_point_s(ctx: CostContext, span: ArrayLike, nbytes: ArrayLike) -> np.ndarray:
    """One message of ``nbytes`` between two GPUs of a group spanning ``span`` GPUs."""
    bandwidth, latency = _tier_arrays(ctx, span)
    return latency + np.asarray(nbytes, dtype=float) / bandwidth
