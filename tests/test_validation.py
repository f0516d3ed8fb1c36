"""Accuracy against published runs, and calibration that recovers known parameters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import hardware_catalog
from planner.accuracy.calibration import (
    BOUNDS,
    PARAMETERS,
    apply_params,
    crossing_runs,
    default_free,
    fit,
    fit_warnings,
    transferred_gemm_efficiency,
)
from planner.accuracy.cross_validation import CrossValidation, cross_validate
from planner.accuracy.validation import (
    BUNDLED_DATASET,
    Dataset,
    MeasuredRun,
    load_dataset,
    predict_step_s,
    resolve,
    source_of,
    validate,
)
from planner.cli import main
from planner.errors import InputError
from planner.queries.evaluate import evaluate
from planner.specs import JobSpec, Strategy

KORTHIKANTI_MEAN, KORTHIKANTI_WORST, ALL_MEAN = 0.04, 0.09, 0.08
"""Issue #6's bar: the best analytical peer reports 3.65 % mean / 8.87 % worst on these runs."""
CROSS_VALIDATED_MEAN, WORST_SOURCE_MEAN = 0.08, 0.15
"""Issue #11: leave-one-source-out error at most 8 % (6.2 % since each DP collective pays its
ring latency; the next goal is 5 %), and no source worse than 15 % on average."""


def test_bundled_dataset_meets_the_accuracy_bar() -> None:
    result = validate(load_dataset())
    groups = {g.group: g for g in result.groups}
    korthikanti = groups["Korthikanti2022_Table5"]
    assert korthikanti.runs == 8
    assert korthikanti.mean_abs_error <= KORTHIKANTI_MEAN
    assert korthikanti.worst_abs_error <= KORTHIKANTI_WORST
    assert result.overall.runs >= 50
    assert result.overall.mean_abs_error <= ALL_MEAN


def test_every_calibration_run_fits_in_memory() -> None:
    """Issue #11: each published run ran, so the memory model must let it fit."""
    for run in load_dataset().runs:
        model, system = resolve(run)
        estimate = evaluate(model, system, run.job, run.strategy)
        assert estimate.fits, (run.id, estimate.overflows)


@pytest.fixture(scope="module")
def cross_validated() -> CrossValidation:
    """The bundled dataset cross-validated once (~30 s) for the tests that read it."""
    return cross_validate(load_dataset())


def test_cross_validated_error_per_source(cross_validated: CrossValidation) -> None:
    result = cross_validated
    assert len(result.folds) >= 5
    assert result.overall.mean_abs_error <= CROSS_VALIDATED_MEAN
    for fold in result.folds:
        assert fold.summary.mean_abs_error <= WORST_SOURCE_MEAN, fold.source
        assert fold.calibrated_on  # every fold says what it was fitted on
    assert result.overall.runs == result.in_sample.runs


def _two_runs_per_source() -> Dataset:
    """Two runs of every source of the bundled dataset (each fold's fits stay cheap): a stack
    with runs in other sources (megatron-lm-2022, llm-foundry) and one without (megatron-core)."""
    runs, seen = [], {}
    for run in load_dataset().runs:
        seen[source_of(run)] = seen.get(source_of(run), 0) + 1
        if seen[source_of(run)] <= 2:
            runs.append(run)
    return Dataset(runs=tuple(runs))


def test_cross_validation_never_starts_from_the_catalogs_fitted_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catalog's profiles were fitted on every run, the left-out source's included: a fold
    that kept or started from their values would leak it. With every calibrated parameter of
    every catalog stack moved to its lower bound, each fold predicts the same."""
    dataset = _two_runs_per_source()
    honest = cross_validate(dataset)
    real = hardware_catalog.load_stack

    def distorted(name: str):
        return real(name).model_copy(update={p: BOUNDS[p][0] for p in PARAMETERS})

    monkeypatch.setattr(hardware_catalog, "load_stack", distorted)
    again = cross_validate(dataset)
    assert [r.predicted_step_time_s for r in again.runs] == pytest.approx(
        [r.predicted_step_time_s for r in honest.runs], rel=1e-12
    )
    assert again.in_sample != honest.in_sample  # the in-sample error does read the catalog
    megatron_core = next(f for f in honest.folds if f.source == "dgxc-benchmarking-llama3.1")
    assert megatron_core.calibrated_on["megatron-core"].startswith("no runs: priors, GEMM share")


def test_transferred_gemm_share_is_the_run_weighted_mean() -> None:
    fits = {"a": (1, {"gemm_efficiency": 0.9}), "b": (3, {"gemm_efficiency": 0.7})}
    assert transferred_gemm_efficiency(fits) == pytest.approx(0.75)


def test_bundled_dataset_keeps_provenance_and_says_what_it_left_out() -> None:
    raw = yaml.safe_load(BUNDLED_DATASET.read_text(encoding="utf-8"))
    for run in raw["runs"]:
        assert run["source"] and run["tier"] in ("A", "B", "C")
        assert "inferred" in run and "flops_convention" in run
    assert raw["left_out"] and all(item["why"] for item in raw["left_out"])


def _synthetic_runs(system_name: str) -> Dataset:
    """Runs that exercise GEMMs of many sizes, attention, memory-bound kernels, TP on NVLink
    and DP / PP across nodes; measured times to be filled in by the model itself."""
    shapes = [
        ("gpt3-1.3b", 8, 1, 8, 4, "none", 0),
        ("gpt3-13b", 8, 2, 4, 1, "full", 1),
        ("megatron-22b", 4, 1, 16, 2, "selective", 0),
        ("llama2-7b", 1, 1, 64, 2, "full", 3),
        ("llama3-8b", 2, 4, 8, 1, "none", 1),
        ("gpt3-175b", 8, 8, 2, 1, "full", 1),
        ("llama2-70b", 8, 4, 4, 1, "selective", 2),
        ("gpt3-1.3b", 1, 1, 128, 8, "none", 2),
    ]
    runs = []
    for i, (model, tp, pp, dp, mb, recompute, zero) in enumerate(shapes):
        job = JobSpec(global_batch=dp * mb * 8, attention="materialized" if i % 2 else "flash")
        strategy = Strategy(
            tp=tp,
            pp=pp,
            dp=dp,
            micro_batch=mb,
            recompute=recompute,
            sequence_parallel=tp > 1 and i % 3 == 0,
            zero_stage=zero,
        )
        runs.append(
            MeasuredRun(
                id=f"synthetic-{i}",
                model=model,
                system=system_name,
                gpus=tp * pp * dp,
                job=job,
                strategy=strategy,
                measured_step_time_s=1.0,
            )
        )
    return Dataset(runs=tuple(runs))


def test_calibration_recovers_known_parameters() -> None:
    base = hardware_catalog.load_stack("megatron-core")
    truth = {
        "gemm_efficiency": 0.7,
        "attention_efficiency": 0.45,
        "memory_bound_efficiency": 0.6,
        "layer_overhead_us": 150.0,
    }
    true_stack = apply_params(base, truth)
    template = _synthetic_runs("dgx-h100")
    measured = [
        run.model_copy(update={"measured_step_time_s": predict_step_s(run, true_stack)})
        for run in template.runs
    ] * 2  # 16 runs: four free parameters
    fitted, loss = fit(measured, base, free=list(truth), rounds=10)
    assert loss < 0.01
    for name, value in truth.items():
        tolerance = 15.0 if name == "layer_overhead_us" else 0.03
        assert fitted[name] == pytest.approx(value, abs=tolerance), name


def test_validate_and_calibrate_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "korthikanti22-table5-1T-sel_sp" in out and "all" in out
    assert main(["validate", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["overall"]["runs"] == len(payload["runs"])
    assert {r["stack"] for r in payload["runs"]} >= {"megatron-core", "llm-foundry"}
    spec = tmp_path / "calibrated.yaml"
    argv = ["calibrate", "--stack", "megatron-lm-2022", "--free", "gemm_efficiency"]
    assert main([*argv, "--out", str(spec)]) == 0
    assert "mean absolute error" in capsys.readouterr().out
    calibrated = hardware_catalog.load_stack(str(spec))
    assert "planner calibrate" in calibrated.sources["gemm_efficiency"]
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload["after"]) == {"gemm_efficiency"} and payload["runs"]
    assert isinstance(payload["warnings"], list)


def test_cross_validate_command(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cross_validated: CrossValidation,
) -> None:
    """The command's table and JSON (of the module's cross-validation: computing it is the test
    above's, printing it this one's)."""
    import planner.accuracy.validation

    monkeypatch.setattr(
        planner.accuracy.cross_validation, "cross_validate", lambda dataset, **_: cross_validated
    )
    assert main(["validate", "--cross-validate"]) == 0
    out = capsys.readouterr().out
    assert "leave one source out" in out and "llm-foundry-a100" in out
    assert main(["validate", "--cross-validate", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    sources = {fold["source"] for fold in payload["folds"]}
    assert {"korthikanti2022", "llm-foundry-a100", "llm-foundry-h100"} <= sources
    assert payload["overall"]["runs"] == len(payload["runs"])


def test_user_dataset_errors_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.yaml"
    path.write_text("runs:\n  - id: x\n    model: gpt3-175b\n")
    with pytest.raises(InputError, match="required field is missing") as error:
        load_dataset(path)
    assert "\n" not in str(error.value)
    run = {
        "id": "x",
        "model": "gpt3-175b",
        "system": "dgx-h100",
        "gpus": 5,
        "job": {"global_batch": 8},
        "strategy": {"tp": 5, "dp": 1},
        "measured_step_time_s": 1.0,
    }
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with pytest.raises(InputError, match="tp = 5 must divide heads"):
        validate(load_dataset(path))
    run |= {"gpus": 8, "strategy": {"tp": 8}}
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with pytest.raises(InputError, match="one source"):
        cross_validate(load_dataset(path))


def test_runs_of_one_problem_are_evaluated_together_and_alike() -> None:
    """Calibration evaluates the runs that share a model, system and job as one array of
    strategies: the same errors as each run evaluated alone, and one cost-model call per
    distinct problem however many runs repeat it."""
    from planner.accuracy.calibration import _Problem, prior_profile

    runs = [run for run in load_dataset().runs if run.job.stack == "megatron-core"]
    stack = prior_profile(hardware_catalog.load_stack("megatron-core"))
    params = {"gemm_efficiency": 0.71, "layer_overhead_us": 40.0}
    trial = stack.model_copy(update=params)
    alone = [predict_step_s(run, trial) / run.measured_step_time_s - 1 for run in runs]
    problem = _Problem(runs, stack)
    assert problem.errors(params).tolist() == pytest.approx(alone, rel=1e-12, abs=1e-15)
    repeated = [run.model_copy(update={"id": f"{run.id}-{i}"}) for i in range(20) for run in runs]
    many = _Problem(repeated, stack)
    assert len(many.groups) == len(problem.groups) < len(repeated)
    assert many.errors(params).tolist() == pytest.approx(alone * 20, rel=1e-12, abs=1e-15)


def _three_sources() -> Dataset:
    """Six synthetic runs, two per source: each fold fits one parameter on four runs."""
    runs = _synthetic_runs("dgx-h100").runs[:6]
    return Dataset(
        runs=tuple(
            run.model_copy(update={"source_key": f"source-{i // 2}", "measured_step_time_s": 2.0})
            for i, run in enumerate(runs)
        )
    )


def test_cross_validation_in_processes_is_the_same_and_says_how_far_it_is() -> None:
    dataset = _three_sources()
    heard: list[str] = []
    alone = cross_validate(dataset, progress=heard.append)
    assert [fold.source for fold in alone.folds] == ["source-0", "source-1", "source-2"]
    assert heard[-1] == "cross-validation: 3 of 3 folds done"
    assert any(line.startswith("fold source-0: fitting megatron-core to 4 runs") for line in heard)
    parallel = cross_validate(dataset, jobs=2)
    assert parallel.model_dump() == alone.model_dump()


def test_long_commands_report_progress_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PROGRESS_AFTER_S (here 0) calibrate and cross-validate print progress lines on
    stderr; stdout stays the answer (JSON with --json)."""
    import planner.cli.output

    monkeypatch.setattr(planner.cli.output, "PROGRESS_AFTER_S", 0.0)
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(_three_sources().model_dump(mode="json")))
    argv = ["calibrate", "--dataset", str(path), "--stack", "megatron-core"]
    for as_json in (False, True):
        assert main(argv + ["--json"] * as_json) == 0
        out, err = capsys.readouterr()
        lines = err.splitlines()
        assert lines and all(
            line.startswith("planner calibrate: fitting megatron-core to 6 runs, start ")
            for line in lines
        )
        assert json.loads(out)["stack"] == "megatron-core" if as_json else "megatron-core" in out
    validate_argv = ["validate", "--dataset", str(path), "--cross-validate", "--jobs", "1"]
    for as_json in (False, True):
        assert main(validate_argv + ["--json"] * as_json) == 0
        out, err = capsys.readouterr()
        assert "planner validate: cross-validation: 3 of 3 folds done" in err.splitlines()
        assert len(json.loads(out)["folds"]) == 3 if as_json else "source-2" in out


def test_a_fit_in_processes_is_the_same() -> None:
    runs = _three_sources().runs
    stack = hardware_catalog.load_stack("megatron-core")
    free = ["gemm_efficiency", "layer_overhead_us"]
    assert fit(runs, stack, free, rounds=3, jobs=2) == fit(runs, stack, free, rounds=3)


def _one_node_runs() -> list[MeasuredRun]:
    """The synthetic runs moved onto one 8-GPU node (pure DP)."""
    return [
        run.model_copy(
            update={
                "gpus": 8,
                "job": run.job.model_copy(update={"global_batch": 64}),
                "strategy": Strategy(dp=8, micro_batch=1, zero_stage=1),
            }
        )
        for run in _synthetic_runs("dgx-h100").runs
    ]


def test_a_fit_warns_of_bounds_disagreement_and_runs_that_cross_no_node() -> None:
    """fit_warnings: a parameter on a bound, two starts at nearly the same loss far apart, and
    a set of one-node runs each get one line naming what is wrong."""
    one_node = _one_node_runs()
    assert not any(crossing_runs(one_node).values())
    free = ["gemm_efficiency", "layer_overhead_us"]
    best = {"gemm_efficiency": 1.0, "layer_overhead_us": 100.0}
    other = {"gemm_efficiency": 0.98, "layer_overhead_us": 300.0}
    warnings = fit_warnings(one_node, free, [(best, 0.100), (other, 0.104)])
    assert any("gemm_efficiency landed on its upper bound" in w for w in warnings)
    assert any("disagree on layer_overhead_us" in w for w in warnings)
    assert any("no run sends traffic across a node" in w for w in warnings)
    settled = {"gemm_efficiency": 0.8, "layer_overhead_us": 100.0}
    assert fit_warnings(one_node, free, [(settled, 0.1)]) == [warnings[-1]]
    assert fit_warnings(list(_synthetic_runs("dgx-h100").runs), free, [(settled, 0.1)]) == []


def test_the_per_message_overhead_is_fitted_only_where_runs_cross_nodes() -> None:
    """TP or PP traffic across nodes in at least RUNS_PER_PARAMETER runs frees it; DP traffic
    alone does not (its latencies hide under compute or are the contention's)."""
    stack = hardware_catalog.load_stack("megatron-core")
    one_node = _one_node_runs() * 4
    assert "message_overhead_us" not in default_free(one_node, stack)
    synthetic = list(_synthetic_runs("dgx-h100").runs)
    counts = crossing_runs(synthetic)
    assert counts["pp"] >= 4 and counts["dp"] >= 4
    assert "message_overhead_us" in default_free(synthetic * 4, stack)


def test_validate_reports_memory_where_a_run_states_its_peak(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """current_runs.yaml's torchtitan runs carry the allocator's reserved peak: validate
    predicts each (HBM less the fixed reserve) and summarises the error; runs without a peak
    carry none."""
    current = hardware_catalog.CATALOG / "calibration" / "current_runs.yaml"
    result = validate(load_dataset(current))
    with_peak = [r for r in result.runs if r.measured_memory_gib is not None]
    assert len(with_peak) == result.overall.memory_runs >= 19
    for r in with_peak:
        assert r.memory_error == pytest.approx(r.predicted_memory_gib / r.measured_memory_gib - 1)
    assert all(r.memory_error is None for r in result.runs if r.measured_memory_gib is None)
    # recorded (README, 'Memory'): 14.6 % mean absolute error, the model low at the median
    assert result.overall.memory_mean_abs_error < 0.16
    assert result.overall.memory_median_error < 0
    assert main(["validate", "--dataset", str(current)]) == 0
    assert "Peak memory, measured and predicted" in capsys.readouterr().out
    assert main(["validate", "--dataset", str(current), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["overall"]["memory_runs"] == len(with_peak)


def test_calibration_learns_a_clusters_per_message_cost_from_two_node_runs() -> None:
    """A cluster whose stack pays 150 µs per message (truth) measured on one and two nodes:
    calibrate frees the per-message overhead (its runs send pipeline traffic across nodes),
    recovers it, and predicts the same stack on 8 nodes better than the uncalibrated profile."""
    base = hardware_catalog.load_stack("nanotron")
    truth = apply_params(base, {"message_overhead_us": 150.0, "gemm_efficiency": 0.7})
    model = hardware_catalog.load_model("llama3-8b")

    def runs(gpus: int, pp: int, dps: tuple[int, ...]) -> list[MeasuredRun]:
        made = []
        for dp in dps:
            job = JobSpec(global_batch=64, seq_len=4096, stack="nanotron")
            strategy = Strategy(tp=gpus // (pp * dp), pp=pp, dp=dp, micro_batch=1)
            run = MeasuredRun(
                id=f"g{gpus}-pp{pp}-dp{dp}",
                model=model,
                system="dgx-h100",
                gpus=gpus,
                job=job,
                strategy=strategy,
                measured_step_time_s=1.0,
            )
            made.append(run.model_copy(update={"measured_step_time_s": predict_step_s(run, truth)}))
        return made

    small = runs(8, 2, (1, 2)) + runs(16, 2, (1, 2)) + runs(16, 4, (1, 2)) + runs(8, 4, (1, 2))
    assert crossing_runs(small)["pp"] >= 4
    # freed by default once there are runs enough for it (one parameter per four runs)
    assert "message_overhead_us" in default_free(small * 3, base)
    fitted, _ = fit(small, base, free=["gemm_efficiency", "message_overhead_us"], rounds=8)
    assert fitted["message_overhead_us"] == pytest.approx(150.0, abs=25.0)
    large = runs(64, 8, (1,)) + runs(64, 4, (2,))
    calibrated = apply_params(base, fitted)

    def mean_error(stack) -> float:
        return float(
            np.mean([abs(predict_step_s(r, stack) / r.measured_step_time_s - 1) for r in large])
        )

    assert mean_error(calibrated) < 0.5 * mean_error(base)
