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
from planner.hardware import override_system
from planner.plan import plan
from planner.specs import JobSpec
from planner.sweep import load_study, read_rows, run_study

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
