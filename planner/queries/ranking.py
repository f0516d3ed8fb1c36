"""``plan --top K``: the K best *ideas*, not K spellings of one.

Many strategies tie: they differ only in the ZeRO stage, in a tp/micro-batch trade with the
same per-GPU work, or in offload traffic that is fully hidden. Three ways to rank:

- ``structure`` (default): rank r is the r-th best distinct structural choice (tp, cp, pp,
  layout, dp, micro-batch, interleave, recompute); variants are the same structure with other
  ZeRO stages, offload shares, rank orders, sequence parallelism or overlaps within
  TIE_TOLERANCE. A rank costs one re-solve and at most MAX_VARIANTS short ones (the structure
  held), whatever the number of ties.
- ``step``: rank r is the r-th distinct step time (as the cost model evaluates it).
  Strategies within TIE_TOLERANCE of a rank's step time are one rank, its representative the one
  the tie-break prefers, up to MAX_VARIANTS others listed as its equivalent variants. Ties are
  walked one by one, so a rank costs one re-solve per tied strategy: with offload shares in the
  space, dozens (top 3 of examples/plan_from_python.py over quarter shares: 47 ties in one rank,
  past its 60 s limit; 2.5 s by structure).
- ``strategy``: every distinct strategy is a rank (the behaviour before ranks were grouped).

The representative of a rank is the solver's optimum of ``step·weight + simplicity``
(constraints.PlanModel): among equal step times it prefers the smaller tp, then the smaller pp,
then fewer offloaded tensor kinds — fewer moving parts and less communication to go wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ortools.sat.python import cp_model

from constraints import PlanModel
from planner.cost.knobs import Knobs
from planner.queries.solving import SOLVED, Budget, decode, solve_within
from planner.space.search_space import KNOBS
from planner.specs import Strategy

RankBy = Literal["step", "structure", "strategy"]
TIE_TOLERANCE = 1e-4
"""Step times within 0.01 % of each other are one rank (the solver's time resolution is 10^-6 of
the ideal step, so ties are exact ties, not rounding)."""
MAX_VARIANTS = 4
"""Equivalent variants listed per rank."""
STRUCTURAL_KNOBS = ("tp", "cp", "pp", "layout", "dp", "micro_batch", "interleave", "recompute")


@dataclass(frozen=True)
class Rank:
    strategy: Strategy
    variants: tuple[Strategy, ...]
    """Up to MAX_VARIANTS tied strategies."""
    tied: int
    """How many tied strategies were found (variants lists the first MAX_VARIANTS)."""


def rank(
    built: PlanModel,
    solver: cp_model.CpSolver,
    top: int,
    rank_by: RankBy,
    step_s: Callable[[Strategy], float],
    budget: Budget,
    workers: int,
) -> list[Rank]:
    """The ``top`` ranks, best first, starting from ``solver``'s optimum of ``built``.
    ``step_s`` evaluates a strategy with the cost model. Every solve spends from ``budget``
    (the query's work and time limits); ranking stops with what it has when it runs out."""
    if rank_by == "structure":
        return _by_structure(built, solver, top, budget, workers)
    return _in_order(built, solver, top, rank_by == "step", step_s, budget, workers)


def _in_order(
    built: PlanModel,
    solver: cp_model.CpSolver,
    top: int,
    group: bool,
    step_s: Callable[[Strategy], float],
    budget: Budget,
    workers: int,
) -> list[Rank]:
    """Strategies in order of the objective (each excluded once found, the last objective a
    lower bound for the next); with ``group``, consecutive ones whose evaluated step times are
    within TIE_TOLERANCE of their rank's first are one rank. A lower bound on the step variable
    cannot skip a group: the step-time inequalities let the solver inflate a tied strategy's
    step variable, so ties are walked one by one (each ~20–50 ms)."""
    current = decode(built, solver)
    members: list[Strategy] = [current]
    ranks: list[Rank] = []
    while True:
        exclude(built, current, (*KNOBS, "dp"))
        built.model.Add(built.objective() >= round(solver.ObjectiveValue()))
        solver, status = _solve(built, budget, workers, solver)
        current = decode(built, solver) if status in SOLVED else None
        tied = (
            group
            and current is not None
            and step_s(current) <= step_s(members[0]) * (1 + TIE_TOLERANCE)
        )
        if tied:
            members.append(current)
            continue
        ranks.append(Rank(members[0], tuple(members[1 : 1 + MAX_VARIANTS]), len(members) - 1))
        if current is None or len(ranks) >= top:
            return ranks
        members = [current]


def _by_structure(
    built: PlanModel, solver: cp_model.CpSolver, top: int, budget: Budget, workers: int
) -> list[Rank]:
    """Distinct structures: each rank's variants are found with the structure held and the step
    bounded from above (a sound bound), then the structure is excluded."""
    ranks: list[Rank] = []
    while True:
        current = decode(built, solver)
        variants = _same_structure(built, solver, current, budget, workers)
        ranks.append(Rank(current, variants, len(variants)))
        if len(ranks) >= top or budget.exhausted():
            return ranks
        built.model.Add(built.objective() >= round(solver.ObjectiveValue()))
        exclude(built, current, STRUCTURAL_KNOBS)
        solver, status = _solve(built, budget, workers, solver)
        if status not in SOLVED:
            return ranks


def _solve(
    built: PlanModel, budget: Budget, workers: int, last: cp_model.CpSolver
) -> tuple[cp_model.CpSolver, int]:
    """The next solve within ``budget``; UNKNOWN (with the ``last`` solver) once it has run
    out."""
    if budget.exhausted():
        return last, cp_model.UNKNOWN
    solved = solve_within(built, budget, workers)
    return solved.solver, solved.status


def _same_structure(
    built: PlanModel,
    solver: cp_model.CpSolver,
    representative: Strategy,
    budget: Budget,
    workers: int,
) -> tuple[Strategy, ...]:
    """Strategies of the representative's structure tied with it (step variable at most
    TIE_TOLERANCE above), each excluded from the model once found."""
    model = built.model
    step = solver.Value(built.steps.step)
    within = model.NewBoolVar("tied_with_rank")
    model.Add(built.steps.step <= step + round(step * TIE_TOLERANCE)).OnlyEnforceIf(within)
    assumptions = [within, *_literals(built, representative, STRUCTURAL_KNOBS)]
    exclude(built, representative, (*KNOBS, "dp"))
    found: list[Strategy] = []
    while len(found) < MAX_VARIANTS and not budget.exhausted():
        model.ClearAssumptions()
        model.AddAssumptions(assumptions)
        variant_solver, status = _solve(built, budget, workers, solver)
        if status not in SOLVED:
            break
        found.append(decode(built, variant_solver))
        exclude(built, found[-1], (*KNOBS, "dp"))
    model.ClearAssumptions()
    return tuple(found)


def _literals(built: PlanModel, strategy: Strategy, knobs: tuple[str, ...]) -> list:
    values = {name: int(value) for name, value in Knobs.from_strategy(strategy).as_dict().items()}
    values["layout"] = built.variables.space.layout_index(strategy)
    chosen = [built.variables.is_value(name, values[name]) for name in knobs]
    return [literal for literal in chosen if literal is not None]


def exclude(built: PlanModel, strategy: Strategy, knobs: tuple[str, ...]) -> None:
    """Forbid this strategy's assignment of ``knobs`` (a no-good)."""
    built.model.AddBoolOr([literal.Not() for literal in _literals(built, strategy, knobs)])
