"""What the queries need of the goodput model (planner/cost/goodput.py) besides one plan's
estimate: an upper bound of the goodput at a GPU count that holds for every strategy (the
fewest-GPUs and least-cost queries refute a count with it), and the least file-system write
bandwidth that keeps a plan's goodput at a target.

**The bound.** For a count N, the job MTBF M(N) does not depend on the strategy; the
checkpoint stall δ, the non-durable latency L and the restart R do, but each has a lower bound
that does not (P·(2 + o) unique checkpoint bytes B_u; every unique byte is written and, on a
restart, read at least once; the busiest node writes at least the mean over the ⌈N/g⌉ nodes,
the busiest GPU at least the mean over the N GPUs):

    sync       δ ≥ δ₀ = max(B_u / aggregate write, B_u / (nodes · node write))      L = 0
    async      δ ≥ B_u / (N · host link),                                            L ≥ δ₀
    in-memory  δ ≥ B_u / (N · host link),                                            L = 0
    R ≥ R₀ = fixed + (in-memory: B_u / (N · peer); else max(B_u / aggregate read,
                                                              B_u / (nodes · node read)))

and the first-order waste δ/τ + (τ + δ)/(2M) + L/M + R/M + planned·R is, at any interval τ
(the formula's, rounded to whole steps, or kept ≥ the drain), at least its minimum over τ > 0:
√(2δ/M) + δ/(2M) + L/M + R/M + planned·R, increasing in δ, L and R. So

    goodput(strategy, N) ≤ g⁺(N) = 1 − [√(2δ₀/M) + δ₀/(2M) + L₀/M + R₀/M + planned·R₀]

for every strategy at N (tests/test_goodput_wiring.py checks it against evaluated plans). A
count refuted under the deadline scaled by g⁺(N) is refuted under every strategy's own goodput;
a plan found under it is kept only if its own goodput meets the deadline.

**The least write bandwidth.** For a fixed plan, the aggregate write bandwidth W enters the
goodput only through the write time t_w = max(B_u / W, node bytes / node write), hence δ
(sync) or L (async); with the interval at its continuous optimum the waste is increasing in t_w,
so the least W with goodput ≥ target is found by bisection on log W to 0.1 % (a closed form
exists for the continuous interval, but the report rounds the interval to whole steps; the
bisection runs on the reported goodput itself, so the answer meets the target as reported).
Over the strategies at N, the same bisection on g⁺(N; W) gives a W no strategy can go below:
where the two agree within the tolerance the answer is minimal over every strategy.
"""

from __future__ import annotations

import math

from planner.cost.context import CostContext
from planner.cost.goodput import (
    GB,
    SECONDS_PER_DAY,
    SECONDS_PER_HOUR,
    GoodputEstimate,
    checkpoint_bytes_total,
    checkpoint_mode,
    estimate_goodput,
    host_link_gbps,
    peer_gbps,
    transfer_s,
)
from planner.specs import CheckpointMode, ReliabilityProfile, Strategy
from planner.specs.reliability import job_mtbf_h, job_nodes

BANDWIDTH_TOLERANCE = 1e-3
"""Relative width at which the least-bandwidth bisection stops."""
MIN_SEARCH_GBPS = 1e-3
MAX_SEARCH_GBPS = 1e8


def goodput_upper_bound(
    ctx: CostContext,
    gpus: int,
    profile: ReliabilityProfile | None = None,
    mode: CheckpointMode | None = None,
) -> float:
    """g⁺(N): no strategy on ``gpus`` GPUs has a higher (first-order) goodput (module
    docstring). 1 for a job without failures or planned interruptions."""
    profile = profile or ctx.reliability
    mode = checkpoint_mode(ctx, profile, mode)
    storage, gpn = profile.storage, ctx.system.gpus_per_node
    mtbf = job_mtbf_h(profile.failures, gpus, gpn) * SECONDS_PER_HOUR
    nodes = job_nodes(gpus, gpn)
    unique = checkpoint_bytes_total(ctx)
    durable = transfer_s(
        unique, unique / nodes, storage.write_gbps_per_node, storage.aggregate_write_gbps
    )
    if mode == "sync":
        delta, latency = durable, 0.0
    else:
        delta = unique / gpus / (host_link_gbps(ctx, profile) * GB)
        latency = durable if mode == "async" else 0.0
    if mode == "in-memory":
        read = unique / gpus / (peer_gbps(ctx, profile) * GB)
    else:
        read = transfer_s(
            unique, unique / nodes, storage.read_gbps_per_node, storage.aggregate_read_gbps
        )
    restart = profile.restart.fixed_s + read
    planned = profile.failures.planned_per_day / SECONDS_PER_DAY * restart
    if math.isinf(mtbf):
        return max(0.0, 1.0 - planned)
    waste = math.sqrt(2 * delta / mtbf) + (delta / 2 + latency + restart) / mtbf + planned
    return max(0.0, 1.0 - waste)


def with_aggregate_write(profile: ReliabilityProfile, gbps: float) -> ReliabilityProfile:
    """``profile`` with the file system's aggregate write bandwidth set to ``gbps``."""
    storage = profile.storage.model_copy(update={"aggregate_write_gbps": gbps})
    return profile.model_copy(update={"storage": storage})


def least_write_bandwidth(
    ctx: CostContext,
    strategy: Strategy,
    step_time_s: float,
    min_goodput: float,
    profile: ReliabilityProfile | None = None,
) -> tuple[float | None, GoodputEstimate]:
    """The least aggregate write bandwidth, GB/s, at which ``strategy`` keeps its goodput ≥
    ``min_goodput`` (bisection on log W, module docstring), with the estimate there; None with
    the estimate at an unbounded file system when no bandwidth reaches the target (the
    per-node links, the restart or the failure rate alone waste too much)."""
    profile = profile or ctx.reliability

    def at(gbps: float | None) -> GoodputEstimate:
        return estimate_goodput(ctx, strategy, step_time_s, with_aggregate_write(profile, gbps))

    found = _bisect(lambda gbps: at(gbps).goodput >= min_goodput)
    return (found, at(found)) if found is not None else (None, at(None))


def least_write_bandwidth_bound(
    ctx: CostContext, gpus: int, min_goodput: float, profile: ReliabilityProfile | None = None
) -> float | None:
    """A lower bound of the aggregate write bandwidth any strategy on ``gpus`` GPUs needs for
    ``min_goodput``: the least W with g⁺(N; W) ≥ target (goodput_upper_bound), within the
    bisection's tolerance; None when even an unbounded file system leaves g⁺ below it."""
    profile = profile or ctx.reliability
    return _bisect(
        lambda gbps: (
            goodput_upper_bound(ctx, gpus, with_aggregate_write(profile, gbps)) >= min_goodput
        )
    )


def _bisect(meets) -> float | None:
    """The least W in [MIN_SEARCH_GBPS, MAX_SEARCH_GBPS] (to BANDWIDTH_TOLERANCE) where the
    monotone ``meets(W)`` holds, or None when it fails at the top."""
    low, high = MIN_SEARCH_GBPS, MAX_SEARCH_GBPS
    if not meets(high):
        return None
    if meets(low):
        return low
    while high / low > 1 + BANDWIDTH_TOLERANCE:
        middle = math.sqrt(low * high)
        if meets(middle):
            high = middle
        else:
            low = middle
    return high
