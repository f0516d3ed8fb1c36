"""Why a problem has no feasible strategy, by how much, and what would fix it.

1. Pins that contradict the model, the job or the system on their own (tp = 16 on an 8-GPU
   NVLink domain, tp not dividing the heads, ...) are named before any solving, with the values
   that are allowed.
2. Otherwise the CP-SAT model is solved with every constraint family as an assumption; CP-SAT's
   sufficient assumptions are shrunk by deletion (re-solve without each member; keep it out if
   still infeasible) to an irreducible conflicting set.
3. Each member is quantified by dropping it and minimising what it limits (the least HBM any
   strategy needs, the fewest GPUs that work, ...), with the strategy that achieves it.
4. Relaxations, each alone: the fewest GPUs, the least HBM, the least offload capacity (or a
   new offload tier), a larger global batch, dropping a pin, letting TP cross the scale-up
   domain — each found by the solver (hardware as decision variables) and verified by planning
   again with it.
"""

from __future__ import annotations

import time

from pydantic import BaseModel

from constraints.target import PerformanceTarget
from planner.cost.context import CostContext
from planner.queries.conflicts import Conflict, irreducible_core, pin_conflicts, quantify
from planner.queries.diagnosis_session import Planner, Session
from planner.queries.relaxations import Relaxation, drop_pins, search_relaxations
from planner.queries.solving import (
    Budget,
    StoppedBy,
)
from planner.specs import JobSpec, ModelSpec, SystemSpec


class Diagnosis(BaseModel):
    conflicts: list[Conflict]
    relaxations: list[Relaxation]
    wall_time_s: float
    complete: bool = True
    """False when a limit cut a step short: the conflict may then not be irreducible, and some
    fixes were not searched for, not proven least or not verified."""
    stopped_by: StoppedBy | None = None
    """The limit that cut a step short ("work limit" or "time limit"; None when complete)."""
    fixes_searched: bool = True
    """False for a conflict-only diagnosis (plan(diagnose="conflict"), as min-hardware asks
    for at the largest GPU count): no change was looked for, so none missing says nothing."""


def diagnose(
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int,
    pins: dict[str, int],
    plan_fn: Planner,
    limits: dict[str, int | None],
    target: PerformanceTarget | None = None,
    fixes: bool = True,
    budget: Budget | None = None,
) -> Diagnosis:
    """The diagnosis of an infeasible planning problem (see the module docstring). Without
    ``fixes``, only the conflict (no relaxations, and no fewest-GPU search). Every solve and
    re-plan inside spends from ``budget`` (default: planner.specs.limits.DEFAULT_WORK_UNITS); when a
    limit cuts a step short the diagnosis says what it has (``complete`` false, ``stopped_by``)."""
    started = time.perf_counter()
    session = Session(
        CostContext(model, system, job),
        gpus,
        pins,
        limits,
        target,
        plan_fn,
        fixes,
        budget=budget or Budget(),
    )
    pinned = pin_conflicts(model, system, job, gpus, pins)
    if pinned:
        relaxation = drop_pins(session, [c.family.removeprefix("pin:") for c in pinned])
        return Diagnosis(
            conflicts=pinned,
            relaxations=[relaxation],
            wall_time_s=time.perf_counter() - started,
            complete=not session.incomplete,
            stopped_by=session.stopped_by,
        )
    core = irreducible_core(session)
    conflicts = [quantify(session, family, label) for family, label in core]
    relaxations = search_relaxations(session, {family for family, _ in core}) if fixes else []
    return Diagnosis(
        conflicts=conflicts,
        relaxations=relaxations,
        wall_time_s=time.perf_counter() - started,
        complete=not session.incomplete,
        stopped_by=session.stopped_by,
        fixes_searched=fixes,
    )
