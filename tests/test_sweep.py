"""Co-design sweeps: rows equal individual plans, interrupted sweeps resume, bad files fail
clearly, plots draw."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import InputError
from planner.queries.plan import plan
from planner.specs import JobSpec
from planner.specs.hardware import override_system
from planner.specs.limits import MAX_GLOBAL_BATCH
from planner.studies.rows import read_rows
from planner.studies.study import load_study
from planner.studies.sweep import run_study

STUDY = {
    "name": "tiny",
    "models": ["gpt3-1.3b", "llama2-7b"],
    "systems": ["dgx-h100"],
    "gpus": [8, 16],
    "global_batch": {"per_gpu": 4},
    "hardware": {"hbm_gib": [16, 80]},
}


def write(tmp_path: Path, study: dict, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(study))
    return path


def test_rows_equal_individual_plans(tmp_path: Path) -> None:
    study = load_study(write(tmp_path, STUDY))
    rows = run_study(study, tmp_path / "out")
    assert len(rows) == 8
    from hardware_catalog import load_system

    for row in rows:
        system = override_system(load_system(row["system"]), row)
        alone = plan(
            row["model"],
            system,
            JobSpec(global_batch=row["global_batch"]),
            row["gpus"],
            diagnose=False,
        )
        assert row["status"] == alone.status
        if alone.strategy is not None:
            assert row["strategy"] == alone.strategy.describe()
            assert row["step_time_s"] == pytest.approx(alone.estimate.step_time_s)
    assert (tmp_path / "out" / "rows.csv").read_text().count("\n") == 9


def test_interrupted_sweep_resumes_to_the_same_rows(tmp_path: Path) -> None:
    study = load_study(write(tmp_path, STUDY))
    partial = run_study(study, tmp_path / "resumed", stop_after=3)
    assert len(partial) == 3
    with (tmp_path / "resumed" / "rows.jsonl").open("a") as sink:
        sink.write('{"id": "torn')  # a row cut short by a hard kill is ignored
    resumed = run_study(study, tmp_path / "resumed", jobs=2)
    full = run_study(study, tmp_path / "full")
    key = lambda rows: sorted((r["id"], r["status"], r.get("step_time_s")) for r in rows)  # noqa: E731
    assert key(resumed) == key(full)
    ids = [r["id"] for r in read_rows(tmp_path / "resumed")]
    assert len(ids) == len(set(ids)) == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"modles": ["gpt3-1.3b"]}, "modles: unknown field"),
        ({"hardware": {"hbm": [80]}}, "unknown hardware axis 'hbm'"),
        ({"models": ["gpt3-1.3"]}, "did you mean"),
        ({"gpus": [0]}, "gpus = 0: allowed range is"),
        ({"query": "min-hardware", "minimize": "gpu"}, "study.minimize = 'gpu'"),
    ],
)
def test_bad_study_files_name_the_key(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as error:
        load_study(write(tmp_path, {**STUDY, **change}))
    assert "\n" not in str(error.value)


def test_cli_sweep_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path, {**STUDY, "hardware": {}})
    assert main(["sweep", str(study), "--out", str(tmp_path / "r"), "--jobs", "2"]) == 0
    assert "4 scenarios" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    for kind in ("mfu-vs-gpus", "breakdown", "memory"):
        assert main(["plot", str(tmp_path / "r"), "--kind", kind]) == 0
        assert (tmp_path / "r" / f"{kind}.png").stat().st_size > 1000
    assert main(["plot", str(tmp_path / "r"), "--kind", "offload-bandwidth"]) == 2


def _whole_rows(path: Path) -> list[dict]:
    """Every line of rows.jsonl, parsed (fails on a torn or foreign line)."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_resume_drops_a_torn_line_from_the_file(tmp_path: Path) -> None:
    study = load_study(write(tmp_path, STUDY))
    run_study(study, tmp_path / "out", stop_after=2)
    with (tmp_path / "out" / "rows.jsonl").open("a") as sink:
        sink.write('{"id": "gpt3-1.3b|dgx-h100|8|hbm_gib=16", "sta')
    run_study(study, tmp_path / "out", stop_after=1)
    rows = _whole_rows(tmp_path / "out" / "rows.jsonl")
    assert len(rows) == 3
    assert len({row["id"] for row in rows}) == 3


def test_sweep_killed_at_any_moment_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """SIGKILL the sweep process at several moments, resume into the same folder each time:
    the rows end whole, unique and equal to an uninterrupted run's."""
    study_path = write(tmp_path, STUDY)
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "planner", "sweep", str(study_path), "--out", str(out)]
    rows_path = out / "rows.jsonl"
    for rows_before_kill in (0, 2, 5):  # at start-up, then mid-sweep as rows are being written
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            written = rows_path.read_bytes().count(b"\n") if rows_path.exists() else 0
            if written >= rows_before_kill:
                break
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert process.returncode == -signal.SIGKILL  # killed, not finished
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    rows = _whole_rows(out / "rows.jsonl")
    full = run_study(load_study(study_path), tmp_path / "full")
    key = lambda rows: sorted((r["id"], r["status"], r.get("step_time_s")) for r in rows)  # noqa: E731
    assert key(rows) == key(full)
    assert (out / "rows.csv").read_text().count("\n") == len(full) + 1


AXES_STUDY = {
    "name": "axes",
    "models": ["gpt3-1.3b"],
    "systems": ["dgx-h100"],
    "gpus": [8],
    "global_batch": {"tokens": 131072},
    "job": {"seq_len": [1024, 2048], "grad_dtype": "bf16"},
    "model_overrides": {"heads": [16, 32]},
    "hardware": {"hbm_gib": 40, "scale_up_gbps": [225, 450]},
}


def test_job_model_and_hardware_axes_equal_individual_plans(tmp_path: Path) -> None:
    """Each row is the plan of its own job, reshaped model and overridden system; the tokens
    rule gives the batch that holds 128 Ki tokens at each sequence."""
    rows = run_study(load_study(write(tmp_path, AXES_STUDY)), tmp_path / "out")
    assert len(rows) == 8
    from hardware_catalog import load_model, load_system

    for row in rows:
        assert row["global_batch"] * row["seq_len"] == 131072
        assert row["grad_dtype"] == "bf16" and row["hbm_gib"] == 40
        model = load_model("gpt3-1.3b").model_copy(update={"heads": row["model_heads"]})
        system = override_system(load_system("dgx-h100"), row)
        job = JobSpec(global_batch=row["global_batch"], seq_len=row["seq_len"], grad_dtype="bf16")
        alone = plan(model, system, job, 8, diagnose=False)
        assert row["status"] == alone.status == "optimal"
        assert row["strategy"] == alone.strategy.describe()
        assert row["step_time_s"] == pytest.approx(alone.estimate.step_time_s)
    assert {r["id"] for r in rows} >= {
        "gpt3-1.3b|dgx-h100|8|grad_dtype=bf16|hbm_gib=40|model_heads=16|scale_up_gbps=225"
        "|seq_len=1024"
    }
    by_heads = {r["model_heads"]: r for r in rows if r["seq_len"] == 2048}
    assert by_heads[16]["step_time_s"] != by_heads[32]["step_time_s"]


def test_global_batch_as_an_axis_and_per_gpu_rule(tmp_path: Path) -> None:
    listed = load_study(write(tmp_path, {**STUDY, "global_batch": [32, 64], "hardware": {}}))
    from planner.studies.study import scenarios

    batches = sorted((s["gpus"], s["global_batch"]) for s in scenarios(listed))
    assert batches == [(8, 32), (8, 32), (8, 64), (8, 64), (16, 32), (16, 32), (16, 64), (16, 64)]
    assert all("|B=" in s["id"] for s in scenarios(listed))
    ruled = load_study(write(tmp_path, {**STUDY, "hardware": {}}))  # per_gpu: 4
    assert {(s["gpus"], s["global_batch"]) for s in scenarios(ruled)} == {(8, 32), (16, 64)}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"job": {"grad": ["bf16"]}}, "unknown job axis 'grad'; allowed: seq_len"),
        ({"job": {"grad_dtype": ["fp16"]}}, "job.grad_dtype = 'fp16': Input should be"),
        ({"job": {"seq_len": []}}, "job.seq_len needs at least one value"),
        ({"job": {"stack": ["megatron"]}}, "did you mean"),
        ({"model_overrides": {"name": ["x"]}}, "unknown model_overrides axis 'name'"),
        ({"model_overrides": {"heads": [0]}}, "heads"),
        (
            {"hardware": {"hbm_gib": [0]}},
            "hardware.hbm_gib = 0: Input should be greater than or equal to 0.001",
        ),
        ({"global_batch": {"per_gpu": 1, "tokens": 4096}}, "exactly one of per_gpu, tokens"),
        (
            {"global_batch": {"tokens": MAX_GLOBAL_BATCH * 2048}, "job": {"seq_len": [1024]}},
            "global batch of gpt3-1.3b at 8 GPUs, sequence 1024",
        ),
        ({"global_batch": {"per_gpu": -1}}, "global_batch: per_gpu: Input should be greater"),
        ({"global_batch": []}, "global_batch needs at least one value"),
    ],
)
def test_bad_axes_name_the_key(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as error:
        load_study(write(tmp_path, {**STUDY, **change}))
    assert "\n" not in str(error.value)


def test_diagnosis_on_request_and_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An infeasible row names its conflicts only with --diagnose; a sweep whose output is
    not a terminal prints progress lines with the time left."""
    tight = write(tmp_path, {**STUDY, "models": ["llama2-7b"], "hardware": {"hbm_gib": [4]}})
    assert main(["sweep", str(tight), "--out", str(tmp_path / "plain")]) == 0
    out = capsys.readouterr().out
    assert "tiny: 2/2 scenarios" in out and ", done" in out and "2 infeasible" in out
    plain = read_rows(tmp_path / "plain")
    assert all(r["status"] == "infeasible" and "conflict" not in r for r in plain)
    assert main(["sweep", str(tight), "--out", str(tmp_path / "why"), "--diagnose"]) == 0
    explained = read_rows(tmp_path / "why")
    assert all("HBM" in r["conflict"] for r in explained)


def test_eta_line_counts_only_this_runs_pace() -> None:
    from planner.studies.sweep import eta_line

    assert eta_line("s", 30, 130, 10, 20.0) == "s: 30/130 scenarios, 20 s, about 1 min 40 s left"
    assert eta_line("s", 10, 130, 10, 0.0) == "s: 10/130 scenarios, 0 s, starting"
    assert eta_line("s", 130, 130, 0, 7300.0) == "s: 130/130 scenarios, 2 h 1 min, done"


def test_spec_paths_are_found_next_to_the_study_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study names a system and a stack by relative paths beside it: the sweep finds them from
    any working directory (rows keep the path as written), and in its worker processes."""
    from hardware_catalog import load_system

    folder = tmp_path / "study"
    folder.mkdir()
    system = load_system("dgx-h100").model_dump(mode="json") | {"name": "mine", "aliases": []}
    (folder / "my-system.yaml").write_text(yaml.safe_dump(system))
    (folder / "my-stack.yaml").write_text(yaml.safe_dump({"name": "mine", "gemm_efficiency": 0.5}))
    study = {**STUDY, "systems": ["my-system.yaml"], "job": {"stack": "my-stack.yaml"}}
    path = write(folder, study)
    monkeypatch.chdir(tmp_path)  # not where the files are
    rows = run_study(load_study(path), tmp_path / "out", jobs=2)
    assert {r["system"] for r in rows} == {"my-system.yaml"}
    assert {r["status"] for r in rows} <= {"optimal", "infeasible"} and len(rows) == 8
    reference = run_study(
        load_study(write(tmp_path, {**STUDY, "job": {"stack": str(folder / "my-stack.yaml")}})),
        tmp_path / "reference",
    )
    assert sorted(r.get("step_time_s") or 0 for r in rows) == sorted(
        r.get("step_time_s") or 0 for r in reference
    )
    # Another study in this process naming the same relative path, which lies in the working
    # directory rather than beside it, reads that file (not the first study's).
    (tmp_path / "my-stack.yaml").write_text(yaml.safe_dump({"name": "mine", "gemm_efficiency": 1}))
    other = tmp_path / "elsewhere"
    other.mkdir()
    second = load_study(write(other, {**STUDY, "job": {"stack": "my-stack.yaml"}}))
    from hardware_catalog import load_stack

    assert load_stack("my-stack.yaml").gemm_efficiency == 1
    assert run_study(second, tmp_path / "second", stop_after=1)[0]["status"] == "optimal"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpus": [8, 8]}, "gpus lists 8 more than once"),
        ({"models": ["gpt3-1.3b", "gpt3-1.3b"]}, "models lists gpt3-1.3b more than once"),
        ({"global_batch": [32, 32]}, "global_batch lists 32 more than once"),
        ({"hardware": {"hbm_gib": [80, 80.0]}}, "hardware.hbm_gib lists 80 more than once"),
        ({"job": {"seq_len": [1024, 1024]}}, "job.seq_len lists 1024 more than once"),
    ],
)
def test_a_repeated_axis_value_is_refused(tmp_path: Path, change: dict, message: str) -> None:
    """Rows are keyed by their values: a value listed twice would give two rows one id."""
    with pytest.raises(InputError, match=message) as error:
        load_study(write(tmp_path, {**STUDY, **change}))
    assert "\n" not in str(error.value)


def test_a_number_written_as_text_is_a_number_in_the_rows(tmp_path: Path) -> None:
    """YAML reads 5e1 (no dot) as a string: the axis keeps the number the override validated."""
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "hardware": {}}) + "hardware: {hbm_gib: [5e1]}\n")
    study = load_study(path)
    assert study.hardware["hbm_gib"] == (50.0,)
    rows = run_study(study, tmp_path / "out", stop_after=1)
    assert rows[0]["hbm_gib"] == 50.0 and rows[0]["id"].endswith("|hbm_gib=50")


def test_a_failing_scenario_is_an_error_row_and_the_rest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever goes wrong in one scenario (its input, or a bug) is that scenario's row."""
    import planner.studies.scenario

    solve = planner.studies.scenario._solve_scenario

    def failing(study, scenario, row, started):  # noqa: ANN001, ANN202
        if scenario["hbm_gib"] == 16 and scenario["gpus"] == 8:
            raise RuntimeError("boom\nsecond line")
        return solve(study, scenario, row, started)

    monkeypatch.setattr(planner.studies.scenario, "_solve_scenario", failing)
    study = load_study(write(tmp_path, {**STUDY, "models": ["gpt3-1.3b"]}))
    rows = run_study(study, tmp_path / "out")
    errors = [r for r in rows if r["status"] == "error"]
    assert [r["id"] for r in errors] == ["gpt3-1.3b|dgx-h100|8|hbm_gib=16"]
    assert errors[0]["error"] == "internal error: RuntimeError: boom (a bug in planner)"
    assert "strategy" not in errors[0]
    assert sum(r["status"] == "optimal" for r in rows) == 3


def test_a_subnormal_hardware_axis_never_ends_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """5e-324 GB/s of scale-up: refused with one line, or that scenario's error row."""
    study = {**STUDY, "models": ["gpt3-1.3b"], "gpus": [8], "hardware": {}}
    path = write(tmp_path, study)
    path.write_text(path.read_text() + "hardware: {scale_up_gbps: [5.0e-324, 450]}\n")
    code = main(["sweep", str(path), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith("planner: error: ") and err.count("\n") == 1
        assert "scale_up_gbps" in err
        return
    rows = {r["scale_up_gbps"]: r for r in read_rows(tmp_path / "out")}
    assert rows[5e-324]["status"] == "error" and rows[450]["status"] == "optimal"


def test_a_folder_resumes_only_its_own_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another study into a folder with rows is refused with one line naming what differs; the
    same study resumes there."""
    first = write(tmp_path, STUDY, "first.yaml")
    out = tmp_path / "out"
    run_study(load_study(first), out, stop_after=1)
    other = write(tmp_path, {**STUDY, "name": "other", "gpus": [8]}, "other.yaml")
    with pytest.raises(InputError, match="another study .differs in name, gpus.") as error:
        run_study(load_study(other), out)
    assert "\n" not in str(error.value)
    assert main(["sweep", str(other), "--out", str(out)]) == 2
    assert "another study" in capsys.readouterr().err
    assert len(read_rows(out)) == 1  # nothing of the other study was written
    assert len(run_study(load_study(first), out)) == 8
    (out / "study.json").unlink()
    with pytest.raises(InputError, match="no study.json"):
        run_study(load_study(first), out)


def test_excluded_combinations_are_left_out(tmp_path: Path) -> None:
    """``exclude`` drops the scenarios matching every key of an entry, and only those."""
    from planner.studies.study import scenarios

    study = load_study(
        write(
            tmp_path,
            {**STUDY, "exclude": [{"model": "llama2-7b", "hbm_gib": 16}, {"gpus": 16}]},
        )
    )
    ids = {s["id"] for s in scenarios(study)}
    assert ids == {
        "gpt3-1.3b|dgx-h100|8|hbm_gib=16",
        "gpt3-1.3b|dgx-h100|8|hbm_gib=80",
        "llama2-7b|dgx-h100|8|hbm_gib=80",
    }


@pytest.mark.parametrize(
    ("exclude", "needle"),
    [([{"stack": "calculon"}], "exclude[0]: stack is not an axis of this study"), ([{}], "empty")],
)
def test_an_exclude_on_no_axis_is_refused(tmp_path: Path, exclude, needle: str) -> None:  # noqa: ANN001
    with pytest.raises(InputError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_study(write(tmp_path, {**STUDY, "exclude": exclude}))
