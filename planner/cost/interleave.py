"""What the interleaved schedule costs beyond the ideal (p − 1)/v bubble (issue 34 item 6).

With v virtual stages (model chunks) per rank, Narayanan et al. SC21 §2.2.2 shrink the bubble
from (p − 1)·T to (p − 1)·T/v, T one micro-batch's time on a rank. Three things that ideal leaves
out, each priced here and added by step.evaluate_terms (and by the solver, constraints/
objective.py, with the same formulas):

1. **Uneven chunks.** The fill and the drain pass through p − 1 chunk-steps; with unequal virtual
   stages (Megatron-Core's embedding/loss slots, layout strings) each step on a rank of k
   blocks takes up to its largest chunk c_max: (p − 1)·T·c_max/k, which is (p − 1)·T/v for an
   even split (bubble_share). The step is the slowest rank's n·T plus its own steps.
2. **Fill and drain messages.** The first micro-batch's forward crosses p·v − 1 stage boundaries
   before the last rank has work (its backward as many on the way back), each message on the
   critical path: the waiting rank has nothing to hide it under. Each of the v − 1 extra passes
   around the ring of ranks adds p boundaries, forward and backward: 2·p·(v − 1)·M for message
   time M. Where the stack overlaps P2P with compute in the steady state (pp_overlap, v > 1) the
   (p − 1)/v·T term no longer holds the first pass's 2·(p − 1)·M, so they are added too
   (fill_drain_messages_s). At v = 1 this is 0 and the 1F1B bubble is unchanged.
3. **Per-chunk work.** Every chunk's forward and backward of every micro-batch is a separate
   schedule step: its P2P operations posted and waited on, its input and output buffers
   allocated and freed, its gradient hooks run; a fixed time ``pp_chunk_overhead_us`` (stack
   profile) each. The non-interleaved schedule's two steps per micro-batch are in the calibrated
   efficiencies, so interleaving adds 2·(v − 1) of them per micro-batch to T (chunk_overhead_s).

GEMMs do not get smaller with thinner chunks: a chunk of one block runs the same b·s × h GEMMs as
a chunk of four; only the per-chunk fixed costs above grow with v.
"""

from __future__ import annotations

import numpy as np

from planner.cost.context import CostContext
from planner.cost.flops import ArrayLike

US = 1e-6


def bubble_share(v: ArrayLike, chunk_blocks: ArrayLike, blocks: ArrayLike) -> np.ndarray:
    """The share of one micro-batch's rank time T that each of the p − 1 fill/drain steps takes:
    1/v for an even split (chunk_blocks 0), else the largest chunk over the slowest rank's blocks,
    min(1, c_max/k)."""
    c = np.asarray(chunk_blocks, dtype=float)
    k = np.maximum(np.asarray(blocks, dtype=float), 1.0)
    return np.where(c > 0, np.minimum(1.0, c / k), 1.0 / np.asarray(v, dtype=float))


def fill_drain_messages_s(
    pp: ArrayLike, v: ArrayLike, message_s: ArrayLike, hidden: ArrayLike
) -> np.ndarray:
    """Messages on the fill and drain's critical path beyond the (p − 1)/v·T term's:
    2·(p·(v − 1) + [hidden]·(p − 1))·M, 0 at v = 1 or p = 1 (module docstring, 2)."""
    p = np.asarray(pp, dtype=float)
    vv = np.asarray(v, dtype=float)
    hops = p * (vv - 1) + np.where(np.asarray(hidden, dtype=bool), p - 1, 0.0)
    return np.where((p > 1) & (vv > 1), 2 * hops * np.asarray(message_s, dtype=float), 0.0)


def fill_drain_hops(pp: int, v: int, hidden: bool) -> int:
    """The whole multiple of M in fill_drain_messages_s for one (p, v) (the solver's
    coefficient)."""
    if pp == 1 or v == 1:
        return 0
    return 2 * (pp * (v - 1) + (pp - 1 if hidden else 0))


def chunk_overhead_s(ctx: CostContext, pp: ArrayLike, v: ArrayLike) -> np.ndarray:
    """Per micro-batch on a rank: 2·(v − 1)·o, o the stack's ``pp_chunk_overhead_us`` (module
    docstring, 3); 0 without a pipeline."""
    o = ctx.stack.pp_chunk_overhead_us * US
    vv = np.asarray(v, dtype=float)
    return np.where(np.asarray(pp) > 1, 2 * (vv - 1) * o, 0.0)
