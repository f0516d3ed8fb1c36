"""Running CP-SAT on a built planning model: the solver settings every query shares, decoding a
strategy, and minimising a hardware quantity."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ortools.sat.python import cp_model

from constraints import PlanModel
from planner.errors import InternalError
from planner.space.search_space import SearchSpace, strategy_from_values
from planner.specs import Strategy
from planner.specs.limits import DEFAULT_WORK_UNITS

DEFAULT_WORKERS = 1
DEFAULT_SEED = 0
SOLVED = (cp_model.OPTIMAL, cp_model.FEASIBLE)

StoppedBy = Literal["work limit", "time limit"]
"""Which limit ended a search before its proof: its deterministic work budget, or the
wall-clock time limit the user set."""


@dataclass
class Budget:
    """What a query may still spend on solving: CP-SAT deterministic work units
    (``work_units``; None: no work limit) and, where the user set one, wall-clock time until
    ``deadline_s`` (a ``time.perf_counter`` instant; None: no time limit). Each CP-SAT run is
    charged its deterministic time (``charge``); a budget made by ``within`` charges its
    parent too, so a step of a query spends from the query's budget."""

    work_units: float | None = DEFAULT_WORK_UNITS
    deadline_s: float | None = None
    spent_units: float = 0.0
    parent: Budget | None = field(default=None, repr=False)

    @classmethod
    def of(cls, work_units: float | None, time_limit_s: float | None) -> Budget:
        """A budget of ``work_units`` and ``time_limit_s`` seconds from now (None: no limit)."""
        deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
        return cls(work_units=work_units, deadline_s=deadline)

    def units_left(self) -> float | None:
        """Work units left (None: unlimited), the parent's limit included."""
        own = None if self.work_units is None else self.work_units - self.spent_units
        above = None if self.parent is None else self.parent.units_left()
        known = [left for left in (own, above) if left is not None]
        return max(0.0, min(known)) if known else None

    def seconds_left(self) -> float | None:
        """Wall-clock seconds left (None: no time limit)."""
        if self.deadline_s is None:
            return None
        return max(0.0, self.deadline_s - time.perf_counter())

    def exhausted(self) -> StoppedBy | None:
        """The limit that has run out, if one has (the work limit checked first: it is the
        one that does not depend on the machine)."""
        if self.units_left() is not None and self.units_left() <= 0:
            return "work limit"
        if self.seconds_left() is not None and self.seconds_left() <= 0:
            return "time limit"
        return None

    def charge(self, units: float) -> None:
        """Record ``units`` of deterministic work spent, here and in the parents."""
        self.spent_units += units
        if self.parent is not None:
            self.parent.charge(units)

    def within(self, cap_units: float | None) -> Budget:
        """A budget for one step: at most ``cap_units`` (None: no cap of its own), inside this
        one's work and time."""
        return Budget(work_units=cap_units, deadline_s=self.deadline_s, parent=self)


@dataclass
class Solved:
    """One solve's outcome (``solve_within``): the run holding the answer, its status, the
    limit that stopped the search short of a proof (None when proven optimal or infeasible),
    and the deterministic work all its runs spent."""

    solver: cp_model.CpSolver
    status: int
    stopped_by: StoppedBy | None
    work_units: float


FIRST_PHASE_DETERMINISTIC_S = 1.5
"""Work budget of the unguided propagation-only phase (the first, where the space holds expert
layouts), in CP-SAT's deterministic time units
(about 1 s on this machine; deterministic, so the phase ends at the same point on any machine
and the answer does not depend on load). The README's main job over offload shares needed
0.92–0.99 units to prove its optimum and its ``--top`` re-solves with element-constraint tables;
at 1.0 the re-solves were cut just short and the LP phase then took 1.4–1.7 s more (top 3:
10.4 s at 1.0, 5.5 s at 1.5). With allowed-assignment tables (Variables.table) it needs 0.35
units (top 3: 1.9 s).
benchmarks/latency_battery.py --quick over offload halves: 1.0 units p50 0.44 s, p99 3.7 s,
10 problems in phase 2; 1.5 units p50 0.45 s, p99 3.0 s, 6 in phase 2. Earlier, with context
parallelism and stage layouts (benchmarks/plan_latency.py --quick, 43 scenarios): 2.0 units,
worst 2.55 s (llama3-70b on 4,096 H100s, which propagation alone does not prove and the LP
proves in 0.47 s); 1.0: worst 1.50 s."""

EXPERT_FIRST_PHASE_DETERMINISTIC_S = 40.0
"""The propagation phase's budget where the model holds expert layouts (more than one ep value:
``--top``, the minimum-hardware queries and the diagnosis; a plan solves one dense part per ep,
expert_parts): the LP relaxation slows those proofs down, while propagation alone proves them.
benchmarks/moe_latency.py --whole-units 1.5 40 (Mixtral 8x7B / 8x22B, DBRX, DeepSeek-V3 on
256–4,096 H100s and 2,048 H800s; 2 cores, one run): every problem proven in either schedule; at
40 units 2.1–23 s, 52.6 s in all; at 1.5 units then the LP 4.3–48 s, 108 s in all. The
slowest, DeepSeek-V3 on 2,048 H800s under megatron-core, needs 32 units of propagation."""


GUIDED_PHASE_DETERMINISTIC_S = 0.8
"""Work budget of the guided phase (dense spaces): a search that decides tp, then pp, each from
its largest value down (constraints.SEARCH_ORDER) before CP-SAT's own heuristics. It proves the
README's main job and the 43 dense scenarios of benchmarks/plan_latency.py --quick in at most
0.34 units (the unguided search: 2 of them unproven in 5 units); one it does not prove goes on
to the unguided phase."""


@dataclass(frozen=True)
class Phase:
    """One CP-SAT run of a solve: guided or not, with the LP relaxation or not, within a work
    budget in deterministic units (None: the rest of the solve's budget)."""

    guided: bool
    linearization: int
    work_limit: float | None


def phases(experts: bool, lp_fallback: bool, first_phase_units: float | None) -> list[Phase]:
    """The runs of a solve, in order; each one after the first only if those before left the
    answer unproven. ``first_phase_units`` overrides the unguided propagation phase's budget."""
    if not lp_fallback:
        return [Phase(guided=False, linearization=0, work_limit=None)]
    budget = EXPERT_FIRST_PHASE_DETERMINISTIC_S if experts else FIRST_PHASE_DETERMINISTIC_S
    if first_phase_units is not None:
        budget = first_phase_units
    runs = [Phase(guided=False, linearization=0, work_limit=budget)]
    runs.append(Phase(guided=False, linearization=1, work_limit=None))
    if not experts:
        runs.insert(0, Phase(guided=True, linearization=0, work_limit=GUIDED_PHASE_DETERMINISTIC_S))
    return runs


def solve(
    built: PlanModel,
    time_limit_s: float | None = None,
    workers: int = DEFAULT_WORKERS,
    lp_fallback: bool = True,
    first_phase_units: float | None = None,
    work_limit: float | None = DEFAULT_WORK_UNITS,
) -> tuple[cp_model.CpSolver, int]:
    """``solve_within`` a budget of ``work_limit`` deterministic units (DEFAULT_WORK_UNITS)
    and, if set, ``time_limit_s`` wall-clock seconds; the run holding the answer, its status."""
    solved = solve_within(
        built, Budget.of(work_limit, time_limit_s), workers, lp_fallback, first_phase_units
    )
    return solved.solver, solved.status


def solve_within(
    built: PlanModel,
    budget: Budget,
    workers: int = DEFAULT_WORKERS,
    lp_fallback: bool = True,
    first_phase_units: float | None = None,
) -> Solved:
    """Solve with fixed seed; one worker by default (deterministic), in phases (``phases``):
    each later one runs only if those before left the answer unproven, hinted with the best
    solution so far, within what is left of ``budget`` (each run charged to it); the best
    answer found is returned, with the limit that stopped it if unproven.

    Every phase skips presolve, probing and SAT inprocessing: on these models (small,
    element-table heavy) propagation proves optimality, and presolve expands the element
    tables into thousands of Booleans (2.5 s of a 3.4 s solve for a gpt3-175b problem on a
    perturbed GB200). A dense space (one ep) is first searched guided (pp, then tp, largest
    first; GUIDED_PHASE_DETERMINISTIC_S). Then CP-SAT's own search without the LP relaxation,
    for FIRST_PHASE_DETERMINISTIC_S of work (EXPERT_FIRST_PHASE_DETERMINISTIC_S with expert
    parallelism in the space). Last, with the LP relaxation (linearization level 1) for the
    rest of the budget. Propagation alone can find no useful bound on some problems
    (mt-7t on the poster's system, 16,384 GPUs, bf16 gradients: gap 100 % after 60 s) that the
    LP proves in 0.15 s, while the LP always on slows others down.

    Guided first, with the tables merged by their knobs (Variables.add_tables), against neither
    (2 cores, one run): benchmarks/plan_latency.py --quick median of medians 0.27 → 0.17 s,
    the dense scenarios' worst 0.68 → 0.49 s; benchmarks/latency_battery.py --quick p50 0.23
    → 0.15 s, p99 4.6 → 2.3 s, total 48 → 33 s; the README's main job 0.45 → 0.35 s (0.25 s
    guided over separate tables, which the other benchmarks ran slower with). Without presolve
    (earlier, benchmarks/latency_battery.py, 300 random instances, seed 2, and the
    multi-trillion study's 96): presolve on, LP off: 99.7 % proven, p99 0.61 s, max 10 s (the
    limit); presolve on, two phases: 100 %, p99 0.62 s, max 3.4 s; presolve off, two phases:
    100 %, p50 0.029 s, p99 0.16 s, max 0.89 s.

    Minimum-hardware objectives (a GPU count, a capacity, a grid level) take longer than the
    propagation phase without being stuck, and the LP does not speed them up: they solve in
    one unguided phase, ``lp_fallback=False`` (benchmarks/min_hardware_latency.py: gpt3-175b
    fewest GPUs 4.5 s in one phase, 9.3 s in two)."""
    experts = len(built.variables.domains["ep"]) > 1
    best: Solved | None = None
    spent = 0.0
    for number, phase in enumerate(phases(experts, lp_fallback, first_phase_units)):
        if number and budget.exhausted():
            break
        hinted = best is not None and best.status == cp_model.FEASIBLE
        if hinted:
            _hint(built, best.solver)
        solver, status, stopped_by = _run(built, budget, workers, phase)
        spent += solver.deterministic_time
        if hinted:
            built.model.ClearHints()
        if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            return Solved(solver, status, None, spent)
        if best is None or _better(solver, status, best.solver, best.status):
            best = Solved(solver, status, stopped_by, spent)
        best.stopped_by = stopped_by
    assert best is not None
    best.work_units = spent
    return best


@dataclass
class PartsSolved:
    """The outcome of solving a space in parts (solve_parts): the part holding the best answer
    (or, with none, the last part solved), the overall status and objective bound, and what the
    parts' CP-SAT models held together."""

    built: PlanModel
    solver: cp_model.CpSolver
    status: int
    bound: float
    """A lower bound on the objective over the whole space: the best answer's objective when
    proven optimal."""
    models: int
    """CP-SAT models built and solved (fewer than ``parts`` when the budget ran out)."""
    parts: int
    build_s: float
    variables: int
    constraints: int
    table_entries: int
    stopped_by: StoppedBy | None = None
    """The limit that left the answer unproven (None when proven optimal or infeasible)."""
    work_units: float = 0.0
    """Deterministic work the parts' solves spent."""


def expert_parts(space: SearchSpace) -> list[SearchSpace]:
    """The space split by expert-parallel size, the largest first; one part where ep has one
    value or is pinned (the search space adds a pinned value its rules refuse to the domain, so
    that part is infeasible, and the diagnosis names the conflict).

    Why split: the tables of a space with several ep values vary along ep and its expert TP, and
    CP-SAT's search over them needs a quarter of a million literals; each part is a dense
    space (one ep), whose tables hold a ninth of the rows and are searched guided (``phases``).
    DeepSeek-V3 on 2,048 H800s under megatron-core: the whole space 25.7 s, its nine parts
    3.8 s; largest ep first, because the best answer usually shards the experts widely and the
    parts after it are then refuted by its objective in 0.1-0.4 s each
    (benchmarks/moe_latency.py)."""
    if len(space.domains["ep"]) == 1:
        return [space]
    # A pin's family allows no other value (the domain holds the pin).
    values = (space.pins["ep"],) if "ep" in space.pins else space.domains["ep"]
    return [
        dataclasses.replace(space, domains={**space.domains, "ep": (value,)})
        for value in sorted(values, reverse=True)
    ]


def solve_parts(
    build: Callable[[SearchSpace], PlanModel],
    parts: list[SearchSpace],
    time_limit_s: float | None = None,
    workers: int = DEFAULT_WORKERS,
    work_limit: float | None = DEFAULT_WORK_UNITS,
    budget: Budget | None = None,
) -> PartsSolved:
    """Minimise the step objective over the union of ``parts``: each part's model (``build``)
    is solved in turn (``solve_within``) within what is left of ``budget`` (default:
    ``work_limit`` units and ``time_limit_s`` seconds), after the first found an answer with
    the constraint that its objective beat the best so far, so a part that cannot is refuted
    (infeasible) rather than searched to its own optimum. Every part's objective is the same
    function (same time unit, same tie-break weight: the parts differ in ep only, which neither
    depends on), so the answers compare. The whole is proven optimal when every part was
    solved or refuted, infeasible when every part was infeasible without a bound on it; ties
    between parts go to the first, the larger ep."""
    budget = budget or Budget.of(work_limit, time_limit_s)
    best: tuple[PlanModel, cp_model.CpSolver] | None = None
    last: tuple[PlanModel, cp_model.CpSolver] | None = None
    open_bounds: list[float] = []
    """Lower bounds of the parts not proven or refuted (0 for a part never started)."""
    stopped_by: StoppedBy | None = None
    models = variables = constraints = entries = 0
    build_s = work_units = 0.0
    for part in parts:
        if models and budget.exhausted():
            stopped_by = budget.exhausted()
            open_bounds.append(0.0)
            continue
        building = time.perf_counter()
        built = build(part)
        if best is not None:
            built.model.Add(built.objective() <= int(best[1].ObjectiveValue()) - 1)
        build_s += time.perf_counter() - building
        proto = built.model.Proto()
        models += 1
        variables += len(proto.variables)
        constraints += len(proto.constraints)
        entries += built.variables.tabulated
        solved = solve_within(built, budget, workers)
        work_units += solved.work_units
        last = built, solved.solver
        if solved.status in SOLVED:
            best = built, solved.solver
        if solved.status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            open_bounds.append(solved.solver.BestObjectiveBound())
            stopped_by = solved.stopped_by
    assert last is not None
    if best is None:
        built, solver = last
        status = cp_model.UNKNOWN if open_bounds else cp_model.INFEASIBLE
        bound = 0.0
    else:
        built, solver = best
        status = cp_model.FEASIBLE if open_bounds else cp_model.OPTIMAL
        bound = min([solver.ObjectiveValue(), *open_bounds])
    return PartsSolved(
        built=built,
        solver=solver,
        status=status,
        bound=bound,
        models=models,
        parts=len(parts),
        build_s=build_s,
        variables=variables,
        constraints=constraints,
        table_entries=entries,
        stopped_by=stopped_by if open_bounds else None,
        work_units=work_units,
    )


def _better(
    solver: cp_model.CpSolver, status: int, other: cp_model.CpSolver, other_status: int
) -> bool:
    """Whether a run's answer beats another's: a solution over none, a lower objective."""
    if status != cp_model.FEASIBLE:
        return False
    return other_status != cp_model.FEASIBLE or solver.ObjectiveValue() < other.ObjectiveValue()


def _run(
    built: PlanModel, budget: Budget, workers: int, phase: Phase
) -> tuple[cp_model.CpSolver, int, StoppedBy]:
    """One CP-SAT run of ``phase`` within ``budget`` (charged with its work); guided: first
    down the model's search order (constraints.add_search_order), then CP-SAT's heuristics.
    Returns the solver, its status and the limit that ends the run if it is not proven (the
    wall clock where the run reached the time left, else its work limit)."""
    solver = cp_model.CpSolver()
    parameters = solver.parameters
    units = [u for u in (phase.work_limit, budget.units_left()) if u is not None]
    if units:
        parameters.max_deterministic_time = min(units)
    seconds_left = budget.seconds_left()
    if seconds_left is not None:
        parameters.max_time_in_seconds = seconds_left
    parameters.num_workers = workers
    parameters.random_seed = DEFAULT_SEED
    parameters.cp_model_presolve = False
    parameters.cp_model_probing_level = 0
    parameters.use_sat_inprocessing = False
    parameters.linearization_level = phase.linearization
    if phase.guided:
        parameters.search_branching = cp_model.SatParameters.PARTIAL_FIXED_SEARCH
    status = solver.Solve(built.model)
    if status == cp_model.MODEL_INVALID:
        # Input ranges (planner.specs.limits) keep every coefficient inside 64 bits; reaching this
        # is a bug, reported as one line rather than as a silent "unknown".
        raise InternalError(f"the CP-SAT model is invalid: {built.model.Validate()}")
    budget.charge(solver.deterministic_time)
    timed_out = seconds_left is not None and solver.wall_time >= seconds_left
    return solver, status, "time limit" if timed_out else "work limit"


def _hint(built: PlanModel, solver: cp_model.CpSolver) -> None:
    """Hint every variable with its value in the solver's best solution."""
    model = built.model
    model.ClearHints()
    for index in range(len(model.Proto().variables)):
        variable = model.GetIntVarFromProtoIndex(index)
        model.AddHint(variable, solver.Value(variable))


def decode(built: PlanModel, solver: cp_model.CpSolver) -> Strategy:
    return strategy_from_values(built.variables.assignment(solver), built.variables.space)


def minimize_then_fix(
    built: PlanModel, quantity: cp_model.IntVar, budget: Budget
) -> tuple[int | None, bool, Solved]:
    """Minimise ``quantity``; then, with it held at its least value found, minimise the step
    time (so the strategy reported for a minimum is the fastest one that achieves it), both
    within ``budget``. Returns that value (None if none was found), whether it is proven
    minimal, and the last solve (the first one's when it found none: its status INFEASIBLE is
    then a proof that nothing fits, anything else says only that the budget ran out)."""
    built.model.Minimize(quantity)
    solved = solve_within(built, budget, lp_fallback=False)
    if solved.status not in SOLVED:
        return None, False, solved
    least = int(solved.solver.Value(quantity))
    built.model.Add(quantity <= least)
    built.minimize_step()
    return least, solved.status == cp_model.OPTIMAL, solve_within(built, budget)
