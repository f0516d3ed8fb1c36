"""Goodput in the plan (issue 35): the CLI's table and JSON, the catalog's reliability profiles,
min-hardware --max-days with failures, the least checkpoint bandwidth, the goodput's upper bound
the queries refute GPU counts with, the sweep's columns and the goodput plot, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import hardware_catalog
from planner.cli import main
from planner.cli.output import EXIT_INFEASIBLE
from planner.cost.context import CostContext
from planner.cost.goodput import estimate_goodput
from planner.cost.goodput_bounds import goodput_upper_bound, least_write_bandwidth
from planner.queries.evaluate import evaluate
from planner.queries.min_hardware import min_hardware
from planner.specs import JobSpec, Strategy
from planner.studies.plots.goodput import goodput_vs_gpus

LLAMA3 = [
    "--model",
    "llama3-405b",
    "--system",
    "dgx-h100",
    "--global-batch",
    "2048",
    "--seq-len",
    "8192",
    "--train-tokens",
    "15e12",
]
META_LAYOUT = [
    "--gpus",
    "16384",
    "--tp",
    "8",
    "--pp",
    "16",
    "--stage-layers",
    "7,8,...,8,7",
    "--sequence-parallel",
    "--zero-stage",
    "1",
    "--recompute",
    "full",
    "--recompute-layers",
    "1",
]
GOODPUT_KEYS = {
    "profile",
    "checkpoint_mode",
    "interval_formula",
    "gpus",
    "nodes",
    "failures_per_day",
    "failures_per_day_by_kind",
    "planned_interruptions_per_day",
    "job_mtbf_h",
    "checkpoint_gib_total",
    "checkpoint_gib_per_gpu",
    "checkpoint_write_s",
    "checkpoint_stall_s",
    "checkpoint_read_s",
    "restart_s",
    "interval_s",
    "interval_steps",
    "waste",
    "goodput",
    "goodput_exponential",
    "train_tokens",
    "ideal_days",
    "effective_days",
    "gpu_hours",
    "expected_failures",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_llama3_405b_on_16k_h100_reports_goodput_in_metas_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's command: Dubey et al. 2024 (Llama 3) §3.3.4, 419 unexpected interruptions in
    54 days on 16,384 H100 (7.76 a day) and > 90 % effective training time."""
    code, out, _ = run(capsys, "plan", *LLAMA3, "--gpus", "16384", "--json")
    assert code == 0
    estimate = json.loads(out)["estimate"]
    goodput, training = estimate["goodput"], estimate["training"]
    assert set(goodput) == GOODPUT_KEYS
    assert set(goodput["waste"]) == {"checkpoint", "lost_work", "restart", "planned"}
    assert set(goodput["failures_per_day_by_kind"]) == {"gpu", "node", "network", "software"}
    assert 7.0 <= goodput["failures_per_day"] <= 8.5
    assert 5.0e12 <= goodput["checkpoint_gib_total"] * 2**30 <= 6.0e12
    assert goodput["checkpoint_gib_per_gpu"] * 2**30 <= 4e9  # Meta: 1 MB to 4 GB per GPU
    assert 0 < goodput["interval_s"] <= 3600 and goodput["interval_steps"] >= 1
    assert 0.90 <= goodput["goodput"] < 1.0
    assert training["goodput"] == goodput["goodput"]
    assert training["effective_days"] == pytest.approx(training["days"] / goodput["goodput"])
    assert training["effective_gpu_hours"] == pytest.approx(
        training["gpu_hours"] / goodput["goodput"]
    )
    assert training["effective_cost_usd"] is None  # dgx-h100 has no price


def test_evaluate_metas_layout_prints_the_failures_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "evaluate", *LLAMA3, *META_LAYOUT)
    assert code == 0
    for text in (
        "Failures & checkpoints",
        "failures per day",
        "job MTBF",
        "checkpoint (sync)",
        "interval (daly)",
        "restart (of which read)",
        "goodput",
        "days: ideal → with failures",
    ):
        assert text in out, text
    code, out, _ = run(capsys, "evaluate", *LLAMA3, *META_LAYOUT, "--json")
    goodput = json.loads(out)["estimate"]["goodput"]
    assert goodput["nodes"] == 2048 and 0.9 <= goodput["goodput"] < 1


@pytest.mark.parametrize("mode", ["sync", "async", "in-memory"])
def test_flags_reach_the_estimate(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    argv = ["evaluate", *LLAMA3, *META_LAYOUT, "--json", "--checkpoint-mode", mode]
    code, out, _ = run(capsys, *argv, "--checkpoint-interval", "young")
    goodput = json.loads(out)["estimate"]["goodput"]
    assert code == 0 and goodput["checkpoint_mode"] == mode
    assert goodput["interval_formula"] == "young"
    job = json.loads(out)["job"]
    assert job["checkpoint_mode"] == mode and job["checkpoint_interval"] == "young"


def test_no_failures_gives_the_failure_free_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "evaluate", *LLAMA3, *META_LAYOUT, "--json", "--no-failures")
    estimate = json.loads(out)["estimate"]
    goodput, training = estimate["goodput"], estimate["training"]
    assert code == 0 and goodput["goodput"] == 1.0 and goodput["failures_per_day"] == 0
    assert goodput["job_mtbf_h"] is None and goodput["interval_s"] is None
    assert training["effective_days"] == pytest.approx(training["days"])
    assert goodput["checkpoint_gib_total"] > 0  # still sized


def test_without_a_token_budget_there_is_no_goodput(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in LLAMA3 if a not in ("--train-tokens", "15e12")]
    code, out, _ = run(capsys, "evaluate", *argv, *META_LAYOUT, "--json")
    estimate = json.loads(out)["estimate"]
    assert code == 0 and estimate["goodput"] is None and estimate["training"] is None


# -- min-hardware --------------------------------------------------------------------------


def test_max_days_counts_failures_and_the_answer_grows() -> None:
    """llama3-405b, 15T tokens in 56 days: 16,384 GPUs failure-free (pp 16 over Megatron's
    embedding and loss slots, 55.0 days; 55 days needed 22,016 once pipeline sends across nodes
    paid NCCL's per-pair channels), more with the h100-llama3 failures, proven minimal both
    ways, and the answer meets the deadline at its own goodput."""
    job = JobSpec(global_batch=2048, train_tokens=15e12)
    free = min_hardware(
        "llama3-405b", "dgx-h100", job.model_copy(update={"failures": False}), "gpus", max_days=56
    )
    failing = min_hardware("llama3-405b", "dgx-h100", job, "gpus", max_days=56)
    assert free.status == failing.status == "optimal"
    assert free.minimum.value == 16384
    assert failing.minimum.value > free.minimum.value
    assert failing.minimum.proven and "with failures" in failing.goal
    training = failing.minimum.estimate.training
    assert training.days <= 56 < training.days / training.goodput * 1.2
    assert training.effective_days <= 56
    assert free.minimum.estimate.training.effective_days == pytest.approx(
        free.minimum.estimate.training.days
    )
    # the failure-free answer misses the deadline once failures count
    at_free = evaluate("llama3-405b", "dgx-h100", job, free.minimum.strategy)
    assert at_free.training.effective_days > 56


def test_min_hardware_max_days_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["min-hardware", "--model", "llama3-405b", "--system", "dgx-h100"]
    argv += ["--global-batch", "2048", "--minimize", "gpus", "--train-tokens", "15e12"]
    code, out, _ = run(capsys, *argv, "--max-days", "55", "--json")
    data = json.loads(out)
    assert code == 0 and data["minimum"]["value"] == 26624 and data["minimum"]["proven"]
    goodput = data["minimum"]["estimate"]["goodput"]
    assert goodput["effective_days"] <= 55 and goodput["gpus"] == 26624
    assert "within 55 days with failures" in data["goal"]


def test_least_checkpoint_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["min-hardware", *LLAMA3, "--gpus", "16384", "--minimize", "checkpoint-bandwidth"]
    code, out, _ = run(capsys, *argv, "--min-goodput", "0.92", "--json")
    data = json.loads(out)
    minimum = data["minimum"]
    assert code == 0 and minimum["unit"] == "GB/s" and minimum["proven"]
    assert minimum["estimate"]["goodput"]["goodput"] >= 0.92
    assert minimum["below"]["value"] < minimum["value"] < 2000  # less than Tectonic's 2 TB/s
    code, out, _ = run(capsys, *argv, "--min-goodput", "0.995", "--json")
    data = json.loads(out)
    assert code == EXIT_INFEASIBLE and data["status"] == "infeasible"
    assert data["unreachable"]["goal"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--min-goodput" in err and len(err.strip().splitlines()) == 1


def test_least_write_bandwidth_is_the_threshold() -> None:
    """Just above the answer the goodput meets the target, 0.2 % below it does not."""
    model, system = (
        hardware_catalog.load_model("llama3-405b"),
        hardware_catalog.load_system("dgx-h100"),
    )
    job = JobSpec(global_batch=2048, seq_len=8192, train_tokens=15e12)
    strategy = Strategy(
        tp=8,
        pp=16,
        dp=128,
        sequence_parallel=True,
        zero_stage=1,
        stage_layers=(7,) + (8,) * 14 + (7,),
        recompute="full",
        recompute_layers=1,
    )
    ctx = CostContext(model, system, job)
    gbps, at = least_write_bandwidth(ctx, strategy, 10.0, 0.92)
    assert gbps is not None and at.goodput >= 0.92
    from planner.cost.goodput_bounds import with_aggregate_write

    below = estimate_goodput(
        ctx, strategy, 10.0, with_aggregate_write(ctx.reliability, gbps * 0.998)
    )
    assert below.goodput < 0.92


# -- the bound the queries refute with -----------------------------------------------------

BOUND_CASES = [
    Strategy(
        tp=8,
        pp=16,
        dp=128,
        sequence_parallel=True,
        zero_stage=1,
        stage_layers=(7,) + (8,) * 14 + (7,),
        recompute="full",
        recompute_layers=1,
    ),
    Strategy(
        tp=8,
        pp=16,
        dp=128,
        sequence_parallel=True,
        stage_layers=(7,) + (8,) * 14 + (7,),
        recompute="full",
    ),
    Strategy(
        tp=8, cp=8, pp=32, dp=8, sequence_parallel=True, zero_stage=1, stage_layers=(4,) * 31 + (2,)
    ),
    Strategy(tp=8, pp=9, dp=16, sequence_parallel=True, zero_stage=3, recompute="full"),
]


@pytest.mark.parametrize("strategy", BOUND_CASES, ids=lambda s: s.describe())
@pytest.mark.parametrize("mode", ["sync", "async", "in-memory"])
@pytest.mark.parametrize("fully_parallel", [True, False])
def test_the_goodput_bound_holds_for_every_strategy(
    strategy: Strategy, mode: str, fully_parallel: bool
) -> None:
    """goodput_upper_bound(N) ≥ the goodput of each strategy on N GPUs, in every mode and both
    write layouts, at step times from 0.5 s to 60 s (the interval's rounding)."""
    model, system = (
        hardware_catalog.load_model("llama3-405b"),
        hardware_catalog.load_system("dgx-h100"),
    )
    job = JobSpec(global_batch=2048, seq_len=8192, train_tokens=15e12, checkpoint_mode=mode)
    ctx = CostContext(model, system, job)
    profile = ctx.reliability
    storage = profile.storage.model_copy(update={"fully_parallel_save": fully_parallel})
    profile = profile.model_copy(update={"storage": storage})
    bound = goodput_upper_bound(ctx, strategy.gpus, profile)
    for step in (0.5, 3.0, 10.0, 60.0):
        assert estimate_goodput(ctx, strategy, step, profile).goodput <= bound + 1e-12


def test_the_bound_falls_with_the_gpu_count() -> None:
    ctx = CostContext(
        hardware_catalog.load_model("llama3-405b"),
        hardware_catalog.load_system("dgx-h100"),
        JobSpec(global_batch=2048),
    )
    bounds = [goodput_upper_bound(ctx, n) for n in (1024, 4096, 16384, 65536)]
    assert bounds == sorted(bounds, reverse=True) and bounds[0] < 1


# -- catalog, system and bad input ---------------------------------------------------------


def test_catalog_reliability_lists_and_shows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "reliability", "--json")
    profiles = json.loads(out)
    assert code == 0 and [p["name"] for p in profiles] == hardware_catalog.reliability_names()
    assert "h100-llama3" in hardware_catalog.reliability_names()
    code, out, _ = run(capsys, "catalog", "show", "h100-llama3", "--json")
    data = json.loads(out)
    assert code == 0 and data["failures"]["gpu_per_1k_hours"] > 0
    assert "Dubey" in data["sources"]["failures.gpu_per_1k_hours"]
    code, out, _ = run(capsys, "catalog", "show", "h100-llama3")
    assert code == 0 and "Table 5" in out


def _profile_file(tmp_path: Path, **failures: float) -> Path:
    data = hardware_catalog.load_reliability("h100-llama3").model_dump(mode="json")
    data["failures"].update(failures)
    data["name"] = "mine"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_system_names_its_profile_inline(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """A system file with its reliability profile inline (here: 10× the GPU failures) and a
    job's --reliability file both reach the estimate."""
    system = hardware_catalog.load_system("dgx-h100").model_dump(mode="json")
    profile = hardware_catalog.load_reliability("h100-llama3").model_dump(mode="json")
    profile["failures"]["gpu_per_1k_hours"] *= 10
    profile["name"] = "flaky"
    system["reliability"] = profile
    path = tmp_path / "system.json"
    path.write_text(json.dumps(system))
    argv = [a if a != "dgx-h100" else str(path) for a in LLAMA3]
    code, out, _ = run(capsys, "evaluate", *argv, *META_LAYOUT, "--json")
    flaky = json.loads(out)["estimate"]["goodput"]
    assert code == 0 and flaky["profile"] == "flaky" and flaky["failures_per_day"] > 40
    mine = _profile_file(tmp_path, gpu_per_1k_hours=0.0)
    code, out, _ = run(
        capsys, "evaluate", *LLAMA3, *META_LAYOUT, "--json", "--reliability", str(mine)
    )
    assert json.loads(out)["estimate"]["goodput"]["profile"] == "mine"


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--reliability", "nope-profile"], "reliability profile 'nope-profile'"),
        (["--checkpoint-mode", "lazy"], "--checkpoint-mode"),
        (["--checkpoint-interval", "random"], "--checkpoint-interval"),
    ],
)
def test_bad_reliability_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], names: str
) -> None:
    code, _, err = run(capsys, "evaluate", *LLAMA3, *META_LAYOUT, *extra)
    assert code == 2 and names in err and len(err.strip().splitlines()) == 1


def test_a_negative_rate_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    bad = _profile_file(tmp_path, gpu_per_1k_hours=-1.0)
    code, _, err = run(capsys, "evaluate", *LLAMA3, *META_LAYOUT, "--reliability", str(bad))
    assert code == 2 and "gpu_per_1k_hours" in err and len(err.strip().splitlines()) == 1


# -- sweeps and the plot -------------------------------------------------------------------


def test_sweep_rows_and_the_goodput_plot(tmp_path: Path) -> None:
    from planner.studies.rows import read_rows
    from planner.studies.study import load_study
    from planner.studies.sweep import run_study

    example = Path(__file__).resolve().parents[1] / "examples" / "goodput" / "study.yaml"
    study = load_study(example)
    study = study.model_copy(update={"gpus": (8192, 16384)})
    run_study(study, tmp_path, jobs=1)
    rows = read_rows(tmp_path)
    assert len(rows) == 2
    for row in rows:
        for key in ("goodput", "effective_days", "days", "failures_per_day", "checkpoint_gib"):
            assert row[key] is not None, key
        assert row["effective_days"] > row["days"]
    chart = goodput_vs_gpus(rows, study)
    goodput_panel, days_panel = chart.panels
    (line,) = goodput_panel.lines
    assert [x for x, _ in line.points] == [8192.0, 16384.0]
    assert line.points[1][1] < line.points[0][1]  # goodput falls with the count
    assert len(days_panel.lines) == 2
