"""Minimum-hardware queries: the least hardware that meets a goal, proven minimal.

The fewest GPUs are searched count by count, each count planned by ``plan`` itself (so over
exactly plan's space: its stage layouts, cp, ep, offload shares, partial recompute and caps),
from a lower bound that the cost model proves (gpu_count.FewestGpus, gpu_floor). Every other
quantity is a decision variable of one CP-SAT model, with every cost term that depends on it
tabulated with it (DESIGN.md §5):

- ``hbm`` / ``offload-capacity``: the memory a strategy needs per GPU, a variable bounded by
  the fit family, which the query drops and minimises instead (reported on a 0.1 GiB / 1 GiB
  grid);
- ``offload-bandwidth`` / ``scale-out-bandwidth``: a one-hot over a geometric grid of bandwidths
  (the offload, DP/PP and optimizer tables get one more axis), minimised by grid index;
- ``checkpoint-bandwidth``: the file system's aggregate write bandwidth that keeps the goodput
  at a target, for plan's strategy (checkpoint_bandwidth: a bisection, the goodput being
  monotone in it);
- ``cost``: GPUs × step time (GPU-hours per step, times the system's price), with the GPU count
  free (tp·cp·pp·dp, whole nodes, up to the system's maximum or ``max_gpus``).

Goals: a maximum step time, a minimum MFU, a token budget by a deadline (a step-time bound), or
just "fits". The answer comes with the strategy that achieves it and the evidence of minimality:
for the fewest GPUs, how every smaller node multiple was refuted (Refutations); for a capacity
or a bandwidth, plan's proof that one grid step below is infeasible (more of either never hurts
a strategy, so no lower step works either); for the cost, the solver's proof. Every solve of a
query shares one budget of deterministic work (and, if set, wall-clock time): the same input
gives the same answer under any load, and an answer a limit cut short is not called proven.

This module holds the entry (``min_hardware``) and its result; each quantity's search is a
``HardwareQuery`` (hardware_query) subclass: ``FewestGpus`` and ``LeastCost`` (gpu_count),
``LeastCapacity`` (capacity), ``LeastBandwidth`` (bandwidth); the Pareto sweep of two
quantities is in pareto.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel

from constraints.target import PerformanceTarget
from planner.errors import InputError
from planner.queries.bandwidth import LeastBandwidth, check_bandwidth_range
from planner.queries.capacity import LeastCapacity
from planner.queries.checkpoint_bandwidth import LeastCheckpointBandwidth
from planner.queries.diagnosis import Diagnosis
from planner.queries.evaluate import as_model, as_system
from planner.queries.gpu_count import FewestGpus, LeastCost
from planner.queries.hardware_query import HardwareQuery, Minimum, Unreachable
from planner.queries.plan import check_limits
from planner.queries.solving import Budget, StoppedBy
from planner.specs import JobSpec, ModelSpec, SystemSpec
from planner.specs import limits as lim
from planner.specs.quantities import QUANTITIES

Quantity = Literal[
    "gpus",
    "hbm",
    "offload-capacity",
    "offload-bandwidth",
    "scale-out-bandwidth",
    "cost",
    "checkpoint-bandwidth",
]
QUERIES: dict[str, type[HardwareQuery]] = {
    "gpus": FewestGpus,
    "hbm": LeastCapacity,
    "offload-capacity": LeastCapacity,
    "offload-bandwidth": LeastBandwidth,
    "scale-out-bandwidth": LeastBandwidth,
    "cost": LeastCost,
    "checkpoint-bandwidth": LeastCheckpointBandwidth,
}
"""The query that searches each quantity (planner.specs.quantities.QUANTITIES)."""


class MinHardwareResult(BaseModel):
    status: Literal["optimal", "feasible", "infeasible", "unknown"]
    minimum: Minimum | None
    diagnosis: Diagnosis | None
    unreachable: Unreachable | None = None
    """Set when the status is infeasible because of the goal (see Unreachable)."""
    wall_time_s: float
    work_units: float = 0.0
    """CP-SAT deterministic work the query's solves spent."""
    stopped_by: StoppedBy | None = None
    """The limit that had run out when the query ended (None: neither)."""
    goal: str
    domain: str
    """The hardware values searched, in words."""


def min_hardware(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    quantity: str,
    gpus: int | None = None,
    target: PerformanceTarget | None = None,
    pins: dict[str, int] | None = None,
    max_gpus: int | None = None,
    bandwidth_range_gbps: tuple[float, float] | None = None,
    time_limit_s: float | None = None,
    work_limit: float | None = lim.DEFAULT_WORK_UNITS,
    max_micro_batch: int = 64,
    max_interleave: int | None = None,
    max_cp: int | None = None,
    max_days: float | None = None,
    min_goodput: float | None = None,
) -> MinHardwareResult:
    """The least ``quantity`` that meets ``target`` (see the module docstring), within
    ``work_limit`` deterministic units and, if set, ``time_limit_s`` seconds, shared by every
    solve of the query (MinHardwareResult.work_units says what it spent). ``max_days``:
    train the job's token budget within that many days with failures counted (the goodput
    of the job's reliability profile); ``min_goodput``: the goal of the least
    ``checkpoint-bandwidth``."""
    started = time.perf_counter()
    check_limits(time_limit_s, work_limit)
    model_spec, system_spec = as_model(model), as_system(system)
    if quantity not in QUANTITIES:
        raise InputError(f"--minimize {quantity!r}: allowed: {', '.join(QUANTITIES)}")
    target = target or PerformanceTarget()
    pins = dict(pins or {})
    limits = {
        "max_micro_batch": max_micro_batch,
        "max_interleave": max_interleave,
        "max_cp": max_cp,
    }
    if max_days is not None and not job.train_tokens:
        raise InputError("--max-days needs --train-tokens (the budget to train by then)")
    if bandwidth_range_gbps is not None:
        check_bandwidth_range(*bandwidth_range_gbps)
    query = QUERIES[quantity](
        model_spec,
        system_spec,
        job,
        quantity,
        gpus,
        target,
        pins,
        limits,
        Budget.of(work_limit, time_limit_s),
        max_gpus,
        bandwidth_range_gbps,
        max_days,
        min_goodput,
    )
    found = query.run()
    return MinHardwareResult(
        domain=query.domain(),
        status=found[0],
        minimum=found[1],
        diagnosis=found[2],
        unreachable=query.unreachable,
        wall_time_s=time.perf_counter() - started,
        work_units=query.budget.spent_units,
        stopped_by=query.budget.exhausted(),
        goal=query.goal(),
    )
