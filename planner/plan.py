"""``plan``: the provably optimal strategy for a problem, by CP-SAT over the cost model's tables.

The solver's answer is decoded, evaluated again with the cost model (the reported estimate is
always the cost model's), and checked against the solver's objective. ``top`` > 1 re-solves with
each found strategy excluded (a no-good over all knobs) and the last objective as a lower bound,
giving the K best distinct strategies.
"""

from __future__ import annotations

import functools
import time
from typing import Literal

from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints import PlanModel, build_plan_model
from constraints.target import PerformanceTarget
from planner import limits as lim
from planner.api import as_model, as_system
from planner.cost.context import CostContext
from planner.cost.step import Knobs, evaluate_terms
from planner.diagnosis import Diagnosis, pin_conflicts
from planner.diagnosis import diagnose as run_diagnosis
from planner.errors import InputError
from planner.estimate import Estimate, build_estimate
from planner.rules import strategy_warnings
from planner.search_space import KNOBS, SearchSpace, build_search_space
from planner.solving import DEFAULT_WORKERS, SOLVED, decode, solve
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

Status = Literal["optimal", "feasible", "infeasible", "unknown"]


class SolverReport(BaseModel):
    """How the solve went: status, times, objective and bound (seconds of step time)."""

    status: Status
    wall_time_s: float
    build_time_s: float
    objective_step_s: float | None
    bound_step_s: float | None
    gap: float | None
    variables: int
    constraints: int
    table_entries: int
    search_space: int


class Alternative(BaseModel):
    rank: int
    strategy: Strategy
    step_time_s: float
    mfu: float
    differs_in: list[str]


class Plan(BaseModel):
    status: Status
    strategy: Strategy | None
    estimate: Estimate | None
    solver: SolverReport | None
    """None when pins contradicted the problem before any solving."""
    alternatives: list[Alternative] = []
    diagnosis: Diagnosis | None = None
    """Why no strategy fits and what would fix it (when infeasible)."""


def plan(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    gpus: int,
    pins: dict[str, int] | None = None,
    top: int = 1,
    time_limit_s: float = 60.0,
    workers: int = DEFAULT_WORKERS,
    max_micro_batch: int = 64,
    max_interleave: int = 16,
    diagnose: bool | str = True,
    target: PerformanceTarget | None = None,
) -> Plan:
    """The best strategy for ``model`` on ``gpus`` GPUs of ``system``, proven optimal unless the
    time limit cut the proof short (status ``feasible``). With ``top`` = K, also the K best
    distinct strategies (``alternatives``, the best first; K ≤ planner.limits.MAX_TOP, one
    warm re-solve each, all within ``time_limit_s``). When nothing fits, ``diagnose``
    explains why (planner.diagnosis; ``diagnose="conflict"`` names the conflict without
    searching for fixes). ``target`` (a step-time or MFU bound) is one more constraint family."""
    model_spec, system_spec = as_model(model), as_system(system)
    if system_spec.max_gpus is not None and gpus > system_spec.max_gpus:
        raise InputError(
            f"--gpus = {gpus}: system {system_spec.name!r} has at most {system_spec.max_gpus}"
        )
    _check_whole("--gpus", gpus, lim.MAX_GPUS)
    _check_whole("--top", top, lim.MAX_TOP)
    _check_whole("--max-micro-batch", max_micro_batch, lim.MAX_GLOBAL_BATCH)
    _check_whole("--max-interleave", max_interleave, lim.MAX_LAYERS)
    if not 0 < time_limit_s <= lim.MAX_TIME_LIMIT_S:
        raise InputError(f"--time-limit = {time_limit_s!r}: allowed (0, {lim.MAX_TIME_LIMIT_S:g}]")
    ctx = CostContext(model_spec, system_spec, job)
    pins = dict(pins or {})
    limits = {"max_micro_batch": max_micro_batch, "max_interleave": max_interleave}
    started = time.perf_counter()
    infeasible = functools.partial(
        _infeasible,
        model=model_spec,
        system=system_spec,
        job=job,
        gpus=gpus,
        pins=pins,
        limits=limits,
        diagnose=diagnose,
        started=started,
        target=target,
        time_limit_s=time_limit_s,
    )
    if pin_conflicts(model_spec, system_spec, job, gpus, pins):
        return infeasible(None)
    space = build_search_space(model_spec, system_spec, job, gpus, pins, **limits)
    built = build_plan_model(ctx, space, target=target)
    build_time = time.perf_counter() - started
    solver, status = solve(built, time_limit_s, workers)
    report = _report(built, solver, status, time.perf_counter() - started, build_time, space)
    if status == cp_model.INFEASIBLE:
        return infeasible(report)
    if status not in SOLVED:
        return Plan(status=report.status, strategy=None, estimate=None, solver=report)
    best = decode(built, solver)
    ranked = [best]
    last = solver
    while len(ranked) < top:
        remaining_s = time_limit_s - (time.perf_counter() - started)
        if remaining_s <= 0:  # the time limit covers the whole ranking
            break
        _exclude(built, ranked[-1])
        _warm_start(built, last)
        last, next_status = solve(built, remaining_s, workers)
        if next_status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        ranked.append(decode(built, last))
    report.wall_time_s = time.perf_counter() - started
    alternatives = []
    if top > 1:
        for rank, strategy in enumerate(ranked, start=1):
            estimate = _estimate(ctx, strategy, system_spec)
            alternatives.append(
                Alternative(
                    rank=rank,
                    strategy=strategy,
                    step_time_s=estimate.step_time_s,
                    mfu=estimate.mfu,
                    differs_in=_differences(best, strategy),
                )
            )
    return Plan(
        status=report.status,
        strategy=best,
        estimate=_estimate(ctx, best, system_spec),
        solver=report,
        alternatives=alternatives,
    )


def _check_whole(flag: str, value: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(f"{flag} = {value!r}: allowed range is 1..{high}")


STATUS_NAMES: dict[int, Status] = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
}


def _infeasible(
    report, model, system, job, gpus, pins, limits, diagnose, started, target, time_limit_s
) -> Plan:
    """No strategy: the diagnosis, within what is left of ``time_limit_s``."""
    diagnosis = None
    if diagnose:
        verify = functools.partial(plan, diagnose=False, target=target)
        diagnosis = run_diagnosis(
            model,
            system,
            job,
            gpus,
            pins,
            verify,
            limits,
            target,
            fixes=diagnose != "conflict",
            time_limit_s=max(0.0, time_limit_s - (time.perf_counter() - started)),
        )
    if report is not None:
        report.wall_time_s = time.perf_counter() - started
    return Plan(
        status="infeasible", strategy=None, estimate=None, solver=report, diagnosis=diagnosis
    )


def _report(
    built: PlanModel,
    solver: cp_model.CpSolver,
    status: int,
    wall: float,
    build: float,
    space: SearchSpace,
) -> SolverReport:
    proto = built.model.Proto()
    entries = sum(len(c.element.exprs) for c in proto.constraints if c.has_element())
    name = STATUS_NAMES.get(status, "unknown")
    solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    weight = built.tie_break_weight
    objective = built.step_s(solver.Value(built.steps.step)) if solved else None
    bound = built.step_s(solver.BestObjectiveBound() // weight) if solved else None
    return SolverReport(
        status=name,
        wall_time_s=wall,
        build_time_s=build,
        objective_step_s=objective,
        bound_step_s=bound,
        gap=(objective - bound) / objective if solved and objective else None,
        variables=len(proto.variables),
        constraints=len(proto.constraints),
        table_entries=entries,
        search_space=space.size(),
    )


def _warm_start(built: PlanModel, solver: cp_model.CpSolver) -> None:
    """Before the next re-solve of ``top``: the next strategy's objective is at least the last
    one's (solutions come in order), so a solution meeting that bound is proven at once."""
    built.model.Add(built.objective() >= round(solver.ObjectiveValue()))


def _exclude(built: PlanModel, strategy: Strategy) -> None:
    """Forbid this exact assignment of the strategy knobs."""
    values = Knobs.from_strategy(strategy).as_dict()
    chosen = [built.variables.is_value(name, int(values[name])) for name in (*KNOBS, "dp")]
    built.model.AddBoolOr([literal.Not() for literal in chosen if literal is not None])


def _estimate(ctx: CostContext, strategy: Strategy, system: SystemSpec) -> Estimate:
    terms = evaluate_terms(ctx, Knobs.from_strategy(strategy))
    return build_estimate(ctx, terms, strategy.gpus, strategy_warnings(system, strategy))


def _differences(best: Strategy, other: Strategy) -> list[str]:
    a, b = best.model_dump(), other.model_dump()
    return [f"{k}={b[k]}" for k in a if a[k] != b[k]]
