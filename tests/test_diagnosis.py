"""Crafted infeasible problems: the diagnosis names the right conflict, the conflict is
irreducible, and every suggested fix, applied, plans."""

from __future__ import annotations

import json

import pytest
from ortools.sat.python import cp_model

import hardware_catalog
import planner.queries.diagnosis_session as diagnosis_session
from constraints import build_plan_model
from constraints.target import PerformanceTarget
from planner.cost.context import CostContext
from planner.queries.plan import plan
from planner.queries.solving import solve
from planner.space.search_space import build_search_space
from planner.specs import JobSpec, SystemSpec


def _offload_system(capacity_gib: float, bandwidth_gbps: float) -> SystemSpec:
    base = hardware_catalog.load_system("h100-offload-512g")
    tier = base.memory_tiers[1].model_copy(
        update={"capacity_gib": capacity_gib, "bandwidth_gbps": bandwidth_gbps}
    )
    return base.model_copy(update={"memory_tiers": (base.memory_tiers[0], tier)})


A100 = hardware_catalog.load_system("dgx-a100-80g")
HBM_ONLY_A100 = A100.model_copy(update={"memory_tiers": A100.memory_tiers[:1]})
"""dgx-a100-80g without its host-memory tier: what does not fit in HBM does not fit."""
CAPPED_A100 = HBM_ONLY_A100.model_copy(update={"max_gpus": 128})

# name: (model, system, gpus, global batch, pins, target, families the conflict must contain)
SCENARIOS = {
    "memory": ("megatron-22b", "dgx-a100-40g", 8, 8, {}, None, {"hbm"}),
    "batch too small for the GPU count": (
        "gpt3-1.3b",
        "dgx-h100",
        256,
        1,
        {},
        None,
        {"factorization", "placement"},
    ),
    "tp pinned past the NVLink domain": (
        "llama3-70b",
        "dgx-h100",
        64,
        512,
        {"tp": 16},
        None,
        {"pin:tp"},
    ),
    "tp pinned not dividing the heads": (
        "gpt3-175b",
        "dgx-h100",
        1024,
        1536,
        {"tp": 5},
        None,
        {"pin:tp"},
    ),
    "pp pinned not dividing the layers": (
        "gpt3-175b",
        "dgx-h100",
        1024,
        1536,
        {"pp": 7},
        None,
        {"pin:pp"},
    ),
    "contradictory pins": (
        "gpt3-13b",
        "dgx-h100",
        64,
        256,
        {"tp": 8, "pp": 8, "dp": 2},
        None,
        {"pin:dp"},
    ),
    "offload tier too small": (
        "megatron-1t",
        _offload_system(16, 100),
        64,
        512,
        {},
        None,
        {"hbm", "offload1"},
    ),
    "offload tier too slow for the target": (
        "megatron-1t",
        _offload_system(512, 1),
        64,
        512,
        {},
        PerformanceTarget(max_step_s=400),
        {"hbm", "target"},
    ),
    "model too large for any GPU count of the system": (
        "megatron-1t",
        CAPPED_A100,
        64,
        512,
        {},
        None,
        {"hbm"},
    ),
    "micro-batch pinned too large": (
        "gpt3-13b",
        "dgx-a100-40g",
        8,
        64,
        {"micro_batch": 64, "recompute": 0},
        None,
        {"hbm", "pin:micro_batch"},
    ),
    "pp pin forcing TP across nodes": (
        "gpt3-1.3b",
        "dgx-h100",
        32,
        7,
        {"pp": 1},
        None,
        {"pin:pp", "placement"},
    ),
    "interleave needs more micro-batches": (
        "gpt3-1.3b",
        "dgx-h100",
        8,
        2,
        {"pp": 4, "interleave": 2},
        None,
        {"pin:interleave", "divisibility"},
    ),
    "ZeRO pinned off with no room": (
        "llama3-70b",
        "dgx-h100",
        64,
        512,
        {"zero_stage": 0, "recompute": 0, "pp": 1},
        None,
        {"hbm", "pin:zero_stage"},
    ),
    "unreachable MFU": (
        "gpt3-13b",
        "dgx-h100",
        64,
        256,
        {},
        PerformanceTarget(min_mfu=0.9),
        {"target"},
    ),
    "offload pinned on a system without a tier": (
        "gpt3-13b",
        "dgx-h100",
        64,
        256,
        {"offload_weights": 1},
        None,
        {"pin:offload_weights"},
    ),
}


def _system(system: str | SystemSpec) -> SystemSpec:
    return system if isinstance(system, SystemSpec) else hardware_catalog.load_system(system)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_diagnosis_names_an_irreducible_conflict_and_verified_fixes(name: str) -> None:
    model_name, system_name, gpus, batch, pins, target, expected = SCENARIOS[name]
    model = hardware_catalog.load_model(model_name)
    system = _system(system_name)
    job = JobSpec(global_batch=batch)
    result = plan(model, system, job, gpus, pins=pins, target=target)
    assert result.status == "infeasible" and result.diagnosis is not None
    families = {c.family for c in result.diagnosis.conflicts}
    assert expected <= families, families
    assert all(c.detail for c in result.diagnosis.conflicts)
    if not any(f.startswith("pin:") for f in families) or len(families) > 1:
        _assert_irreducible(model, system, job, gpus, pins, target, families)
    for fix in result.diagnosis.relaxations:
        assert fix.verified, fix.change
        assert fix.strategy is not None and fix.step_time_s is not None


def _assert_irreducible(model, system, job, gpus, pins, target, families: set[str]) -> None:
    """With only the conflict's families on, nothing fits; without any one of them, a
    strategy does."""
    ctx = CostContext(model, system, job)
    space = build_search_space(model, system, job, gpus, pins, prune=False)
    probe = build_plan_model(ctx, space, assumptions=True, target=target)
    everything = frozenset(probe.variables.families)

    def status(on: set[str]) -> int:
        built = build_plan_model(ctx, space, dropped=everything - on, target=target)
        built.model.ClearObjective()
        return solve(built, 30.0)[1]

    assert status(families) == cp_model.INFEASIBLE
    for member in families:
        assert status(families - {member}) in (cp_model.OPTIMAL, cp_model.FEASIBLE), member


def test_memory_fixes_carry_the_numbers() -> None:
    model, system = "megatron-1t", HBM_ONLY_A100
    result = plan(model, system, JobSpec(global_batch=512), 64)
    diagnosis = result.diagnosis
    hbm = next(c for c in diagnosis.conflicts if c.family == "hbm")
    assert hbm.value is not None and hbm.value > 80 and hbm.strategy is not None
    fixes = {fix.quantity: fix for fix in diagnosis.relaxations}
    assert {"gpus", "hbm_gib", "offload_gib"} <= set(fixes)
    assert fixes["gpus"].value > 64 and fixes["gpus"].value % 8 == 0
    # The fix applied by hand plans too, and one GPU-node fewer does not.
    fewest = int(fixes["gpus"].value)
    assert plan(model, system, JobSpec(global_batch=512), fewest).strategy
    assert (
        plan(model, system, JobSpec(global_batch=512), fewest - 8, diagnose=False).strategy is None
    )
    assert fixes["hbm_gib"].value >= hbm.value


def test_evaluate_names_the_overflowing_tier() -> None:
    from planner import Strategy, evaluate

    estimate = evaluate(
        "gpt3-175b", "dgx-a100-80g", JobSpec(global_batch=8), Strategy(tp=8, dp=1, pp=1)
    )
    assert not estimate.fits
    assert any("HBM" in line and "over by" in line for line in estimate.overflows)


MEGATRON_16 = ("megatron-1t", "dgx-a100-80g", JobSpec(global_batch=64), 16)
"""Issue 40: on a busy machine a wall-clock limit cut this diagnosis's fewest-GPUs search short,
and it reported "no GPU count fits"; on a quiet one it offered 64 GPUs."""


def test_the_megatron_1t_diagnosis_offers_a_verified_and_proven_gpu_count() -> None:
    """The GPU count comes first among the fixes, verified by a plan at that count, and is
    proven least: every whole-node count below it (but the problem's own) plans infeasible."""
    model, system, job, gpus = MEGATRON_16
    diagnosis = plan(model, system, job, gpus).diagnosis
    assert diagnosis.complete and diagnosis.stopped_by is None
    fix = diagnosis.relaxations[0]
    assert fix.quantity == "gpus" and fix.verified and "(the fewest that fit)" in fix.change
    fewest = int(fix.value)
    factorization = next(c for c in diagnosis.conflicts if c.family == "factorization")
    assert factorization.value == fewest and "the fewest that fit" in factorization.detail
    again = plan(model, system, job, fewest, diagnose=False)
    assert again.estimate.step_time_s == pytest.approx(fix.step_time_s)
    for count in range(8, fewest, 8):
        assert plan(model, system, job, count, diagnose=False).status == "infeasible", count


PROOF_PHRASES = ("no GPU count fits", "fits even", "fits even without")


@pytest.mark.parametrize("work_limit", [0.04, 0.08, 0.3])
def test_a_diagnosis_cut_short_by_its_work_limit_claims_no_proof(work_limit: float) -> None:
    """A tiny work limit runs out during the diagnosis: it says so (complete false, stopped by
    the work limit), and no conflict claims that nothing fits."""
    model, system, job, gpus = MEGATRON_16
    result = plan(model, system, job, gpus, work_limit=work_limit)
    diagnosis = result.diagnosis
    assert result.status == "infeasible"  # the plan's own solve is a proof (0.026 units)
    assert not diagnosis.complete and diagnosis.stopped_by == "work limit"
    assert result.solver.work_units <= work_limit + 0.01  # CP-SAT checks its limit in steps
    for conflict in diagnosis.conflicts:
        assert not any(phrase in conflict.detail for phrase in PROOF_PHRASES), conflict.detail
    for fix in diagnosis.relaxations:
        assert fix.verified == (fix.strategy is not None)


def test_a_fewest_gpu_search_out_of_work_says_none_found_not_none_fits(monkeypatch) -> None:
    """The fewest-GPUs search's own cap spent at once: "no GPU count found within the work
    limit", never "no GPU count fits", and no GPU fix offered."""
    monkeypatch.setattr(diagnosis_session, "FEWEST_GPUS_WORK_UNITS", 1e-4)
    model, system, job, gpus = MEGATRON_16
    diagnosis = plan(model, system, job, gpus).diagnosis
    factorization = next(c for c in diagnosis.conflicts if c.family == "factorization")
    assert factorization.detail == "16 GPUs; no GPU count found within the work limit"
    assert not diagnosis.complete and diagnosis.stopped_by == "work limit"
    assert "gpus" not in {fix.quantity for fix in diagnosis.relaxations}


def test_the_same_infeasible_problem_twice_gives_the_same_diagnosis() -> None:
    """Work limits, not the wall clock: the diagnosis (conflicts, numbers, fixes, strategies)
    is the same on every run."""
    model, system, job, gpus = ("gpt3-175b", "dgx-a100-80g", JobSpec(global_batch=64), 8)
    first, second = (plan(model, system, job, gpus).diagnosis for _ in range(2))
    assert first.model_dump(exclude={"wall_time_s"}) == second.model_dump(exclude={"wall_time_s"})
    assert first.complete and any(fix.quantity == "gpus" for fix in first.relaxations)


@pytest.mark.parametrize("as_json", [False, True])
def test_the_cli_says_which_limit_cut_the_diagnosis_short(capsys, as_json: bool) -> None:
    """Infeasible is exit 3 whether or not the diagnosis finished; one cut short by the work
    limit names it, with the value set, in the table and in --json."""
    from planner.cli import main

    argv = ["plan", "--model", "megatron-1t", "--system", "dgx-a100-80g", "--gpus", "16"]
    argv += ["--global-batch", "64", "--work-limit", "0.05"]
    assert main([*argv, "--json"] if as_json else argv) == 3
    out = capsys.readouterr().out
    if as_json:
        payload = json.loads(out)
        assert payload["status"] == "infeasible" and payload["solver"]["stopped_by"] is None
        diagnosis = payload["diagnosis"]
        assert (diagnosis["complete"], diagnosis["stopped_by"]) == (False, "work limit")
    else:
        text = " ".join(out.split())
        assert "The work limit (0.05 units) ran out during the diagnosis" in text
        assert "raise --work-limit" in text and "no GPU count fits" not in text
