"""Minimum-hardware queries: the least hardware that meets a goal, proven minimal.

The quantity is a decision variable of one CP-SAT model, with every cost term that depends on it
tabulated with it (DESIGN.md §5):

- ``gpus``: tp·cp·pp·dp free (whole nodes, up to the system's maximum or ``max_gpus``), minimised
  through a linear log objective;
- ``hbm`` / ``offload-capacity``: the memory a strategy needs per GPU, a variable bounded by
  the fit family, which the query drops and minimises instead (reported on a 0.1 GiB / 1 GiB
  grid);
- ``offload-bandwidth`` / ``scale-out-bandwidth``: a one-hot over a geometric grid of bandwidths
  (the offload, DP/PP and optimizer tables get one more axis), minimised by grid index;
- ``cost``: GPUs × step time (GPU-hours per step, times the system's price), with the GPU count
  free.

Goals: a maximum step time, a minimum MFU, a token budget by a deadline (a step-time bound), or
just "fits". The answer comes with the strategy that achieves it and the evidence of minimality:
the solver's proof (status optimal) and a plan one grid step below the minimum, infeasible, with
its diagnosis.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints import build_plan_model
from constraints.tables import with_bandwidth
from constraints.target import PerformanceTarget
from planner import limits as lim
from planner.api import as_model, as_system, evaluate
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.diagnosis import Diagnosis
from planner.errors import InputError
from planner.estimate import Estimate
from planner.plan import Plan, plan
from planner.quantities import QUANTITIES
from planner.search_space import SearchSpace, build_search_space
from planner.solving import SOLVED, decode, solve
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

Quantity = Literal[
    "gpus", "hbm", "offload-capacity", "offload-bandwidth", "scale-out-bandwidth", "cost"
]
HBM_STEP_GIB = 0.1
OFFLOAD_STEP_GIB = 1.0
BANDWIDTH_STEPS_PER_DOUBLING = 8
"""Bandwidth grids are geometric, 8 steps per doubling (9 % apart)."""


class Minimum(BaseModel):
    quantity: str
    value: int | float
    """A count (GPUs) is an int, in JSON too; capacities, bandwidths and dollars are floats."""
    unit: str
    proven: bool
    """CP-SAT proved no smaller value in the domain admits a strategy."""
    strategy: Strategy
    estimate: Estimate
    below_value: int | float | None
    """One grid step below the minimum (None when the minimum is the domain's smallest)."""
    below_status: str | None
    below_diagnosis: Diagnosis | None


class Unreachable(BaseModel):
    """The goal rules every strategy out even at the top of the searched domain: what the best
    plan there (the fastest, hence the highest MFU) reaches without it."""

    goal: str
    at: str
    """The hardware the best plan was found on: the top of the searched domain."""
    best_step_time_s: float
    best_mfu: float
    strategy: Strategy


class MinHardwareResult(BaseModel):
    status: Literal["optimal", "feasible", "infeasible", "unknown"]
    minimum: Minimum | None
    diagnosis: Diagnosis | None
    unreachable: Unreachable | None = None
    """Set when the status is infeasible because of the goal (see Unreachable)."""
    wall_time_s: float
    goal: str
    domain: str
    """The hardware values searched, in words."""


def bandwidth_grid(low_gbps: float, high_gbps: float) -> tuple[float, ...]:
    """Geometric grid from ``low`` to at least ``high``, BANDWIDTH_STEPS_PER_DOUBLING per 2×."""
    steps = math.ceil(math.log2(high_gbps / low_gbps) * BANDWIDTH_STEPS_PER_DOUBLING)
    return tuple(
        float(f"{low_gbps * 2 ** (i / BANDWIDTH_STEPS_PER_DOUBLING):.4g}") for i in range(steps + 1)
    )


def with_bandwidth_levels(
    space: SearchSpace, knob: str, grid_gbps: tuple[float, ...]
) -> SearchSpace:
    """The space with bandwidth ``knob`` (offload_bw or scale_out_bw) a decision over the
    levels of ``grid_gbps``, its values the levels' positions."""
    domains = {**space.domains, knob: tuple(range(len(grid_gbps)))}
    return replace(space, domains=domains, hardware={knob: grid_gbps})


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
    time_limit_s: float = 60.0,
    max_micro_batch: int = 64,
    max_interleave: int | None = None,
    max_cp: int | None = None,
) -> MinHardwareResult:
    """The least ``quantity`` that meets ``target`` (see the module docstring)."""
    started = time.perf_counter()
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
    if (
        bandwidth_range_gbps is not None
        and not 0 < bandwidth_range_gbps[0] < bandwidth_range_gbps[1]
    ):
        raise InputError(
            f"--bandwidth-range {bandwidth_range_gbps[0]:g} "
            f"{bandwidth_range_gbps[1]:g}: needs 0 < LOW < HIGH"
        )
    query = _Query(
        model_spec,
        system_spec,
        job,
        quantity,
        gpus,
        target,
        pins,
        limits,
        time_limit_s,
        max_gpus,
        bandwidth_range_gbps,
    )
    found = query.run()
    return MinHardwareResult(
        domain=query.domain(),
        status=found[0],
        minimum=found[1],
        diagnosis=found[2],
        unreachable=query.unreachable,
        wall_time_s=time.perf_counter() - started,
        goal=target.describe() if _has_goal(target) else "fits",
    )


def _has_goal(target: PerformanceTarget) -> bool:
    return target.max_step_s is not None or target.min_mfu is not None


@dataclass
class _Query:
    """One minimum-hardware question and the plans it makes to answer it."""

    model: ModelSpec
    system: SystemSpec
    job: JobSpec
    quantity: str
    gpus: int | None
    target: PerformanceTarget
    pins: dict[str, int]
    limits: dict[str, int | None]
    time_limit_s: float
    max_gpus: int | None
    bandwidth_range: tuple[float, float] | None
    unreachable: Unreachable | None = None
    """Set by ``infeasible`` when the goal is what no hardware in the domain meets."""

    def __post_init__(self) -> None:
        model, system, quantity, gpus = self.model, self.system, self.quantity, self.gpus
        self.ctx = CostContext(model, system, self.job)
        if quantity not in ("gpus", "cost") and gpus is None:
            raise InputError(f"--minimize {quantity} needs --gpus (the GPU count to size for)")
        if quantity in ("offload-capacity", "offload-bandwidth") and not system.offload_tiers:
            raise InputError(
                f"--minimize {quantity}: system {system.name!r} has no offload "
                "tier (use one that has, e.g. h100-offload-512g)"
            )
        if quantity == "cost" and system.gpu_hour_usd is None:
            raise InputError(f"--minimize cost: system {system.name!r} has no gpu_hour_usd")

    def gpu_bound(self) -> int:
        system = self.system
        return (
            self.max_gpus
            or system.max_gpus
            or min(system.scale_up_gpus * self.model.layers * self.job.global_batch, lim.MAX_GPUS)
        )

    def domain(self) -> str:
        if self.quantity in ("gpus", "cost"):
            return (
                f"GPU counts that are multiples of {self.system.gpus_per_node}, up to "
                f"{self.gpu_bound():,}"
            )
        if self.quantity in ("hbm", "offload-capacity"):
            step = HBM_STEP_GIB if self.quantity == "hbm" else OFFLOAD_STEP_GIB
            return f"capacities in steps of {step:g} GiB, up to 64 TiB per GPU"
        return "a geometric bandwidth grid, 8 steps per doubling"

    def plan_at(
        self, system: SystemSpec | None = None, gpus: int | None = None, diagnose: bool = False
    ) -> Plan:
        return plan(
            self.model,
            system or self.system,
            self.job,
            gpus or self.gpus,
            pins=self.pins,
            target=self.target,
            time_limit_s=self.time_limit_s,
            diagnose=diagnose,
            **self.limits,
        )

    def run(self):
        if self.quantity in ("gpus", "cost"):
            return self.free_gpus()
        if self.quantity in ("hbm", "offload-capacity"):
            return self.memory()
        return self.bandwidth()

    # -- answers -----------------------------------------------------------------------------
    def answer(
        self,
        value: float,
        proven: bool,
        result: Plan,
        below_value: float | None,
        below: Plan | None,
    ) -> tuple:
        if result.strategy is None:
            return ("unknown", None, result.diagnosis)
        minimum = Minimum(
            quantity=self.quantity,
            value=value,
            unit=QUANTITIES[self.quantity],
            proven=proven,
            strategy=result.strategy,
            estimate=result.estimate,
            below_value=below_value,
            below_status=below.status if below is not None else None,
            below_diagnosis=below.diagnosis if below is not None else None,
        )
        return ("optimal" if proven else "feasible", minimum, None)

    def infeasible(self, top: str, **changes) -> tuple:
        """No value in the domain works: the diagnosis of the problem at the domain's top
        (``top``, in words), and what the goal's best plan there reaches when the goal is among
        the conflicting constraints."""
        system = changes.get("system", self.system)
        result = plan(
            self.model,
            system,
            self.job,
            changes.get("gpus", self.gpus or self.system.max_gpus or 1),
            pins=self.pins,
            target=self.target,
            time_limit_s=self.time_limit_s,
            **self.limits,
        )
        self.unreachable = self.best_without_goal(result.diagnosis, system, top)
        return ("infeasible", None, result.diagnosis)

    def best_without_goal(
        self, diagnosis: Diagnosis | None, system: SystemSpec, top: str
    ) -> Unreachable | None:
        """The diagnosis's best plan without the goal, when the goal is one of its conflicts."""
        conflicts = diagnosis.conflicts if diagnosis is not None else []
        best = next((c.strategy for c in conflicts if c.family == "target" and c.strategy), None)
        if best is None:
            return None
        estimate = evaluate(self.model, system, self.job, best)
        return Unreachable(
            goal=self.target.describe(),
            at=f"{top} (the top of the searched domain)",
            best_step_time_s=estimate.step_time_s,
            best_mfu=estimate.mfu,
            strategy=best,
        )

    # -- GPU count and cost ------------------------------------------------------------------
    def free_gpus(self) -> tuple:
        system = self.system
        bound = self.gpu_bound()
        space = build_search_space(
            self.model,
            system,
            self.job,
            None,
            self.pins,
            max_gpus=bound,
            gpu_multiple=system.gpus_per_node,
            **self.limits,
        )
        built = build_plan_model(self.ctx, space, target=self.target, exact_exposure=False)
        if self.quantity == "gpus":
            built.model.Minimize(built.variables.log_gpu_count())
        else:
            count = built.variables.gpu_count()
            product = built.variables.new_int(
                "gpu_steps", built.variables.ub(count) * built.variables.ub(built.steps.step)
            )
            built.model.AddMultiplicationEquality(product, [count, built.steps.step])
            built.model.Minimize(product)
        solver, status = solve(built, self.time_limit_s, lp_fallback=False)
        if status not in SOLVED:
            if status == cp_model.INFEASIBLE:
                top = min(bound, lim.MAX_GPUS)
                return self.infeasible(f"{top} GPUs", gpus=top)
            return ("unknown", None, None)
        least = decode(built, solver).gpus
        result = self.plan_at(gpus=least)
        if self.quantity == "cost":
            value = self._cost(result)
            proven = status == cp_model.OPTIMAL and result.status == "optimal"
            return self.answer(value, proven, result, None, None)
        below_count = least - system.gpus_per_node
        below = self.plan_at(gpus=below_count, diagnose="conflict") if below_count > 0 else None
        return self.answer(
            least, status == cp_model.OPTIMAL, result, below_count if below else None, below
        )

    def _cost(self, result: Plan) -> float:
        """Dollars to train the job's token budget (or one step, without a budget)."""
        estimate = result.estimate
        steps = (
            self.job.train_tokens / (self.job.global_batch * self.ctx.seq_len)
            if self.job.train_tokens
            else 1.0
        )
        return steps * estimate.step_time_s * result.strategy.gpus / 3600 * self.system.gpu_hour_usd

    # -- memory capacities -------------------------------------------------------------------
    def memory(self) -> tuple:
        family, step = (
            ("hbm", HBM_STEP_GIB) if self.quantity == "hbm" else ("offload1", OFFLOAD_STEP_GIB)
        )
        system = self.system
        if family == "offload1":  # room to find the least, however large
            system = _with_capacity(system, 1, 64 * 1024.0)
        ctx = CostContext(self.model, system, self.job)
        space = build_search_space(
            self.model, system, self.job, self.gpus, self.pins, **self.limits
        )
        built = build_plan_model(
            ctx, space, dropped=frozenset({family}), target=self.target, exact_exposure=False
        )
        need = built.needs.hbm if family == "hbm" else built.needs.offload[0]
        built.model.Minimize(need)
        solver, status = solve(built, self.time_limit_s, lp_fallback=False)
        if status not in SOLVED:
            if status == cp_model.INFEASIBLE:  # diagnosed with the tier at the domain's top
                tier, what = (0, "HBM") if family == "hbm" else (1, "offload capacity")
                return self.infeasible(
                    f"{lim.MAX_CAPACITY_GIB:g} GiB of {what} per GPU",
                    system=_with_capacity(system, tier, lim.MAX_CAPACITY_GIB),
                )
            return ("unknown", None, None)
        gib = solver.Value(need) * built.needs.unit_bytes / BYTES_PER_GIB
        if family == "hbm":
            gib /= self.ctx.hbm_usable_fraction
        tier = 0 if family == "hbm" else 1
        steps, result, below = self.settle_capacity(
            system, tier, step, math.ceil(gib / step - 1e-9)
        )
        proven = below.status == "infeasible" if below else status == cp_model.OPTIMAL
        return self.answer(
            _on_grid(steps, step),
            proven,
            result,
            _on_grid(steps - 1, step) if below else None,
            below,
        )

    def settle_capacity(
        self, system: SystemSpec, tier: int, step: float, steps: int
    ) -> tuple[int, Plan, Plan | None]:
        """(grid steps, the plan there, the plan one step below) of the least capacity plan
        itself fits at; no plan below the grid's lowest value (0.1 GiB of HBM, 0 GiB of offload).
        The query's need is an upper bound of plan's, not always equal: a need of up to 64 TiB
        takes a coarser memory unit than plan's at the answer (entries round up to 64 KiB
        instead of 1 KiB for 1,000 layers on 1,000 GPUs), so plan can fit one step below it.
        Then the answer steps down, until plan does not fit below."""
        lowest = 1 if tier == 0 else 0
        result = self.plan_at(system=_with_capacity(system, tier, _on_grid(steps, step)))
        while steps > lowest:
            below_system = _with_capacity(system, tier, _on_grid(steps - 1, step))
            below = self.plan_at(system=below_system, diagnose="conflict")
            if below.strategy is None:
                return steps, result, below
            steps, result = steps - 1, below
        return steps, result, None

    # -- bandwidths --------------------------------------------------------------------------
    def bandwidth(self) -> tuple:
        knob = "offload_bw" if self.quantity == "offload-bandwidth" else "scale_out_bw"
        current = (
            self.system.memory_tiers[1].bandwidth_gbps
            if knob == "offload_bw"
            else self.system.network_tiers[-1].bandwidth_gbps
        )
        low, high = self.bandwidth_range or (current / 64, current * 16)
        grid = bandwidth_grid(low, high)
        space = build_search_space(
            self.model, self.system, self.job, self.gpus, self.pins, **self.limits
        )
        built = build_plan_model(
            self.ctx,
            with_bandwidth_levels(space, knob, grid),
            target=self.target,
            exact_exposure=False,
        )
        built.model.Minimize(built.variables.index(knob))
        solver, status = solve(built, self.time_limit_s, lp_fallback=False)
        if status not in SOLVED:
            top = with_bandwidth(self.system, knob, grid[-1])
            if status == cp_model.INFEASIBLE:
                what = "offload" if knob == "offload_bw" else "scale-out"
                return self.infeasible(f"{grid[-1]:g} GB/s of {what} bandwidth", system=top)
            return ("unknown", None, None)
        level = int(np.argmax([solver.Value(b) for b in built.variables.onehot[knob]]))
        value = grid[level]
        result = self.plan_at(system=with_bandwidth(self.system, knob, value))
        below = (
            self.plan_at(
                system=with_bandwidth(self.system, knob, grid[level - 1]), diagnose="conflict"
            )
            if level > 0
            else None
        )
        return self.answer(
            value, status == cp_model.OPTIMAL, result, grid[level - 1] if level else None, below
        )


def _on_grid(steps: int, step: float) -> float:
    """``steps`` grid steps of ``step`` GiB, without binary-fraction noise (0.30000000000000004)."""
    return round(steps * step, 6)


def _with_capacity(system: SystemSpec, tier: int, gib: float) -> SystemSpec:
    tiers = tuple(
        t.model_copy(update={"capacity_gib": gib}) if i == tier else t
        for i, t in enumerate(system.memory_tiers)
    )
    return system.model_copy(update={"memory_tiers": tiers})


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


def pareto(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    first: str,
    second: str,
    gpus: int | None = None,
    target: PerformanceTarget | None = None,
    **options,
) -> list[ParetoPoint]:
    """The Pareto front of two quantities by the epsilon-constraint method: the second is capped
    at SWEEP_POINTS values on a geometric grid — from its least value (the first set generously,
    UNBOUNDED) to what the first's minimum needs of it — and the first minimised under each cap;
    dominated points are dropped."""
    model_spec, system_spec = as_model(model), as_system(system)
    target = target or PerformanceTarget()
    if second == first:
        raise InputError(f"--sweep {second}: choose a quantity other than --minimize")
    corner = min_hardware(
        model_spec, system_spec, job, first, gpus=gpus, target=target, **options
    ).minimum
    if corner is None:
        return []
    high = _requirement(corner, second, system_spec)
    if second == "step-time":
        low = plan(
            model_spec, system_spec, job, corner.strategy.gpus, target=target, diagnose=False
        ).estimate.step_time_s
    else:
        roomy = (
            _set_quantity(system_spec, first, UNBOUNDED[first])
            if first in UNBOUNDED
            else system_spec
        )
        least = min_hardware(
            model_spec, roomy, job, second, gpus=gpus, target=target, **options
        ).minimum
        low = least.value if least is not None else high
    low = max(low, SWEEP_FLOOR.get(second, 0.0))
    high = max(high, low)
    caps = sorted(
        {
            float(f"{low * (high / low) ** (i / (SWEEP_POINTS - 1)):.4g}")
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
            capped_system = _set_quantity(system_spec, second, cap)
        result = min_hardware(
            model_spec, capped_system, job, first, gpus=gpus, target=capped_target, **options
        ).minimum
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


def _set_quantity(system: SystemSpec, quantity: str, value: float) -> SystemSpec:
    if quantity == "hbm":
        return _with_capacity(system, 0, value)
    if quantity == "offload-capacity":
        return _with_capacity(system, 1, value)
    if quantity == "offload-bandwidth":
        return with_bandwidth(system, "offload_bw", value)
    if quantity == "scale-out-bandwidth":
        return with_bandwidth(system, "scale_out_bw", value)
    raise InputError(f"--sweep {quantity}: cannot cap this quantity")
