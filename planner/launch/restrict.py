"""``plan --emit FORMAT``: the best strategy the framework can run, whose emitted configuration
reads back (``evaluate --from``) as that strategy and step time.

A framework expresses some knob values and not others (each format module's docstring says
which, from the framework's own semantics, and its ``restriction`` gives them). The searched
space is the union of a few *parts*, each the plan's space under extra pins (e.g. torchtitan:
ZeRO-2, ZeRO-3, or DDP without TP/CP/PP); every part is solved by planner.plan and the best
answer wins. The optimum over the union is proven when every part's is (a part cut short by its
limit makes the answer ``feasible``, never ``optimal``), and each value left out is stated in
``solver.caps`` (table and --json), prefixed ``--emit FORMAT:``.

The answer is then emitted and read back. Where the reading differs from the plan in a knob that
has no effect (ZeRO or DP overlap with nothing to shard or overlap over, sequence parallelism
with tp = 1), and its estimate (step time and memory) is the same, the plan reports the
strategy as read: plan, configuration and ``evaluate --from`` then agree knob for knob.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from planner.api import evaluate
from planner.diagnosis import Conflict, Diagnosis, Relaxation
from planner.errors import InputError
from planner.launch.common import LaunchConfig, Pins, Restriction
from planner.plan import Alternative, Plan, SolverReport, plan
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

LIMITS = ("time_limit_s", "work_limit")
"""planner.plan's limits: each part gets an equal share, so the search keeps to them (where no
part fits, the unrestricted plan that says why gets them once more)."""


@dataclass
class _Solved:
    """The parts' plans, and the best strategy among them."""

    plans: list[Plan] = field(default_factory=list)
    best: Plan | None = None


def plan_for(
    fmt: str,
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int,
    pins: Pins | None = None,
    diagnose: bool | str = True,
    **options: Any,
) -> Plan:
    """planner.plan restricted to what ``fmt`` can run (``module.restriction``): the best of
    its parts, the restriction in ``solver.caps``, the strategy as the configuration reads back.
    ``options`` go to planner.plan unchanged (limits, --top, the target)."""
    from planner import launch

    started = time.perf_counter()
    restriction: Restriction = launch.format_module(fmt).restriction(model, system, job)
    user = dict(pins or {})
    parts = [part | user for part in restriction.parts if _agrees(part, user)]
    if not parts:
        raise InputError(_refused_pins(fmt, restriction, user))
    caps = [f"--emit {fmt}: {cap}" for cap in restriction.caps]
    shares = {k: v / len(parts) for k, v in options.items() if k in LIMITS and v is not None}
    solved = _Solved()
    for part in parts:
        result = plan(model, system, job, gpus, pins=part, diagnose=False, **(options | shares))
        solved.plans.append(result)
        if result.strategy is not None and (
            solved.best is None or _step(result) < _step(solved.best)
        ):
            solved.best = result
    best = solved.best
    if best is None:
        return _nothing_fits(
            fmt, model, system, job, gpus, user, diagnose, options, solved, restriction, started
        )
    report = _merged_report(solved, best, caps, time.perf_counter() - started).model_copy(
        update={k: v for k, v in options.items() if k in LIMITS}
    )
    strategy = _as_read_back(fmt, model, system, job, best.strategy)  # type: ignore[arg-type]
    return best.model_copy(
        update={
            "status": report.status,
            "strategy": strategy,
            "estimate": evaluate(model, system, job, strategy),
            "solver": report,
            "alternatives": _alternatives(solved, strategy, options.get("top", 1)),
        }
    )


def _agrees(part: Pins, user: Pins) -> bool:
    return all(user.get(name, value) == value for name, value in part.items())


def _refused_pins(fmt: str, restriction: Restriction, user: Pins) -> str:
    """One line: the user's pins no part of the restriction allows, and the caps."""
    clashing = sorted(
        {name for part in restriction.parts for name in part if name in user} or set(user)
    )
    shown = ", ".join(f"--pin {name}={user[name]}" for name in clashing)
    return f"{shown}: --emit {fmt} cannot run it ({'; '.join(restriction.caps)})"


def _step(result: Plan) -> float:
    return result.estimate.step_time_s if result.estimate is not None else float("inf")


def _merged_report(
    solved: _Solved, best: Plan, caps: list[str], wall_time_s: float
) -> SolverReport:
    """The best part's solver report (its model counts, its limit's name) with the parts' time,
    work and space summed: optimal only when every part is proven (optimal, or infeasible); the
    bound the least of the parts' bounds (none where a part that may hold a strategy has
    none)."""
    reports = [p.solver for p in solved.plans if p.solver is not None]
    proven = all(p.status in ("optimal", "infeasible") for p in solved.plans)
    report = best.solver
    assert report is not None  # a part with a strategy was solved
    open_parts = [p for p in solved.plans if p.status != "infeasible"]
    bounds = [p.solver.bound_step_s if p.solver else None for p in open_parts]
    bound = None if None in bounds else min(bounds)  # type: ignore[type-var]
    objective = report.objective_step_s
    gap = None if bound is None or not objective else max(0.0, (objective - bound) / objective)
    update: dict[str, object] = {
        "status": "optimal" if proven else "feasible",
        "wall_time_s": wall_time_s,
        "bound_step_s": bound,
        "gap": gap,
        "search_space": sum(r.search_space for r in reports),
        "caps": list(report.caps) + caps,
        "work_units": sum(r.work_units for r in reports),
    }
    return report.model_copy(update=update)


def _as_read_back(
    fmt: str, model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy
) -> Strategy:
    """The strategy as ``fmt``'s configuration of it reads back, where that differs only in
    knobs without effect (the same step time and memory); else the plan's own (a note of the
    emitted configuration then says what it cannot express)."""
    from planner import launch

    emitted: LaunchConfig = launch.emit(fmt, model, system, job, strategy)
    try:
        back = launch.read(fmt, emitted.text, system, strategy.gpus, model).strategy
    except InputError:  # emit's read-back note says so
        return strategy
    if back is None or back == strategy:
        return strategy
    ours, theirs = evaluate(model, system, job, strategy), evaluate(model, system, job, back)
    same = (
        ours.step_time_s == theirs.step_time_s
        and ours.memory_gib == theirs.memory_gib
        and ours.fits == theirs.fits
    )
    return back if same else strategy


def _alternatives(solved: _Solved, best: Strategy, top: int) -> list[Alternative]:
    """The parts' ranks merged by step time, the first ``top`` (with --top), renumbered, each
    with its knobs that differ from the best."""
    if top <= 1:
        return []
    merged = [a for p in solved.plans for a in p.alternatives]
    ranked = sorted(merged, key=lambda a: a.step_time_s)[:top]
    base = best.model_dump()
    return [
        a.model_copy(
            update={
                "rank": number,
                "differs_in": [
                    f"{k}={v}" for k, v in a.strategy.model_dump().items() if base[k] != v
                ],
            }
        )
        for number, a in enumerate(ranked, start=1)
    ]


def _nothing_fits(
    fmt: str,
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int,
    user: Pins,
    diagnose: bool | str,
    options: dict[str, Any],
    solved: _Solved,
    restriction: Restriction,
    started: float,
) -> Plan:
    """No part has a strategy. Unless every part was proven infeasible the answer is unknown.
    Otherwise the plan without the restriction: infeasible too, its diagnosis stands (the
    restricted space is inside it); else the restriction is the conflict, and the unrestricted
    plan its verified fix."""
    caps = [f"--emit {fmt}: {cap}" for cap in restriction.caps]
    if any(p.status != "infeasible" for p in solved.plans):
        first = next(p for p in solved.plans if p.status != "infeasible")
        solver = first.solver
        if solver is not None:
            limits = {k: v for k, v in options.items() if k in LIMITS}
            solver = solver.model_copy(update={"caps": solver.caps + caps} | limits)
        return first.model_copy(
            update={"status": "unknown", "strategy": None, "estimate": None, "solver": solver}
        )
    free = plan(model, system, job, gpus, pins=user, diagnose=diagnose, **options)
    if free.solver is not None:
        free = free.model_copy(
            update={"solver": free.solver.model_copy(update={"caps": free.solver.caps + caps})}
        )
    if free.strategy is None:
        return free
    conflict = Conflict(
        family=f"launch:{fmt}",
        label=f"--emit {fmt}: only the strategies {fmt} can run",
        detail="; ".join(restriction.caps) or f"the strategies {fmt} can run",
    )
    fix = Relaxation(
        quantity="launch format",
        change=f"without --emit {fmt} (or with another format): {free.strategy.describe()}",
        verified=True,
        strategy=free.strategy,
        step_time_s=_step(free),
    )
    diagnosis = Diagnosis(
        conflicts=[conflict], relaxations=[fix], wall_time_s=time.perf_counter() - started
    )
    return free.model_copy(
        update={"status": "infeasible", "strategy": None, "estimate": None, "diagnosis": diagnosis}
    )
