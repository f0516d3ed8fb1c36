"""``plan``: the provably optimal strategy for a problem, by CP-SAT over the cost model's tables.

The solver's answer is decoded, evaluated again with the cost model (the reported estimate is
always the cost model's), and checked against the solver's objective. ``top`` > 1 ranks the K
best distinct step times (or structures, or strategies) with planner.queries.ranking.
"""

from __future__ import annotations

import functools
import time
from typing import Literal

from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints import build_plan_model
from constraints.scales import TIME_CEILING_IDEAL_STEPS
from constraints.target import PerformanceTarget
from planner.cost.context import CostContext
from planner.cost.estimate import Estimate, build_estimate
from planner.cost.knobs import Knobs
from planner.cost.step import evaluate_terms
from planner.errors import InputError, InternalError
from planner.queries.conflicts import pin_conflicts
from planner.queries.diagnosis import Diagnosis
from planner.queries.diagnosis import diagnose as run_diagnosis
from planner.queries.evaluate import as_model, as_system
from planner.queries.ranking import Rank, RankBy, rank
from planner.queries.solving import (
    DEFAULT_WORKERS,
    SOLVED,
    Budget,
    PartsSolved,
    StoppedBy,
    decode,
    expert_parts,
    solve_parts,
)
from planner.space.reductions import stated_caps
from planner.space.rules import strategy_warnings
from planner.space.search_space import SearchSpace, build_search_space
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec
from planner.specs import limits as lim
from planner.specs.quantities import DEFAULT_MAX_STAGE_SKEW, DEFAULT_OFFLOAD_STEP

Status = Literal["optimal", "feasible", "infeasible", "unknown"]


class SolverReport(BaseModel):
    """How the solve went: status, times, objective and bound (seconds of step time), the
    limits it ran under and the one that stopped it short of a proof."""

    status: Status
    wall_time_s: float
    build_time_s: float
    stopped_by: StoppedBy | None = None
    """The limit that ended the search before it proved its answer optimal (or proved that
    none exists): "work limit" or "time limit"; None when the answer is proven."""
    work_units: float = 0.0
    """CP-SAT deterministic work the solves spent (about a second each on one core at rest)."""
    work_limit: float | None = lim.DEFAULT_WORK_UNITS
    """The work limit set, in deterministic units (None: none)."""
    time_limit_s: float | None = None
    """The wall-clock limit set (None: none; the default, so that answers do not depend on
    the machine's load)."""
    ranks_stopped_by: StoppedBy | None = None
    """With ``--top``: the limit that ran out before every rank asked for was found."""
    objective_step_s: float | None
    bound_step_s: float | None
    gap: float | None
    models: int = 1
    """CP-SAT models solved: one per expert-parallel size where the space holds several
    (planner.queries.solving.expert_parts), each after the first required to beat the best so
    far."""
    parts: int = 1
    """The models the space splits into (more than ``models`` when the time ran out first)."""
    variables: int
    constraints: int
    table_entries: int
    search_space: int
    caps: list[str] = []
    """Limits of the searched space that leave out allowed strategies (reductions.stated_caps):
    the optimum is proven over the space inside them."""


class Variant(BaseModel):
    """A strategy tied with its rank's representative (planner.queries.ranking.TIE_TOLERANCE)."""

    strategy: Strategy
    step_time_s: float
    differs_in: list[str]
    """Its knobs that differ from the representative's."""


class Alternative(BaseModel):
    rank: int
    strategy: Strategy
    step_time_s: float
    mfu: float
    differs_in: list[str]
    """Its knobs that differ from the best plan's."""
    variants: list[Variant] = []
    tied: int = 0
    """Strategies tied with this one (``variants`` lists the first few)."""


class FormComparison(BaseModel):
    """Under a stack that runs AxoNN's tensor parallelism, which TP form won (``winner``:
    ``axonn-3d`` or ``megatron-1d``) and why: where the grid won, the best plan of Megatron's
    form (X = Z = 1, solved again), its step time and the step-time terms by which it is
    slower (``slower_by_s``: its term − the grid's, the largest first); where Megatron's form
    won, the proof itself covers every grid (no second solve)."""

    winner: str
    megatron_strategy: Strategy | None = None
    megatron_step_time_s: float | None = None
    slower_by_s: dict[str, float] = {}


class Plan(BaseModel):
    status: Status
    strategy: Strategy | None
    estimate: Estimate | None
    solver: SolverReport | None
    """None when pins contradicted the problem before any solving."""
    alternatives: list[Alternative] = []
    diagnosis: Diagnosis | None = None
    """Why no strategy fits and what would fix it (when infeasible)."""
    tp_forms: FormComparison | None = None
    """Under a stack that runs AxoNN's tensor parallelism: which form won and why."""


def plan(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    gpus: int,
    pins: dict[str, int] | None = None,
    top: int = 1,
    time_limit_s: float | None = None,
    workers: int = DEFAULT_WORKERS,
    max_micro_batch: int = 64,
    max_interleave: int | None = None,
    max_cp: int | None = None,
    max_stage_skew: int = DEFAULT_MAX_STAGE_SKEW,
    offload_step: int = DEFAULT_OFFLOAD_STEP,
    diagnose: bool | str = True,
    target: PerformanceTarget | None = None,
    rank_by: RankBy = "structure",
    work_limit: float | None = lim.DEFAULT_WORK_UNITS,
) -> Plan:
    """The best strategy for ``model`` on ``gpus`` GPUs of ``system``, proven optimal unless a
    limit cut the proof short (status ``feasible``, ``solver.stopped_by`` naming the limit):
    ``work_limit`` deterministic work units (planner.specs.limits.DEFAULT_WORK_UNITS; None:
    none) and, if set, ``time_limit_s`` wall-clock seconds, whichever runs out first, shared by
    every solve of the query (the ranks and the diagnosis included). With ``top`` = K, also the
    K best ranks (``alternatives``, the best first; K ≤ planner.specs.limits.MAX_TOP): distinct
    step times with their tied variants by default, or distinct structures or strategies
    (``rank_by``, planner.queries.ranking). When nothing fits, ``diagnose`` explains why
    (planner.queries.diagnosis; ``diagnose="conflict"`` names the conflict without searching
    for fixes). ``target`` (a step-time or MFU bound) is one more constraint family.

    The space searched: micro-batches dividing the global batch up to ``max_micro_batch``,
    interleaves up to ``max_interleave`` (None: every divisor of the blocks per stage), context
    parallelism up to ``max_cp`` (None: chunks of at least quantities.MIN_CP_CHUNK_TOKENS
    tokens), stage layouts whose last stage is at most ``max_stage_skew`` blocks lighter,
    offload shares in steps of ``offload_step`` eighths (a pinned share besides), TP inside one
    scale-up domain unless the system sets ``tp_across_domain``; ``solver.caps``
    names those that left out allowed strategies."""
    model_spec, system_spec = as_model(model), as_system(system)
    if system_spec.max_gpus is not None and gpus > system_spec.max_gpus:
        raise InputError(
            f"--gpus = {gpus}: system {system_spec.name!r} has at most {system_spec.max_gpus}"
        )
    _check_whole("--gpus", gpus, lim.MAX_GPUS)
    _check_whole("--top", top, lim.MAX_TOP)
    _check_whole("--max-micro-batch", max_micro_batch, lim.MAX_GLOBAL_BATCH)
    if max_interleave is not None:
        _check_whole("--max-interleave", max_interleave, lim.MAX_LAYERS)
    if max_cp is not None:
        _check_whole("--max-cp", max_cp, lim.MAX_GPUS)
    if not isinstance(max_stage_skew, int) or not 0 <= max_stage_skew <= lim.MAX_LAYERS:
        raise InputError(f"--max-stage-skew = {max_stage_skew!r}: allowed 0..{lim.MAX_LAYERS}")
    if offload_step not in (1, 2, 4, 8):
        raise InputError(f"--offload-step = {offload_step!r} eighths: allowed 1, 2, 4, 8")
    check_limits(time_limit_s, work_limit)
    ctx = CostContext(model_spec, system_spec, job)
    pins = dict(pins or {})
    limits = {
        "max_micro_batch": max_micro_batch,
        "max_interleave": max_interleave,
        "max_cp": max_cp,
        "max_stage_skew": max_stage_skew,
        "offload_step": offload_step,
    }
    started = time.perf_counter()
    budget = Budget.of(work_limit, time_limit_s)
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
        budget=budget,
    )
    if pin_conflicts(model_spec, system_spec, job, gpus, pins):
        return infeasible(None)
    space = build_search_space(model_spec, system_spec, job, gpus, pins, **limits)
    space_s = time.perf_counter() - started
    # The ranks of --top are searched in one model of the whole space.
    parts = expert_parts(space) if top == 1 else [space]
    solved = solve_parts(
        lambda part: build_plan_model(ctx, part, target=target),
        parts,
        workers=workers,
        budget=budget,
    )
    built, solver, status = solved.built, solved.solver, solved.status
    report = _report(solved, time.perf_counter() - started, space_s, space)
    report.work_limit, report.time_limit_s = work_limit, time_limit_s
    report.caps = stated_caps(model_spec, system_spec, job, gpus, **limits)
    if status == cp_model.INFEASIBLE:
        return infeasible(report)
    if status not in SOLVED:
        return Plan(status=report.status, strategy=None, estimate=None, solver=report)
    best = decode(built, solver)  # the first rank's strategy, whatever the ranking
    ranks: list[Rank] = []
    if top > 1:  # with top = 1 the ranks' further solves (tied variants) would go unreported
        ranks = rank(
            built,
            solver,
            top,
            rank_by,
            lambda strategy: _estimate(ctx, strategy, system_spec).step_time_s,
            budget,
            workers,
        )
    report.wall_time_s = time.perf_counter() - started
    report.work_units = budget.spent_units
    if top > 1 and len(ranks) < top:
        report.ranks_stopped_by = budget.exhausted()
    alternatives = []
    if top > 1:
        for number, ranked in enumerate(ranks, start=1):
            estimate = _estimate(ctx, ranked.strategy, system_spec)
            alternatives.append(
                Alternative(
                    rank=number,
                    strategy=ranked.strategy,
                    step_time_s=estimate.step_time_s,
                    mfu=estimate.mfu,
                    differs_in=_differences(best, ranked.strategy),
                    variants=[
                        Variant(
                            strategy=variant,
                            step_time_s=_estimate(ctx, variant, system_spec).step_time_s,
                            differs_in=_differences(ranked.strategy, variant),
                        )
                        for variant in ranked.variants
                    ],
                    tied=ranked.tied,
                )
            )
    estimate = _checked_estimate(ctx, best, system_spec, report)
    forms = None
    if ctx.stack.tp_form == "axonn" and not ({"tp_column", "tp_depth"} & set(pins)):
        forms = FormComparison(winner="axonn-3d" if best.axonn_grid else "megatron-1d")
        if best.axonn_grid:  # the best of Megatron's form, for the reason the grid won
            other = plan(
                model_spec,
                system_spec,
                job,
                gpus,
                {**pins, "tp_column": 1, "tp_depth": 1},
                time_limit_s=time_limit_s,
                workers=workers,
                diagnose=False,
                target=target,
                work_limit=work_limit,
                **limits,
            )
            if other.estimate is not None and estimate is not None:
                ours, theirs = estimate.breakdown_s, other.estimate.breakdown_s
                delta = {term: theirs[term] - ours[term] for term in ours}
                forms.megatron_strategy = other.strategy
                forms.megatron_step_time_s = other.estimate.step_time_s
                forms.slower_by_s = dict(sorted(delta.items(), key=lambda kv: -kv[1]))
    return Plan(
        status=report.status,
        strategy=best,
        estimate=estimate,
        solver=report,
        alternatives=alternatives,
        tp_forms=forms,
    )


OBJECTIVE_TOLERANCE = 1e-3
"""The solver's objective and the cost model's step time of its answer agree within 0.1 %
(DESIGN.md §2), or the answer is not reported."""


def _checked_estimate(
    ctx: CostContext, best: Strategy, system: SystemSpec, report: SolverReport
) -> Estimate:
    """The estimate of the answer, after checking that the solver's objective is its step time
    (within OBJECTIVE_TOLERANCE). The tables cap each time entry at TIME_CEILING_IDEAL_STEPS
    ideal steps (model FLOPs at peak on the GPUs), so an objective below the evaluation of a
    strategy whose step is past the cap (an MFU below 1/TIME_CEILING_IDEAL_STEPS: hardware or
    stack numbers near the ends of their ranges) is an input error, never a "proven optimal"
    answer; any other disagreement is a bug."""
    estimate = _estimate(ctx, best, system)
    objective_s, evaluated_s = report.objective_step_s, estimate.step_time_s
    if objective_s is None or abs(objective_s - evaluated_s) <= OBJECTIVE_TOLERANCE * evaluated_s:
        return estimate
    if objective_s < evaluated_s and estimate.mfu < 1 / TIME_CEILING_IDEAL_STEPS:
        raise InputError(
            f"step time = {evaluated_s:.6g} s for the best strategy found ({best.describe()}), "
            f"beyond the range the solver's tables hold (MFU {estimate.mfu:.2g}); check the "
            "hardware and stack numbers (bandwidths, latencies, efficiencies, bucket sizes)"
        )
    raise InternalError(
        f"the solver's objective ({objective_s:.6g} s) and the cost model's step time "
        f"({evaluated_s:.6g} s) of {best.describe()} disagree by more than 0.1 %"
    )


def check_limits(time_limit_s: float | None, work_limit: float | None) -> None:
    """Refuse a limit outside its range, or no limit at all (a search could then run
    forever)."""
    if time_limit_s is not None and not 0 < time_limit_s <= lim.MAX_TIME_LIMIT_S:
        raise InputError(f"--time-limit = {time_limit_s!r}: allowed (0, {lim.MAX_TIME_LIMIT_S:g}]")
    if work_limit is not None and not 0 < work_limit <= lim.MAX_WORK_UNITS:
        raise InputError(f"--work-limit = {work_limit!r}: allowed (0, {lim.MAX_WORK_UNITS:g}]")
    if time_limit_s is None and work_limit is None:
        raise InputError("--work-limit = none: set a work limit or a time limit (--time-limit)")


def _check_whole(flag: str, value: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(f"{flag} = {value!r}: allowed range is 1..{high}")


STATUS_NAMES: dict[int, Status] = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
}


def _infeasible(
    report, model, system, job, gpus, pins, limits, diagnose, started, target, budget
) -> Plan:
    """No strategy: the diagnosis, within what is left of the query's ``budget``."""
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
            budget=budget,
        )
    if report is not None:
        report.wall_time_s = time.perf_counter() - started
        report.work_units = budget.spent_units
    return Plan(
        status="infeasible", strategy=None, estimate=None, solver=report, diagnosis=diagnosis
    )


def _report(solved: PartsSolved, wall: float, space_s: float, space: SearchSpace) -> SolverReport:
    name = STATUS_NAMES.get(solved.status, "unknown")
    built, solver = solved.built, solved.solver
    found = solved.status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    weight = built.tie_break_weight
    objective = built.step_s(solver.Value(built.steps.step)) if found else None
    bound = built.step_s(solved.bound // weight) if found else None
    return SolverReport(
        status=name,
        wall_time_s=wall,
        build_time_s=space_s + solved.build_s,
        objective_step_s=objective,
        bound_step_s=bound,
        gap=(objective - bound) / objective if found and objective else None,
        models=solved.models,
        parts=solved.parts,
        variables=solved.variables,
        constraints=solved.constraints,
        table_entries=solved.table_entries,
        search_space=space.size(),
        stopped_by=solved.stopped_by,
        work_units=solved.work_units,
    )


def _estimate(ctx: CostContext, strategy: Strategy, system: SystemSpec) -> Estimate:
    terms = evaluate_terms(ctx, Knobs.from_strategy(strategy))
    warnings = strategy_warnings(system, strategy, ctx.stack)
    return build_estimate(ctx, terms, strategy.gpus, warnings, strategy)


def _differences(best: Strategy, other: Strategy) -> list[str]:
    a, b = best.model_dump(), other.model_dump()
    return [f"{k}={b[k]}" for k in a if a[k] != b[k]]
