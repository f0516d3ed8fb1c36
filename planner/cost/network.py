"""Communication time: which network tier a group runs on, and ring-collective costs.

Ranks are placed contiguously in the strategy's rank order (TP fastest; then CP, DP, PP by
default, or PP before DP: step.group_spans), so a group of g ranks at stride σ spans g·σ GPUs. A
group runs on the first tier whose domain holds its span; the last tier spans the system.

Ring collectives on g ranks with per-GPU bandwidth β (per direction, times the tier's
efficiency) and latency α (Thakur et al. 2005; NCCL's ring algorithm):
all-reduce 2·(g−1)/g·bytes/β + 2·(g−1)·α; reduce-scatter and all-gather (g−1)/g·bytes/β + (g−1)·α
(bytes: the full buffer each rank contributes or receives). Point-to-point: α + bytes/β.
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
    g = np.asarray(group, dtype=float)
    bandwidth, latency = _tier_arrays(ctx, span)
    return (g - 1) / g * np.asarray(nbytes, dtype=float) / bandwidth + (g - 1) * latency


all_gather_s = reduce_scatter_s


def point_to_point_s(ctx: CostContext, span: ArrayLike, nbytes: ArrayLike) -> np.ndarray:
    """One message of ``nbytes`` between two GPUs of a group spanning ``span`` GPUs."""
    bandwidth, latency = _tier_arrays(ctx, span)
    return latency + np.asarray(nbytes, dtype=float) / bandwidth
