"""Communication time: which network tier a group runs on, and collective costs as NCCL runs them.

Ranks are placed contiguously in the strategy's rank order (TP fastest; then CP, DP, PP by
default, or PP before DP: parallel_comm.group_spans), so a group of g ranks spans some number of
GPUs (its ``span``) and its members spread evenly over the tier-i domains (D_i GPUs each) that
span touches: k_i = min(g, ⌈span/D_i⌉) domains of n_i = g/k_i members (domain_layout; the last
tier is one domain, k = 1, n = g).

Ring reduce-scatter or all-gather of a buffer of B bytes per rank (Thakur et al. 2005; NCCL's
ring, src/graph/tuning.cc @ 5067397c). Each of the g − 1 steps passes B/g per channel-share to
the next rank; pipelined, the ring runs at the rate of its slowest link, its bus bandwidth:

    t = (g − 1)/g · B / busBw + latency

- **busBw** = min over the tiers the ring uses of n_{i−1}·β_i (n_{−1} = 1; β_i the tier's
  per-GPU bandwidth per direction times its efficiency). Tier 0 is used when a domain holds two
  members or more (n_0 > 1); tier i ≥ 1 when the ring crosses tier-(i−1) boundaries inside a
  tier-i domain (n_i > n_{i−1}). Why n_{i−1}·β_i and not β_i: NCCL runs a multi-node ring on
  nChannels channels, each pinned to one NIC ("rail"), busBw = nChannels × bwInter
  (tuning.cc, ring bandwidth for nNodes > 2), so the bytes that cross a domain boundary spread
  over the NICs of all the group's members in that domain, n_{i−1} of them: per NIC
  (g − 1)/g · B / n_{i−1}. In-domain links carry the full (g − 1)/g · B per GPU. Measured: two
  DGX H100 nodes reach 46–48 GB/s per NIC (NVIDIA/nccl-tests#290), ~8 × 47 on the node, capped
  by NVLink's 361–368 GB/s ring busBw; GB200 NVL72 at 20 racks (1,440 ranks) reaches 151 / 219
  / 287 / 346 GB/s all-reduce busBw at 0.5 / 1 / 2 / 4 GiB (coreweave/nccl-tests PR #48), 7×
  one NIC: the in-rack links, not the NICs, set its rate (tests/test_collectives.py checks the
  model against both and against GH200 and A100 nodes, each with its source).
- **latency**: g − 1 hops. NCCL's ring model charges (nsteps − nInterSteps)·intraLat +
  nInterSteps·interLat, but raises the in-node hops of a ring that leaves its node to the
  network's per-step overhead ("inter-node rings still have to launch nsteps * net
  overhead", tuning.cc): every hop waits on the network pipeline. So each hop costs the
  largest ``latency_us`` of the tiers the ring uses: (g − 1)·α_1 once it crosses a domain
  boundary. Measured, not only NCCL's word: with in-domain hops at the catalog's 3 µs instead,
  the bundled dataset's cross-validated error rises from 6.6 % to 8.1 % (the MPT FSDP runs on
  128–512 H100s, whose per-block rings pay this once per collective); NCCL's own constants
  (3.4 µs NVLink, 14 µs network per Simple step) give 0.60 / 2.42 ms for a 128 / 512-rank
  ring on 8-GPU nodes, this model 0.64 / 2.56. The GB200 20-rack curve asks for less
  (~5 ms + bytes / ~420 GB/s against 14.4 ms + bytes / 675 here), which test_collectives
  records as the model's miss below 4 GiB.

It degrades to one tier's ring where it should: a group inside one domain runs at β_0 with
(g − 1)·α_0; a group with one member per domain (tp = 8 on 8-GPU nodes: each DP rank owns one
NIC) at β_1 with (g − 1)·α_1; only the bandwidth of a group with several members per domain
changes. All-reduce is reduce-scatter then all-gather: twice both terms.
Every collective also pays NCCL's base latency, 8.4 µs (its Simple ring's), and the stack's
per-message overhead (StackProfile.message_overhead_us: launch and host work, eager stacks).
A context's network_scale (robust plans, the step-time range: planner/cost/uncertainty.py)
divides the bandwidth of every tier beyond the scale-up one and multiplies its latency
(tier_rate, tier_latency_s).

**What NCCL's tuner would pick, and why the model does not.** NCCL chooses per call among ring
and tree (all-reduce) and the LL, LL128 and Simple protocols by its own latency and bandwidth
table (tuning.cc @ 5067397c: LL and LL128 steps at 0.6/1.9 µs on NVLink and 2.7/4.0 µs across
the network against Simple's 3.4/14, a tree with log-depth latency). Built into this model with
those constants scaled to each tier's latency, it was checked against the published nccl-tests
curves of hardware_catalog/calibration/nccl_tests.yaml (`planner validate --network`: 19
curves from 1 to 360 nodes, InfiniBand, RoCE, EFA, Slingshot, TCPXO, MNNVL, 64 KiB-4 GiB): mean
error of the predicted bus bandwidth 101 % (its small and mid-size messages 2-10× too fast);
with the tree at Simple only, 53 %; the Simple ring alone, this model, 29 %. The tuner's
latencies rank the choices; they are not what the collectives take. NCCL's tree and NVLink
SHARP (NVLS) are left out: Megatron-Bridge's published recipes disable NVLS
(NCCL_NVLS_ENABLE=0), and the ring is the pessimistic side of what NCCL picks, within 2 % of
the forced-ring 2-node H100 curve up to 4 MiB and 9-19 % slow on it above.

All-to-all is not a ring: each rank sends 1/g of its buffer to every peer directly, so the
bytes bound beyond a domain leave through the sender's own NIC — the domain's n members send
n·(g − n)/g·B over its n NICs, (g − n)/g·B each, which multi-NIC spreading does not change
(all_to_all_s). Point-to-point (pipeline stages, CP's K/V ring hops) is one GPU's link:
α + bytes/β of the tier the pair spans, each message paying α; across the network a single
pair drives only NCCL's channels per network peer, 2 of ~14 GB/s each up to NCCL 2.28
(P2P_NET_CHANNELS, P2P_CHANNEL_GBPS): 28 GB/s on a 400 Gb/s NIC that a ring fills at 46.5.
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext
from planner.cost.flops import ArrayLike

RING_BASE_LATENCY_S = 8.4e-6
"""NCCL's fixed latency of a ring collective under its Simple protocol (NVIDIA/nccl@5067397c
src/graph/tuning.cc ``baseLatencies`` Ring Simple, 8.4 µs since 2.18), once per collective."""

P2P_NET_CHANNELS = 2
"""Channels one send/recv pair drives across the network: NCCL_NCHANNELS_PER_NET_PEER, 2 from
NCCL 2.18 to 2.28 (NVIDIA/nccl v2.18.3 src/init.cc ``NCCL_PARAM(NChannelsPerNetPeer, ...,
2)``; v2.21-2.28 start from 2 per NIC and only lower it with scale), the releases PyTorch 2.1-2.8
ship. NCCL 2.29 raises it to ⌈NIC GB/s / 14⌉."""

P2P_CHANNEL_GBPS = 14.0
"""What one network channel of a send/recv moves, GB/s: NCCL's own figure,
``NCCL_PARAM(P2pPerChannelNetBw, "P2P_PER_CHANNEL_NET_BW", 14)`` (src/graph/paths.cc @
5067397c), from which 2.29 sizes the channels per peer. Two channels: 28 GB/s per pair, below a
400 Gb/s NIC's 46-48 (NVIDIA/nccl#1272: on 25 GB/s Slingshot NICs two channels reach 24.2 GB/s
of sendrecv_perf at 512 MB, the NIC's rate)."""


def tier_index(ctx: CostContext, span_gpus: ArrayLike) -> np.ndarray:
    """Index of the first network tier whose domain holds ``span_gpus`` consecutive GPUs."""
    span = np.asarray(span_gpus)
    index = np.zeros(span.shape, dtype=int)
    for i, tier in enumerate(ctx.system.network_tiers[:-1]):
        index = np.where((index == i) & (span > (tier.domain_gpus or 0)), i + 1, index)
    return index


def tier_rate(ctx: CostContext, index: int) -> float:
    """Network tier ``index``'s bytes/s per GPU: bandwidth × efficiency, divided by the
    context's network_scale beyond the scale-up tier."""
    tier = ctx.system.network_tiers[index]
    scale = ctx.network_scale if index > 0 else 1.0
    return tier.bandwidth_gbps * 1e9 * tier.efficiency / scale


def tier_latency_s(ctx: CostContext, index: int) -> float:
    """Network tier ``index``'s latency per step, × the context's network_scale beyond the
    scale-up tier."""
    scale = ctx.network_scale if index > 0 else 1.0
    return ctx.system.network_tiers[index].latency_us * 1e-6 * scale


def _tier_arrays(ctx: CostContext, span_gpus: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(bytes/s, latency s) of the tier each span runs on."""
    tiers = range(len(ctx.system.network_tiers))
    bandwidth = np.array([tier_rate(ctx, i) for i in tiers])
    latency = np.array([tier_latency_s(ctx, i) for i in tiers])
    index = tier_index(ctx, span_gpus)
    return bandwidth[index], latency[index]


def domain_layout(
    ctx: CostContext, group: ArrayLike, span: ArrayLike
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(k_i, n_i) per network tier i: the tier-i domains a group of ``group`` ranks spread over
    ``span`` GPUs touches, k_i = min(g, max(1, ⌈span/D_i⌉)), and its members in each,
    n_i = g/k_i (even spreading; the last tier: k = 1, n = g)."""
    g = np.asarray(group, dtype=float)
    width = np.asarray(span, dtype=float)
    domains, members = [], []
    for tier in ctx.system.network_tiers:
        if tier.domain_gpus is None:
            k = np.ones(np.broadcast(g, width).shape)
        else:
            k = np.minimum(g, np.maximum(1.0, np.ceil(width / tier.domain_gpus - 1e-9)))
        domains.append(k)
        members.append(g / k)
    domains[-1] = np.ones_like(domains[-1])
    members[-1] = g * np.ones_like(members[-1])
    return domains, members


def _tiers_used(ctx: CostContext, group: ArrayLike, span: ArrayLike) -> list[np.ndarray]:
    """Per tier i, whether a ring over the group uses its links: n_i > n_{i−1} (n_{−1} = 1),
    i.e. some hop joins two members inside one tier-i domain but not inside one tier-(i−1)
    domain."""
    _, members = domain_layout(ctx, group, span)
    below = [np.ones_like(members[0]), *members[:-1]]
    return [inside > under for inside, under in zip(members, below, strict=True)]


def ring_bus_bytes_per_s(ctx: CostContext, group: ArrayLike, span: ArrayLike) -> np.ndarray:
    """A ring's bus bandwidth (bytes/s): min over the tiers it uses of n_{i−1}·β_i (module
    docstring); infinite for g = 1 (no link used)."""
    _, members = domain_layout(ctx, group, span)
    rate = np.full(np.shape(members[0]), np.inf)
    below = np.ones_like(members[0])
    used = _tiers_used(ctx, group, span)
    for index, (inside, uses) in enumerate(zip(members, used, strict=True)):
        per_gpu = tier_rate(ctx, index)
        rate = np.where(uses, np.minimum(rate, below * per_gpu), rate)
        below = inside
    return rate


def ring_latency_s(ctx: CostContext, group: ArrayLike, span: ArrayLike) -> np.ndarray:
    """The latency of one ring pass (a reduce-scatter or an all-gather): g − 1 hops, each at
    the largest ``latency_us`` of the tiers the ring uses (module docstring: NCCL raises a
    multi-node ring's in-node hops to the network's per-step overhead)."""
    g = np.asarray(group, dtype=float)
    hop = np.zeros(np.shape(g * np.asarray(span, dtype=float)))
    for index, uses in enumerate(_tiers_used(ctx, g, span)):
        hop = np.where(uses, np.maximum(hop, tier_latency_s(ctx, index)), hop)
    return (g - 1) * hop


def ring_parts_s(
    ctx: CostContext,
    group: ArrayLike,
    span: ArrayLike,
    nbytes: ArrayLike,
    count: ArrayLike = 1,
    passes: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """(transfer, latency) seconds of ``count`` ring collectives that move ``nbytes`` in all
    over ``group`` ranks spanning ``span`` GPUs, each of ``passes`` ring passes (1: a
    reduce-scatter or all-gather; 2: an all-reduce):

        transfer = passes·(g − 1)/g · nbytes / busBw
        latency  = count·(base + overhead + passes·(g − 1)·hop)

    The transfer can hide under compute, the latency cannot; ``overhead`` is the stack's
    fixed cost per message (StackProfile.message_overhead_us). Both are 0 for g = 1."""
    g = np.asarray(group, dtype=float)
    n = np.maximum(np.asarray(count, dtype=float), 1.0)
    bus = ring_bus_bytes_per_s(ctx, g, span)
    transfer = passes * (g - 1) / g * np.asarray(nbytes, dtype=float) / bus
    each = RING_BASE_LATENCY_S + ctx.stack.message_overhead_us * 1e-6
    latency = n * (each + passes * ring_latency_s(ctx, g, span))
    active = g > 1
    return np.where(active, transfer, 0.0), np.where(active, latency, 0.0)


def all_reduce_s(ctx: CostContext, group: ArrayLike, span: ArrayLike, nbytes: ArrayLike):
    """Ring all-reduce of ``nbytes`` over ``group`` ranks spanning ``span`` GPUs (0 if g = 1):
    a reduce-scatter and an all-gather, 2·(g − 1) steps, one base latency."""
    transfer, latency = ring_parts_s(ctx, group, span, nbytes, passes=2)
    return transfer + latency


def reduce_scatter_s(ctx: CostContext, group: ArrayLike, span: ArrayLike, nbytes: ArrayLike):
    """Ring reduce-scatter (or all-gather) of an ``nbytes`` buffer over ``group`` ranks."""
    transfer, latency = ring_parts_s(ctx, group, span, nbytes)
    return transfer + latency


all_gather_s = reduce_scatter_s


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
        slowest = np.maximum(slowest, share * data / tier_rate(ctx, i))
        inside = np.maximum(inside, reach)
    _, latency = _tier_arrays(ctx, g * step)
    overhead = ctx.stack.message_overhead_us * 1e-6
    return slowest + np.where(g > 1, (g - 1) * latency + overhead, 0.0)


def point_to_point_s(
    ctx: CostContext, span: ArrayLike, nbytes: ArrayLike, messages: ArrayLike = 1
) -> np.ndarray:
    """``messages`` messages between two GPUs of a group spanning ``span`` GPUs, one of
    ``nbytes`` and the rest (metadata) empty: each pays the latency of the tier the group
    spans and the stack's per-message overhead; the data moves at the tier's bandwidth, or,
    across a scale-out tier, at most P2P_NET_CHANNELS × P2P_CHANNEL_GBPS (one pair of GPUs
    drives NCCL's channels per network peer, not the NIC's whole rate: module docstring)."""
    bandwidth, latency = _tier_arrays(ctx, span)
    scale_out = tier_index(ctx, span) > 0
    pair_cap = P2P_NET_CHANNELS * P2P_CHANNEL_GBPS * 1e9 / ctx.network_scale
    rate = np.where(scale_out, np.minimum(bandwidth, pair_cap), bandwidth)
    per_message = latency + ctx.stack.message_overhead_us * 1e-6
    return np.asarray(messages, dtype=float) * per_message + np.asarray(nbytes, dtype=float) / rate
