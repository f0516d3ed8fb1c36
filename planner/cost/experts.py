"""Expert parallelism of mixture-of-experts blocks (Megatron-Core MoE; DeepSeek-V3 technical
report, 2024, §3.2).

For its MoE blocks' routed experts a pipeline stage's t·cp·d ranks regroup into
etp × ep × edp (Megatron-Core's expert rank order: expert TP fastest, then EP, then expert DP):
each expert is split over etp ranks, a block's E experts are sharded over ep groups (E/ep
each), and each shard is replicated over edp = t·cp·d/(ep·etp) ranks, which reduce its
gradients and share its ZeRO state. Attention, dense FFNs, shared experts and the router keep
the dense layout (t, cp, d).

Token traffic per MoE block per micro-batch, per GPU. Sequence parallelism splits the tokens
over the t ranks (Megatron-Core requires it of MoE with tp > 1), so a rank routes
b·s/(cp·t) tokens to k experts each: X = k·b·s·h·e/(cp·t) bytes.

- dispatch and combine: two all-to-alls of X over the ep ranks, etp GPUs apart; a rank sends
  1/ep of X to each peer, the peers in its scale-up domain over that tier and the others over
  the scale-out tier at the same time (network.all_to_all_s; each rank's bytes beyond its
  domain leave through its own NIC, so unlike a ring's they gain nothing from the domain's
  other NICs). Under group-limited routing
  (``expert_groups_per_token`` = M, DeepSeek-V3's node-limited routing with one group of
  experts per node) a token crosses to at most M other domains once each and is forwarded
  inside them, so the bytes beyond the scale-up domain scale by min(1, M/k). A stack with
  ``fp8_dispatch`` sends the dispatch in fp8 under fp8 training (X/2; the combine stays
  16-bit);
- with etp > 1 an expert's tokens are all-gathered over its etp ranks before it and
  reduce-scattered after it: etp·X over etp ranks, each way.

The backward moves as much again (the gradients) and a full recompute repeats the forward.
With ep > 1 the busiest rank receives ``JobSpec.expert_imbalance`` × the mean tokens, which
scales its routed-expert compute and this traffic. Where the stack overlaps it
(``StackProfile.ep_overlap``) the traffic runs under another micro-batch's compute: exposed
max(0, traffic − the block's compute).
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.flops import ArrayLike
from planner.cost.network import all_gather_s, all_to_all_s, reduce_scatter_s


def expert_tp_size(tp: ArrayLike, expert_tp: ArrayLike) -> np.ndarray:
    """Ranks each expert is split over: ``expert_tp``, or tp where it is 0 (Strategy)."""
    etp = np.asarray(expert_tp)
    return np.where(etp == 0, np.asarray(tp), etp)


def expert_dp_size(
    tp: ArrayLike, cp: ArrayLike, dp: ArrayLike, ep: ArrayLike, expert_tp: ArrayLike
) -> np.ndarray:
    """Ranks that hold the same expert shard: edp = t·cp·d/(ep·etp)."""
    ranks = np.asarray(tp, dtype=float) * np.asarray(cp, dtype=float) * np.asarray(dp, dtype=float)
    return ranks / (np.asarray(ep, dtype=float) * expert_tp_size(tp, expert_tp))


def imbalance(ctx: CostContext, ep: ArrayLike) -> np.ndarray:
    """The busiest expert-parallel rank's load over the mean: the job's factor when ep > 1."""
    return np.where(np.asarray(ep) > 1, ctx.job.expert_imbalance, 1.0)


def expert_traffic_s(
    ctx: CostContext,
    tp: ArrayLike,
    expert_tp: ArrayLike,
    ep: ArrayLike,
    local_mb: ArrayLike,
    recompute: ArrayLike,
) -> np.ndarray:
    """Token dispatch and combine time of one (average) block per micro-batch on one rank,
    unhidden (module docstring; 0 for a dense model). Depends on (tp, expert_tp, ep, cp,
    micro_batch, recompute)."""
    m = ctx.model
    if not m.is_moe:
        return np.zeros(np.broadcast(tp, expert_tp, ep, local_mb, recompute).shape)
    e = np.asarray(ep, dtype=float)
    etp = expert_tp_size(tp, expert_tp).astype(float)
    tokens = ctx.seq_len * np.asarray(local_mb, dtype=float) / np.asarray(tp, dtype=float)
    per_rank = ACTIVATION_BYTES * m.experts_per_token * m.hidden * tokens
    fp8 = ctx.stack.fp8_dispatch and ctx.recipe.low_precision  # any FP8/FP4 recipe
    dispatch_bytes = per_rank / ACTIVATION_BYTES if fp8 else per_rank
    limited = m.expert_groups_per_token
    remote = min(1.0, limited / m.experts_per_token) if limited else 1.0
    exchange = all_to_all_s(ctx, e, etp, dispatch_bytes, remote)
    exchange += all_to_all_s(ctx, e, etp, per_rank, remote)
    gathered = all_gather_s(ctx, etp, etp, etp * per_rank)
    gathered += reduce_scatter_s(ctx, etp, etp, etp * per_rank)
    passes = 2 + (np.asarray(recompute) == 2)
    return m.moe_share * imbalance(ctx, ep) * passes * (exchange + gathered)


def expert_exposed_s(ctx: CostContext, traffic_s: np.ndarray, compute_s: np.ndarray) -> np.ndarray:
    """The share of ``traffic_s`` on the critical path: all of it, or where the stack
    overlaps it, what the block's compute (of another micro-batch) cannot cover."""
    if ctx.stack.ep_overlap:
        return np.maximum(0.0, traffic_s - compute_s)
    return traffic_s
