"""``plan --emit FORMAT``: the best strategy the framework can run, whose emitted configuration
reads back (``evaluate --from``) as that strategy and step time.

A framework expresses some knob values and not others (each format module's docstring says
which, from the framework's own semantics, and its ``restriction`` gives them). The searched
space is the union of a few *parts*, each the plan's space under extra pins (e.g. torchtitan:
ZeRO-2, ZeRO-3, or DDP without TP/CP/PP). The unrestricted plan is solved first: where it is
infeasible so is every part (its diagnosis stands), and where its proven optimum lies inside
the restriction that is the answer. Otherwise every part is solved by planner.queries.plan and the
best answer wins. The optimum over the union is proven when every part's is (a part cut short by its
limit makes the answer ``feasible``, never ``optimal``), and each value left out is stated in
``solver.caps`` (table and --json), prefixed ``--emit FORMAT:``.

The answer is then emitted and read back. Where the reading differs from the plan in a knob that
has no effect (ZeRO or DP overlap with nothing to shard or overlap over, sequence parallelism
with tp = 1), and its estimate (step time and memory) is the same, the plan reports the
strategy as read: plan, configuration and ``evaluate --from`` then agree knob for knob.
"""

from __future__ import annotations

import time
from typing import Any

from planner.errors import InputError
from planner.launch.common import LaunchConfig, Pins, Restriction
from planner.queries.conflicts import Conflict
from planner.queries.diagnosis import Diagnosis
from planner.queries.evaluate import evaluate
from planner.queries.plan import Alternative, Plan, SolverReport, plan
from planner.queries.relaxations import Relaxation
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

LIMITS = ("time_limit_s", "work_limit")
"""planner.queries.plan's limits: the unrestricted plan and each part get an equal share, so that
the whole search keeps to them."""


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
    """planner.queries.plan restricted to what ``fmt`` can run (``module.restriction``), the
    restriction in ``solver.caps``, the strategy as the configuration reads back. The
    unrestricted plan first: infeasible, nothing the format runs fits either (its diagnosis
    stands); proven optimal and inside the restriction (with top = 1), it is the answer (the
    optimum of a space inside which it lies). Else the best of the parts. ``options`` go to
    planner.queries.plan (limits, --top, the target); its limits are shared by the solves."""
    from planner import launch

    started = time.perf_counter()
    restriction: Restriction = launch.format_module(fmt).restriction(model, system, job)
    user = dict(pins or {})
    parts = [part | user for part in restriction.parts if _agrees(part, user)]
    if not parts:
        raise InputError(_refused_pins(fmt, restriction, user))
    caps = [f"--emit {fmt}: {cap}" for cap in restriction.caps]
    given = {k: v for k, v in options.items() if k in LIMITS}
    shares = {k: v / (len(parts) + 1) for k, v in given.items() if v is not None}
    free = plan(model, system, job, gpus, pins=user, diagnose=diagnose, **(options | shares))
    if free.status == "infeasible":
        return _stated(free, caps, given)
    inside = free.strategy is not None and restriction.admits(free.strategy)
    if free.status == "optimal" and options.get("top", 1) == 1 and inside:
        solved = [free]
    else:
        solved = [
            plan(model, system, job, gpus, pins=part, diagnose=False, **(options | shares))
            for part in parts
        ]
    best = min((p for p in solved if p.strategy is not None), key=_step, default=None)
    if best is None:
        return _nothing_fits(fmt, free, solved, restriction, caps, given, started)
    report = _merged_report(solved, best, caps, time.perf_counter() - started)
    strategy = _as_read_back(fmt, model, system, job, best.strategy)  # type: ignore[arg-type]
    return best.model_copy(
        update={
            "status": report.status,
            "strategy": strategy,
            "estimate": evaluate(model, system, job, strategy),
            "solver": report.model_copy(update=given),
            "alternatives": _alternatives(solved, strategy, options.get("top", 1)),
        }
    )


def _stated(result: Plan, caps: list[str], limits: dict[str, Any]) -> Plan:
    """``result`` with the restriction's caps and the limits as given in its solver report."""
    if result.solver is None:
        return result
    solver = result.solver.model_copy(update={"caps": result.solver.caps + caps} | limits)
    return result.model_copy(update={"solver": solver})


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
    solved: list[Plan], best: Plan, caps: list[str], wall_time_s: float
) -> SolverReport:
    """The best part's solver report (its model counts, its limit's name) with the parts' time,
    work and space summed: optimal only when every part is proven (optimal, or infeasible); the
    bound the least of the parts' bounds (none where a part that may hold a strategy has
    none)."""
    reports = [p.solver for p in solved if p.solver is not None]
    proven = all(p.status in ("optimal", "infeasible") for p in solved)
    report = best.solver
    assert report is not None  # a part with a strategy was solved
    open_parts = [p for p in solved if p.status != "infeasible"]
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


def _alternatives(solved: list[Plan], best: Strategy, top: int) -> list[Alternative]:
    """The parts' ranks merged by step time, the first ``top`` (with --top), renumbered, each
    with its knobs that differ from the best."""
    if top <= 1:
        return []
    merged = [a for p in solved for a in p.alternatives]
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
    free: Plan,
    solved: list[Plan],
    restriction: Restriction,
    caps: list[str],
    limits: dict[str, Any],
    started: float,
) -> Plan:
    """No part has a strategy. Unless every part was proven infeasible while the unrestricted
    plan ``free`` found one, the answer is unknown; then the restriction is the conflict, and
    the unrestricted plan its verified fix."""
    if free.strategy is None or any(p.status != "infeasible" for p in solved):
        open_part = next((p for p in solved if p.status != "infeasible"), free)
        unknown = {"status": "unknown", "strategy": None, "estimate": None}
        return _stated(open_part.model_copy(update=unknown), caps, limits)
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
    infeasible = {"status": "infeasible", "strategy": None, "estimate": None}
    return _stated(free.model_copy(update=infeasible | {"diagnosis": diagnosis}), caps, limits)
