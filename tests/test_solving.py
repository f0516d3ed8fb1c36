"""The solve's phases (planner.solving): their order per kind of space, and that a phase cut
short hands its best solution on and changes no answer."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

import planner.solving as solving
from constraints import build_plan_model
from planner.api import as_model, as_system
from planner.cost.context import CostContext
from planner.search_space import build_search_space
from planner.solving import Phase, phases, solve
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
    model, system = as_model("gpt3-175b"), as_system("dgx-a100-80g")
    job = JobSpec(global_batch=1536)
    ctx = CostContext(model, system, job)
    return build_plan_model(ctx, build_search_space(model, system, job, 1024, {}))


@pytest.mark.parametrize("cut", ["guided", "guided and unguided"])
def test_phases_cut_short_hand_on_and_change_no_answer(cut, monkeypatch) -> None:
    """The README's main job: its guided phase proves the optimum; with that phase's budget
    (and the next's) cut to almost nothing, the later phases reach the same optimum."""
    solver, status = solve(_built())
    assert status == cp_model.OPTIMAL
    ran: list[Phase] = []
    run = solving._run

    def recorded(built, time_limit_s, workers, phase):
        ran.append(phase)
        return run(built, time_limit_s, workers, phase)

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
    assert len(knob_sets) == len(set(knob_sets)) == 14
    assert columns > len(knob_sets)  # several tables per constraint
    assert not built.variables.pending
