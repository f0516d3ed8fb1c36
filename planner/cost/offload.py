"""Tensor offloading to slower memory tiers (the Calculon model behind the SC23 poster).

Per block and micro-batch, each offload tier's link moves, per direction:

- forward: reads the block's weights (if weights are offloaded to it); writes the block's
  stored activations (if activations are).
- backward: reads the weights and the gradient accumulators and writes the gradients back (if
  weights are offloaded to it); reads the stored activations back (if activations are).

A link's time is max(bytes read, bytes written) / (bandwidth · efficiency): reads and writes
proceed concurrently. Offloading is free when every link's time fits in the block's compute
time of that pass; the excess is exposed. Depends on (tp, micro_batch, recompute,
sequence_parallel, offload_weights, offload_activations).
"""

from __future__ import annotations

import numpy as np

from planner.cost.compute import BlockTimes
from planner.cost.context import ACTIVATION_BYTES, CostContext


def offload_exposed_s(
    ctx: CostContext,
    offload_weights: np.ndarray | int,
    offload_activations: np.ndarray | int,
    times: BlockTimes,
    block_params: np.ndarray,
    block_activations: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Exposed offload time per block per micro-batch: (forward pass, backward pass)."""
    weights = ACTIVATION_BYTES * block_params
    grads = ctx.grad_bytes * block_params
    off_w = np.asarray(offload_weights)
    off_a = np.asarray(offload_activations)
    link_forward = np.zeros(())
    link_backward = np.zeros(())
    for tier_index, tier in enumerate(ctx.system.memory_tiers[1:], start=1):
        rate = tier.bandwidth_gbps * 1e9 * tier.efficiency
        w_here = off_w == tier_index
        a_here = off_a == tier_index
        fwd_read = np.where(w_here, weights, 0.0)
        fwd_write = np.where(a_here, block_activations, 0.0)
        bwd_read = np.where(w_here, weights + grads, 0.0) + np.where(a_here, block_activations, 0.0)
        bwd_write = np.where(w_here, grads, 0.0)
        link_forward = np.maximum(link_forward, np.maximum(fwd_read, fwd_write) / rate)
        link_backward = np.maximum(link_backward, np.maximum(bwd_read, bwd_write) / rate)
    forward_exposed = np.maximum(0.0, link_forward - times.forward_s)
    backward_exposed = np.maximum(0.0, link_backward - times.backward_s - times.recompute_s)
    return forward_exposed, backward_exposed


def optimizer_step_s(
    ctx: CostContext, params_per_rank: np.ndarray, offload_optimizer: np.ndarray
) -> np.ndarray:
    """Optimizer step, memory-bound: per parameter of the rank's (sharded) state it reads the
    gradient (g bytes), reads and writes the optimizer state (2 × o bytes: the stack's, 12 for
    fp32 master weights and two moments) and writes the 16-bit weight (2 bytes), at HBM
    bandwidth. With the optimizer state in an offload tier, its o bytes per parameter also cross
    that tier's link in each direction; the slower of the two paths sets the time."""
    state = ctx.optimizer_bytes_per_param
    hbm_s = (ctx.grad_bytes + 2 * state + ACTIVATION_BYTES) * params_per_rank / ctx.hbm_bytes_per_s
    link_s = np.zeros_like(hbm_s)
    for tier_index, tier in enumerate(ctx.system.memory_tiers[1:], start=1):
        rate = tier.bandwidth_gbps * 1e9 * tier.efficiency
        link_s = np.where(
            np.asarray(offload_optimizer) == tier_index, state * params_per_rank / rate, link_s
        )
    return np.maximum(hbm_s, link_s)
