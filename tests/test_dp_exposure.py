"""DP exposure as Megatron-Core's interleaved schedule runs it (planner/cost/step.py
dp_exposed_s), checked against an event simulation of the DP link that shares none of its
closed forms: chunk by chunk releases, first come first served, and the forwards that wait for
their chunk's parameters. Also the stacks' DP-overlap contention."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware_catalog
from planner.cost.context import CostContext
from planner.cost.parallel_comm import DpCommTimes
from planner.cost.step import dp_exposed_s
from planner.specs import JobSpec
from tests.conftest import gpt_model, simple_system


def simulated_reductions_s(reduction: float, backward: float, p: int, v: int) -> float:
    """How long after the last backward the last chunk's reduction ends: chunk j's R/v is
    released j·p chunk steps (B/v each) before the end, chunk v − 1 first; one link, FIFO."""
    link_free = -np.inf
    for j in range(v - 1, -1, -1):
        link_free = max(link_free, -j * p * backward / v) + reduction / v
    return max(link_free, 0.0)


def simulated_gathers_s(gather: float, forward: float, p: int, v: int) -> float:
    """How late the forwards of the first group of p micro-batches end for waiting on their
    chunks' parameters: chunks 0 and 1 gathered from the start, chunk j ≥ 2 when chunk j − 1
    starts its first forward; chunk 0 consumed bucket by bucket (its first forward ends at
    max(F/v, G/v)), every later chunk waits for all of its G/v."""
    chunk_f, chunk_g = forward / v, gather / v
    link_free = 2 * chunk_g
    group_end = max(chunk_f, chunk_g) + (p - 1) * chunk_f
    start = max(group_end, link_free)  # chunk 1's first forward
    group_end = start + p * chunk_f
    for _ in range(2, v):
        link_free = max(link_free, start) + chunk_g  # released as chunk j − 1 starts
        start = max(group_end, link_free)
        group_end = start + p * chunk_f
    return group_end - p * forward


def _context(contention: float = 0.0) -> CostContext:
    stack = hardware_catalog.load_stack("megatron-core").model_copy(
        update={"dp_overlap_contention": contention}
    )
    job = JobSpec(global_batch=64, stack="megatron-core")
    return CostContext(gpt_model(), simple_system(), job, stack=stack)


def _exposed(
    ctx: CostContext,
    reduction: float,
    gather: float,
    backward: float,
    forward: float,
    p: int,
    v: int,
    per_mb: float = 0.0,
    n: float = 1.0,
) -> float:
    comm = DpCommTimes(
        after_backward_s=np.asarray(reduction),
        before_forward_s=np.asarray(gather),
        per_micro_batch_s=np.asarray(per_mb),
        latency_per_step_s=np.asarray(0.0),
        latency_per_micro_batch_s=np.asarray(0.0),
    )
    shown = dp_exposed_s(
        ctx,
        comm,
        np.asarray(forward),
        np.asarray(backward),
        np.asarray(forward + backward),
        np.asarray(float(p)),
        np.asarray(float(v)),
        np.asarray(n),
    )
    return float(shown)


seconds = st.floats(0.0, 10.0, allow_nan=False)
windows = st.floats(0.001, 1.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(seconds, windows, st.integers(2, 16), st.integers(2, 12))
def test_interleaved_reductions_end_when_the_simulated_link_does(reduction, backward, p, v):
    ctx = _context()
    expected = simulated_reductions_s(reduction, backward, p, v)
    assert _exposed(ctx, reduction, 0.0, backward, 0.0, p, v) == pytest.approx(
        expected, rel=1e-9, abs=1e-12
    )


@settings(max_examples=300, deadline=None)
@given(seconds, windows, st.integers(2, 16), st.integers(2, 12))
def test_interleaved_gathers_stall_the_forwards_as_the_simulation_does(gather, forward, p, v):
    ctx = _context()
    expected = simulated_gathers_s(gather, forward, p, v)
    assert _exposed(ctx, 0.0, gather, 0.0, forward, p, v) == pytest.approx(
        expected, rel=1e-9, abs=1e-12
    )


def test_one_chunk_hides_its_transfers_under_one_micro_batchs_passes() -> None:
    ctx = _context()
    assert _exposed(ctx, 0.5, 0.0, 0.2, 0.1, 8, 1) == pytest.approx(0.3)
    assert _exposed(ctx, 0.0, 0.05, 0.2, 0.1, 8, 1) == 0.0
    assert _exposed(ctx, 0.0, 0.25, 0.2, 0.1, 8, 1) == pytest.approx(0.15)


def test_the_last_chunks_reduction_always_shows() -> None:
    """Chunk 0's reduction is launched after its last backward, so even a long backward leaves
    R/v showing; deep interleaving shrinks it."""
    ctx = _context()
    assert _exposed(ctx, 0.6, 0.0, 10.0, 0.0, 4, 2) == pytest.approx(0.3)
    assert _exposed(ctx, 0.6, 0.0, 10.0, 0.0, 4, 6) == pytest.approx(0.1)


def test_without_a_window_everything_shows() -> None:
    ctx = _context()
    for v in (1, 2, 5):
        assert _exposed(ctx, 0.4, 0.3, 0.0, 0.0, 4, v, per_mb=0.01, n=8) == pytest.approx(0.78)


@pytest.mark.parametrize("v", [1, 3])
def test_contention_shows_its_share_of_what_hides(v: int) -> None:
    """exposed = excess + u·(transfers − excess), for the once-per-step and per-micro-batch
    transfers alike."""
    args = (0.5, 0.2, 0.3, 0.15, 4, v)
    free = _exposed(_context(0.0), *args, per_mb=0.02, n=8)
    transfers = 0.5 + 0.2 + 8 * 0.02
    for u in (0.25, 1.0):
        shown = _exposed(_context(u), *args, per_mb=0.02, n=8)
        assert shown == pytest.approx(free + u * (transfers - free))
    assert _exposed(_context(1.0), *args, per_mb=0.02, n=8) == pytest.approx(transfers)


def test_the_contention_is_a_calibrated_parameter_with_bounds() -> None:
    from planner.accuracy.calibration import BOUNDS, PRIORS
    from planner.specs.quantities import CALIBRATED_PARAMETERS

    assert "dp_overlap_contention" in CALIBRATED_PARAMETERS
    assert BOUNDS["dp_overlap_contention"] == (0.0, 1.0)
    assert 0.0 <= PRIORS["dp_overlap_contention"] <= 1.0
