"""The solve's phases (planner.queries.solving): their order per kind of space, and that a phase cut
short hands its best solution on and changes no answer."""

from __future__ import annotations

import json

import pytest
from ortools.sat.python import cp_model

import planner.queries.solving as solving
from constraints import build_plan_model
from planner.cost.context import CostContext
from planner.cost.knobs import Knobs
from planner.cost.step import evaluate_terms
from planner.queries.evaluate import as_model, as_system
from planner.queries.solving import Phase, expert_parts, phases, solve, solve_parts
from planner.space.search_space import build_search_space, strategy_from_values
from planner.specs import JobSpec


def test_dense_spaces_are_searched_guided_first_then_unguided_then_with_the_lp() -> None:
    assert phases(experts=False, lp_fallback=True, first_phase_units=None) == [
        Phase(guided=True, linearization=0, work_limit=solving.GUIDED_PHASE_DETERMINISTIC_S),
        Phase(guided=False, linearization=0, work_limit=solving.FIRST_PHASE_DETERMINISTIC_S),
        Phase(guided=False, linearization=1, work_limit=None),
    ]


def test_expert_spaces_skip_the_guided_phase_and_one_phase_solves_stay_one() -> None:
    assert phases(experts=True, lp_fallback=True, first_phase_units=None) == [
        Phase(guided=False, linearization=0, work_limit=solving.EXPERT_FIRST_PHASE_DETERMINISTIC_S),
        Phase(guided=False, linearization=1, work_limit=None),
    ]
    assert phases(experts=True, lp_fallback=True, first_phase_units=2.0)[0].work_limit == 2.0
    assert phases(experts=False, lp_fallback=False, first_phase_units=None) == [
        Phase(guided=False, linearization=0, work_limit=None)
    ]


def _built():
    return build_plan_model(*_main_job())


def _main_job():
    model, system = as_model("gpt3-175b"), as_system("dgx-a100-80g")
    job = JobSpec(global_batch=1536)
    return CostContext(model, system, job), build_search_space(model, system, job, 1024, {})


class _Solutions(cp_model.CpSolverSolutionCallback):
    """Every solution's knob assignment and the value of one variable in it."""

    def __init__(self, built, variable) -> None:
        super().__init__()
        self.built, self.variable, self.found = built, variable, []

    def on_solution_callback(self) -> None:
        chosen = self.built.variables.assignment(self)  # reads Value() as from a solver
        self.found.append((chosen, self.Value(self.variable)))


def test_every_solution_carries_its_exposed_dp_traffic_not_an_upper_bound() -> None:
    """The DP exposure is an equality (constraints.objective._exposed_once): in every solution
    the search passes through, not only the optimum, it is the cost model's exposed DP time of
    that solution's strategy, to the tables' rounding."""
    ctx, space = _main_job()
    built = build_plan_model(ctx, space)
    recorder = _Solutions(built, built.steps.dp_exposed[0])
    solver = cp_model.CpSolver()
    parameters = solver.parameters  # the guided phase's (planner.queries.solving._run)
    parameters.num_workers = 1
    parameters.cp_model_presolve = False
    parameters.linearization_level = 0
    parameters.search_branching = cp_model.SatParameters.PARTIAL_FIXED_SEARCH
    solver.Solve(built.model, recorder)
    assert len(recorder.found) > 5
    for chosen, exposed_units in recorder.found:
        strategy = strategy_from_values(chosen, space)
        evaluated_s = float(evaluate_terms(ctx, Knobs.from_strategy(strategy)).dp_comm_s)
        assert built.step_s(exposed_units) == pytest.approx(
            evaluated_s, rel=1e-3, abs=50 * built.unit_s
        )


@pytest.mark.parametrize("cut", ["guided", "guided and unguided"])
def test_phases_cut_short_hand_on_and_change_no_answer(cut, monkeypatch) -> None:
    """The README's main job: its guided phase proves the optimum; with that phase's budget
    (and the next's) cut to almost nothing, the later phases reach the same optimum."""
    solver, status = solve(_built())
    assert status == cp_model.OPTIMAL
    ran: list[Phase] = []
    run = solving._run

    def recorded(built, budget, workers, phase):
        ran.append(phase)
        return run(built, budget, workers, phase)

    monkeypatch.setattr(solving, "_run", recorded)
    monkeypatch.setattr(solving, "GUIDED_PHASE_DETERMINISTIC_S", 0.01)
    if cut == "guided and unguided":
        monkeypatch.setattr(solving, "FIRST_PHASE_DETERMINISTIC_S", 0.01)
    later, later_status = solve(_built())
    assert later_status == cp_model.OPTIMAL
    assert later.ObjectiveValue() == solver.ObjectiveValue()
    assert [phase.guided for phase in ran][:2] == [True, False]
    assert len(ran) == (2 if cut == "guided" else 3)


def test_tables_over_the_same_knobs_share_one_constraint() -> None:
    """Variables.add_tables: one allowed-assignments constraint per set of knobs, its rows the
    knobs' positions with every table's values over them as columns."""
    built = _built()
    proto = built.model.Proto()
    positions = {var.Index() for var in built.variables.positions.values()}
    knob_sets = []
    columns = 0
    for constraint in proto.constraints:
        if constraint.has_table():
            variables = [expr.vars[0] for expr in constraint.table.exprs]
            knobs = frozenset(v for v in variables if v in positions)
            assert set(variables[: len(knobs)]) == knobs  # the knobs' columns first
            knob_sets.append(knobs)
            columns += len(variables) - len(knobs)
    # 16 knob sets: under the multi-NIC ring the DP tables vary with the placement too (a DP
    # group's members per node differ between the rank orders), 14 under the one-NIC ring; the
    # interleaved schedule's per-chunk steps (tables.chunk_overhead) add (tp, cp, micro_batch,
    # interleave) and its per-step multiple. It was 18 while megatron-core's ZeRO-3 gathered
    # again for a full recompute: its DP tables no longer vary with recompute (Megatron-FSDP
    # recomputes inside the gathered layer), so two knob sets with recompute are gone.
    assert len(knob_sets) == len(set(knob_sets)) == 16
    assert columns > len(knob_sets)  # several tables per constraint
    assert not built.variables.pending


def _moe_space(pins: dict[str, int] | None = None):
    model, system = as_model("mixtral-8x7b"), as_system("dgx-h100")
    job = JobSpec(global_batch=256)
    ctx = CostContext(model, system, job)
    return ctx, build_search_space(model, system, job, 64, pins or {})


def test_an_expert_space_splits_by_ep_largest_first() -> None:
    _, space = _moe_space()
    assert space.domains["ep"] == (1, 2, 4, 8)
    parts = expert_parts(space)
    assert [part.domains["ep"] for part in parts] == [(8,), (4,), (2,), (1,)]
    for part in parts:
        assert {k: v for k, v in part.domains.items() if k != "ep"} == {
            k: v for k, v in space.domains.items() if k != "ep"
        }
    assert expert_parts(_space_of("gpt3-175b")) == [_space_of("gpt3-175b")]


def test_a_pinned_ep_is_one_part_even_where_the_rules_refuse_it() -> None:
    for ep in (4, 3):
        _, pinned = _moe_space({"ep": ep})
        assert ep in pinned.domains["ep"] and len(pinned.domains["ep"]) > 1
        assert [part.domains["ep"] for part in expert_parts(pinned)] == [(ep,)]


def _space_of(name: str):
    model, system = as_model(name), as_system("dgx-a100-80g")
    job = JobSpec(global_batch=1536)
    return build_search_space(model, system, job, 1024, {})


def test_the_parts_prove_the_whole_spaces_optimum() -> None:
    """The parts, each after the first held below the best so far, reach the objective of one
    model over the whole space; the later parts that cannot beat it are refuted."""
    ctx, space = _moe_space()
    whole, status = solve(build_plan_model(ctx, space))
    assert status == cp_model.OPTIMAL
    parts = expert_parts(space)
    solved = solve_parts(lambda part: build_plan_model(ctx, part), parts)
    assert solved.status == cp_model.OPTIMAL
    assert solved.solver.ObjectiveValue() == whole.ObjectiveValue() == solved.bound
    assert solved.models == solved.parts == len(parts) == 4
    assert solved.table_entries > 0 and solved.variables > 0 and solved.constraints > 0


class _Ended:
    """A stand-in for a CP-SAT run's answer: its objective and bound."""

    def __init__(self, objective: float, bound: float) -> None:
        self.objective, self.bound = objective, bound

    def ObjectiveValue(self) -> float:  # noqa: N802 (CP-SAT's name)
        return self.objective

    def BestObjectiveBound(self) -> float:  # noqa: N802
        return self.bound


OK, FOUND, NONE, UNKNOWN = (
    cp_model.OPTIMAL,
    cp_model.FEASIBLE,
    cp_model.INFEASIBLE,
    cp_model.UNKNOWN,
)


@pytest.mark.parametrize(
    ("runs", "status", "bound", "best"),
    [
        ([(OK, 10, 10), (NONE, 0, 0), (NONE, 0, 0)], OK, 10, 0),
        ([(NONE, 0, 0), (OK, 12, 12), (OK, 9, 9)], OK, 9, 2),
        ([(OK, 10, 10), (UNKNOWN, 0, 7), (NONE, 0, 0)], FOUND, 7, 0),
        ([(FOUND, 10, 8), (NONE, 0, 0), (NONE, 0, 0)], FOUND, 8, 0),
        ([(NONE, 0, 0), (NONE, 0, 0), (NONE, 0, 0)], NONE, 0, 2),
        ([(NONE, 0, 0), (UNKNOWN, 0, 5), (NONE, 0, 0)], UNKNOWN, 0, 2),
    ],
    ids=["first-best", "last-best", "one-open", "first-unproven", "infeasible", "unknown"],
)
def test_the_parts_statuses_combine(runs, status, bound, best, monkeypatch) -> None:
    """Optimal only when every part was solved or refuted; the bound the least of the open
    parts' bounds and the best objective; infeasible only when every part was; each part after
    an answer must beat it."""
    ctx, space = _moe_space()
    parts = expert_parts(space)[:3]
    answers = iter(runs)
    built_parts = []

    def build(part):
        built_parts.append(build_plan_model(ctx, part))
        return built_parts[-1]

    def ended(built, budget, workers):
        run_status, objective, run_bound = next(answers)
        stopped_by = None if run_status in (OK, NONE) else "work limit"
        return solving.Solved(_Ended(objective, run_bound), run_status, stopped_by, 1.0)

    monkeypatch.setattr(solving, "solve_within", ended)
    solved = solve_parts(build, parts)
    assert (solved.status, solved.bound, solved.models) == (status, bound, 3)
    assert solved.built is built_parts[best]
    found = [number for number, (run, _, _) in enumerate(runs) if run in (OK, FOUND)]
    for number, built in enumerate(built_parts):
        cutoff = bool(found) and number > found[0]
        proto = built.model.Proto()
        plain = len(build_plan_model(ctx, parts[number]).model.Proto().constraints)
        assert len(proto.constraints) == plain + cutoff


@pytest.mark.parametrize("limit", ["work limit", "time limit"])
def test_parts_left_when_the_budget_is_spent_are_not_started(limit, monkeypatch) -> None:
    """The first part spends the whole budget (its work, or the wall clock passing the
    deadline): the others are not started, and the answer is unproven, stopped by that limit."""
    ctx, space = _moe_space()
    now_s = [0.0]
    monkeypatch.setattr(solving.time, "perf_counter", lambda: now_s[0])
    budget = solving.Budget(work_units=4.0) if limit == "work limit" else solving.Budget(None, 1.0)

    def spend(built, budget, workers):
        budget.charge(4.0)
        now_s[0] = 5.0
        return solving.Solved(_Ended(10, 10), OK, None, 4.0)

    monkeypatch.setattr(solving, "solve_within", spend)
    build = lambda part: build_plan_model(ctx, part)  # noqa: E731
    solved = solve_parts(build, expert_parts(space), budget=budget)
    assert (solved.status, solved.bound, solved.models, solved.parts) == (FOUND, 0.0, 1, 4)
    assert solved.stopped_by == limit


MAIN_JOB = [
    "plan",
    "--model",
    "gpt3-175b",
    "--system",
    "dgx-a100-80g",
    "--gpus",
    "1024",
    "--global-batch",
    "1536",
]
"""The README's main job: proven optimal in about 0.5 deterministic units."""


def _cli(capsys, *argv: str) -> tuple[int, str]:
    from planner.cli import main

    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("limit", "code", "status", "stopped_by", "said"),
    [
        ([], 0, "optimal", None, "proven optimal"),
        (["--work-limit", "0.01"], 0, "feasible", "work limit", "the work limit (0.01 units)"),
        (["--work-limit", "0.001"], 4, "unknown", "work limit", "the work limit (0.001 units)"),
        (["--time-limit", "1e-6"], 4, "unknown", "time limit", "the time limit (1e-06 s)"),
    ],
    ids=["proven", "work-limited", "work-limited-none", "time-limited-none"],
)
def test_the_plan_says_which_limit_stopped_it(
    capsys, as_json, limit, code, status, stopped_by, said
) -> None:
    """The exit code, the status and the limit that stopped the search (with the value set),
    in the table and in --json; a time limit alone replaces the default work limit."""
    exit_code, out = _cli(capsys, *MAIN_JOB, *limit, *(["--json"] if as_json else []))
    assert exit_code == code
    if not as_json:
        assert said in " ".join(out.split())
        return
    solver = json.loads(out)["solver"]
    assert (solver["status"], solver["stopped_by"]) == (status, stopped_by)
    work_limit = float(limit[1]) if limit[:1] == ["--work-limit"] else None
    time_limit = float(limit[1]) if limit[:1] == ["--time-limit"] else None
    assert solver["work_limit"] == (work_limit or (None if time_limit else 60.0))
    assert solver["time_limit_s"] == time_limit
    assert 0 <= solver["work_units"] <= (work_limit or 60.0) + 0.01


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--work-limit", "0"], "--work-limit"),
        (["--work-limit", "-1"], "--work-limit"),
        (["--work-limit", "inf"], "--work-limit"),
        (["--time-limit", "0"], "--time-limit"),
    ],
)
def test_a_limit_out_of_range_is_one_line_and_exit_2(capsys, flags, message) -> None:
    from planner.cli import main

    assert main([*MAIN_JOB, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_plan_refuses_no_limit_at_all() -> None:
    from planner.errors import InputError
    from planner.queries.plan import plan

    with pytest.raises(InputError, match="--work-limit"):
        plan("gpt3-175b", "dgx-a100-80g", JobSpec(global_batch=1536), 1024, work_limit=None)


def test_the_same_input_twice_gives_the_same_answer_even_when_cut_short() -> None:
    """Deterministic work limits: a search cut short stops at the same point every time, so
    the same input gives the same strategy, status and objective."""
    from planner.queries.plan import plan

    job = JobSpec(global_batch=1536)
    runs = [plan("gpt3-175b", "dgx-a100-80g", job, 1024, work_limit=0.02) for _ in range(2)]
    assert runs[0].status == runs[1].status == "feasible"
    assert runs[0].strategy == runs[1].strategy
    assert runs[0].solver.objective_step_s == runs[1].solver.objective_step_s
    assert runs[0].solver.bound_step_s == runs[1].solver.bound_step_s


@pytest.mark.parametrize("as_json", [False, True])
def test_top_says_when_a_limit_cut_its_ranks_short(capsys, as_json) -> None:
    """--top 3 on the main job: all three ranks within the default limit; with 1 unit the
    budget runs out after the optimum's proof (since chunked DP exposure and its contention the
    proof takes about 0.63 units, the three ranks 1.63 together), and the report says which
    limit left fewer."""
    argv = [*MAIN_JOB, "--top", "3", *(["--json"] if as_json else [])]
    for limit, stopped_by in (([], None), (["--work-limit", "1"], "work limit")):
        exit_code, out = _cli(capsys, *argv, *limit)
        assert exit_code == 0
        if as_json:
            payload = json.loads(out)
            assert payload["status"] == "optimal"
            assert payload["solver"]["ranks_stopped_by"] == stopped_by
            assert (len(payload["alternatives"]) < 3) == (stopped_by is not None)
        else:
            text = " ".join(out.split())
            assert ("the work limit (1 unit) ran out before the rest" in text) == bool(limit)
