"""Tensor offloading to slower memory tiers (the Calculon model behind the SC23 poster).

A strategy offloads a share q (in eighths) of each tensor class to one tier: every block's
tensors split, the share q lives in the tier and streams, the rest stays in HBM. Offload
knobs are codes (specs.offload_code) carrying the tier and the share. Per block and
micro-batch, each offload tier's link moves, per direction, q times:

- forward: reads the block's weights (if weights are offloaded to it); writes the block's
  stored activations (if activations are).
- backward: reads the weights and the gradient accumulators and writes the gradients back (if
  weights are offloaded to it); reads the stored activations back (if activations are).

A link's time is max(bytes read, bytes written) / (bandwidth · efficiency): reads and writes
proceed concurrently. In the forward the weights' reads and the activations' writes take
opposite directions, so a tier's link time is the larger of the two; in the backward the reads
(weights, gradients, activations) exceed the writes (gradients), so it is their sum. Offloading
is free when every link's time fits in the block's compute time of that pass; the excess is
exposed:

    exposed forward  = max(0, max over tiers of max(W_f, A), − C_f)
    exposed backward = max(0, max over tiers of (W_b + A) − C_b)

with W_f = q_w·e·P/r, W_b = q_w·(e + g)·P/r, A = q_a·A_block/r per tier (r its rate; zero on
other tiers) and C_f, C_b the block's forward and backward (with recompute) compute. Each
piece depends on few knobs (W on tp and the weights' code, A on tp, cp, micro_batch,
recompute, sequence_parallel and the activations' code), which is how the solver tabulates it.
"""

from __future__ import annotations

import numpy as np

from planner.cost import calculon
from planner.cost.compute import BlockTimes
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.specs import offload_eighths, offload_tier
from planner.specs.quantities import OFFLOAD_STEPS


def offloaded_share(code: np.ndarray | int, tier: int | None = None) -> np.ndarray:
    """The share of a tensor class an offload code moves (0 for code 0), to tier ``tier`` only
    when it is given."""
    code = np.asarray(code)
    share = offload_eighths(code) / OFFLOAD_STEPS
    return share if tier is None else np.where(offload_tier(code) == tier, share, 0.0)


def link_bytes_per_s(ctx: CostContext, tier: int) -> float:
    """Tier ``tier``'s link rate per direction: bandwidth · efficiency."""
    spec = ctx.system.memory_tiers[tier]
    return spec.bandwidth_gbps * 1e9 * spec.efficiency


def weight_link_s(
    ctx: CostContext, offload_weights: np.ndarray | int, block_params: np.ndarray, tier: int
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds per block on tier ``tier``'s link for the offloaded weights:
    q_w·e·P and q_w·(e + g)·P bytes (weights; weights and gradient accumulators)."""
    if ctx.calculon:  # Calculon streams the 16-bit weights each way, never the gradients
        share = offloaded_share(offload_weights, tier) * np.asarray(block_params, dtype=float)
        link = calculon.offload_s(ctx, ACTIVATION_BYTES * share, tier)
        return link, link
    rate = link_bytes_per_s(ctx, tier)
    share = offloaded_share(offload_weights, tier) * np.asarray(block_params, dtype=float) / rate
    return share * ACTIVATION_BYTES, share * (ACTIVATION_BYTES + ctx.grad_bytes)


def activation_link_s(
    ctx: CostContext,
    offload_activations: np.ndarray | int,
    block_activations: np.ndarray,
    tier: int,
) -> np.ndarray:
    """Seconds per block on tier ``tier``'s link for the offloaded activations, written in the
    forward and read back in the backward: q_a·A_block bytes each way."""
    share = offloaded_share(offload_activations, tier) * np.asarray(block_activations)
    if ctx.calculon:
        return calculon.offload_s(ctx, share, tier)
    return share / link_bytes_per_s(ctx, tier)


def offload_exposed_s(
    ctx: CostContext,
    offload_weights: np.ndarray | int,
    offload_activations: np.ndarray | int,
    times: BlockTimes,
    block_params: np.ndarray,
    block_activations: np.ndarray,
    optimizer_link_s: np.ndarray | float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Exposed offload time per block per micro-batch: (forward pass, backward pass).
    ``optimizer_link_s``: the block's optimizer state streamed in each backward (Calculon's
    arithmetic: calculon.optimizer_stream_s; it joins tier 1's backward link)."""
    link_forward = np.zeros(())
    link_backward = np.zeros(())
    for tier in range(1, len(ctx.system.memory_tiers)):
        w_forward, w_backward = weight_link_s(ctx, offload_weights, block_params, tier)
        a_link = activation_link_s(ctx, offload_activations, block_activations, tier)
        link_forward = np.maximum(link_forward, np.maximum(w_forward, a_link))
        optimizer = optimizer_link_s if tier == 1 else 0.0
        link_backward = np.maximum(link_backward, w_backward + a_link + optimizer)
    forward_exposed = np.maximum(0.0, link_forward - times.offload_forward_window)
    backward_exposed = np.maximum(0.0, link_backward - times.offload_backward_window)
    return forward_exposed, backward_exposed


def optimizer_step_s(
    ctx: CostContext, params_per_rank: np.ndarray, offload_optimizer: np.ndarray
) -> np.ndarray:
    """Optimizer step, memory-bound: per parameter of the rank's (sharded) state it reads the
    gradient (g bytes), reads and writes the optimizer state (2 × o bytes: the stack's, 12 for
    fp32 master weights and two moments) and writes the 16-bit weight (2 bytes), at HBM
    bandwidth. With a share q of the optimizer state in an offload tier, q·o bytes per parameter
    also cross that tier's link in each direction; the slower of the two paths sets the time."""
    state = ctx.optimizer_bytes_per_param
    hbm_s = (ctx.grad_bytes + 2 * state + ACTIVATION_BYTES) * params_per_rank / ctx.hbm_bytes_per_s
    link_s = np.zeros_like(hbm_s)
    for tier in range(1, len(ctx.system.memory_tiers)):
        share = offloaded_share(offload_optimizer, tier)
        link_s = np.maximum(link_s, share * state * params_per_rank / link_bytes_per_s(ctx, tier))
    return np.maximum(hbm_s, link_s)
