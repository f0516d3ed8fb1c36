"""Running CP-SAT on a built planning model: the solver settings every query shares, decoding a
strategy, and minimising a hardware quantity."""

from __future__ import annotations

from ortools.sat.python import cp_model

from constraints import PlanModel
from planner.errors import InternalError
from planner.search_space import strategy_from_values
from planner.specs import Strategy

DEFAULT_WORKERS = 1
DEFAULT_SEED = 0
SOLVED = (cp_model.OPTIMAL, cp_model.FEASIBLE)


def solve(
    built: PlanModel,
    time_limit_s: float = 60.0,
    workers: int = DEFAULT_WORKERS,
    presolve: bool = True,
) -> tuple[cp_model.CpSolver, int]:
    """Solve with fixed seed; one worker by default (deterministic). Presolve runs one round
    without probing, SAT inprocessing and the LP relaxation are off: on these models (small,
    element-table heavy) propagation alone proves optimality, and the rest cost 2-3× the time
    (parameter sweep over eight benchmark scenarios: median 0.54 s → 0.24 s). Models with a
    free GPU count, or a hardware quantity to minimise, solve faster without presolve
    (megatron-1t fewest-GPU query: 4.9 s → 0.6 s; mt-11t least-HBM 0.35 s → 0.08 s; an 81-level
    offload-bandwidth grid 58 s (time limit) → 2.4 s), hence ``presolve``."""
    solver = cp_model.CpSolver()
    parameters = solver.parameters
    parameters.max_time_in_seconds = time_limit_s
    parameters.num_workers = workers
    parameters.random_seed = DEFAULT_SEED
    parameters.cp_model_probing_level = 0
    parameters.use_sat_inprocessing = False
    parameters.max_presolve_iterations = 1
    parameters.linearization_level = 0
    parameters.cp_model_presolve = presolve
    status = solver.Solve(built.model)
    if status == cp_model.MODEL_INVALID:
        # Input ranges (planner.limits) keep every coefficient inside 64 bits; reaching this is
        # a bug, reported as one line rather than as a silent "unknown".
        raise InternalError(f"the CP-SAT model is invalid: {built.model.Validate()}")
    return solver, status


def decode(built: PlanModel, solver: cp_model.CpSolver) -> Strategy:
    return strategy_from_values(built.variables.assignment(solver))


def minimize_then_fix(
    built: PlanModel, quantity: cp_model.IntVar, time_limit_s: float = 60.0
) -> tuple[int | None, cp_model.CpSolver, int]:
    """Minimise ``quantity``; then, with it held at its minimum, minimise the step time (so the
    strategy reported for a minimum is the fastest one that achieves it). Returns the minimum
    (None if none), and the second solve."""
    built.model.Minimize(quantity)
    solver, status = solve(built, time_limit_s)
    if status not in SOLVED:
        return None, solver, status
    least = int(solver.Value(quantity))
    built.model.Add(quantity <= least)
    built.minimize_step()
    solver, status = solve(built, time_limit_s)
    return least, solver, status
