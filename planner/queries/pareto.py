"""The Pareto front of two minimum-hardware quantities (``pareto``, min-hardware's
``--sweep``): the second capped on a geometric grid, the first minimised (min_hardware) under
each cap, dominated points dropped.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from constraints.target import PerformanceTarget
from planner.errors import InputError
from planner.queries.evaluate import as_model, as_system
from planner.queries.hardware_query import Minimum
from planner.queries.min_hardware import min_hardware
from planner.queries.plan import check_limits
from planner.queries.solving import Budget
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec
from planner.specs import limits as lim
from planner.specs.hardware import SWEEP_QUANTITIES, with_quantity


class ParetoPoint(BaseModel):
    first: int | float
    second: int | float
    step_time_s: float
    mfu: float
    strategy: Strategy


SWEEP_POINTS = 6
UNBOUNDED = {
    "hbm": 4096.0,
    "offload-capacity": 65536.0,
    "offload-bandwidth": 10000.0,
    "scale-out-bandwidth": 10000.0,
}
"""Generous values of the minimised quantity while the other one's least value is found."""


def check_sweep(first: str, second: str) -> None:
    """A one-line InputError, before any solve, unless ``second`` (--sweep) is a quantity a
    front can be traced against (SWEEP_QUANTITIES) other than ``first`` (--minimize), listing
    those allowed (the GPU count failed only after the first query's solve)."""
    allowed = [q for q in SWEEP_QUANTITIES if q != first]
    if second not in allowed:
        why = "the quantity --minimize minimises" if second == first else "not one it can cap"
        listed = ", ".join(allowed)
        raise InputError(f"--sweep {second}: {why}; allowed with --minimize {first}: {listed}")


def pareto(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    first: str,
    second: str,
    gpus: int | None = None,
    target: PerformanceTarget | None = None,
    time_limit_s: float | None = None,
    work_limit: float | None = lim.DEFAULT_WORK_UNITS,
    **options,
) -> list[ParetoPoint]:
    """The Pareto front of two quantities by the epsilon-constraint method: the second is capped
    at SWEEP_POINTS values on a geometric grid — from its least value (the first set generously,
    UNBOUNDED) to what the first's minimum needs of it — and the first minimised under each cap;
    dominated points are dropped. Every query of the sweep shares one budget of
    ``work_limit`` units and ``time_limit_s`` seconds: once it is spent, the caps not yet
    searched are left out of the front."""
    model_spec, system_spec = as_model(model), as_system(system)
    target = target or PerformanceTarget()
    check_sweep(first, second)
    check_limits(time_limit_s, work_limit)
    budget = Budget.of(work_limit, time_limit_s)

    def least(on: SystemSpec, quantity: str, goal: PerformanceTarget) -> Minimum | None:
        """min_hardware within what is left of the sweep's budget (None once it is spent)."""
        if budget.exhausted():
            return None
        result = min_hardware(
            model_spec,
            on,
            job,
            quantity,
            gpus=gpus,
            target=goal,
            time_limit_s=budget.seconds_left(),
            work_limit=budget.units_left(),
            **options,
        )
        budget.charge(result.work_units)
        return result.minimum

    corner = least(system_spec, first, target)
    if corner is None:
        return []
    high = _requirement(corner, second, system_spec)
    if second == "step-time":
        low = corner.estimate.step_time_s
    else:
        roomy = (
            with_quantity(system_spec, first, UNBOUNDED[first])
            if first in UNBOUNDED
            else system_spec
        )
        fewest = least(roomy, second, target)
        low = fewest.value if fewest is not None else high
    low = max(low, SWEEP_FLOOR.get(second, 0.0))
    high = max(high, low)
    caps = sorted(
        {
            _up_to_4_digits(low * (high / low) ** (i / (SWEEP_POINTS - 1)))
            for i in range(SWEEP_POINTS)
        }
    )
    points: list[ParetoPoint] = []
    for cap in caps:
        capped_system, capped_target = system_spec, target
        if second == "step-time":
            bound = min(cap, target.max_step_s) if target.max_step_s else cap
            capped_target = PerformanceTarget(max_step_s=bound, min_mfu=target.min_mfu)
        else:
            capped_system = with_quantity(system_spec, second, cap)
        result = least(capped_system, first, capped_target)
        if result is None:
            continue
        points.append(
            ParetoPoint(
                first=result.value,
                second=cap,
                step_time_s=result.estimate.step_time_s,
                mfu=result.estimate.mfu,
                strategy=result.strategy,
            )
        )
    front: list[ParetoPoint] = []
    for point in sorted(points, key=lambda p: (p.second, p.first)):
        if not front or point.first < front[-1].first:
            front.append(point)
    return front


def _up_to_4_digits(value: float) -> float:
    """``value`` rounded up to 4 significant digits: a cap rounded down below the corner's own
    requirement (9.834 s for a step of 9.8345 s) left the corner's answer out of its front."""
    rounded = float(f"{value:.4g}")
    if rounded >= value:
        return rounded
    digit = 10 ** (math.floor(math.log10(value)) - 3)
    return float(f"{rounded + digit:.4g}")


SWEEP_FLOOR = {
    "hbm": 1.0,
    "offload-capacity": 1.0,
    "offload-bandwidth": 1.0,
    "scale-out-bandwidth": 1.0,
}


def _requirement(minimum: Minimum, quantity: str, system: SystemSpec) -> float:
    """How much of ``quantity`` the strategy of a minimum uses (bandwidths: the system's)."""
    memory = minimum.estimate.memory_gib
    if quantity == "hbm":
        return memory["hbm"]["total"] / memory["hbm"]["usable"] * memory["hbm"]["capacity"]
    if quantity == "offload-capacity":
        return max(memory.get("offload_1", {}).get("total", 0.0), 1.0)
    if quantity == "offload-bandwidth":
        return system.memory_tiers[1].bandwidth_gbps
    if quantity == "scale-out-bandwidth":
        return system.network_tiers[-1].bandwidth_gbps
    if quantity == "step-time":
        return minimum.estimate.step_time_s * 2
    return minimum.value
