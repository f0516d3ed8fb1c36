"""Co-design sweeps: rows equal individual plans, interrupted sweeps resume, bad files fail
clearly, plots draw."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import InputError
from planner.plan import plan
from planner.specs import JobSpec
from planner.sweep import load_study, read_rows, run_study, system_variant

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
        system = system_variant(load_system(row["system"]), row)
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
        ({"gpus": [0]}, "gpus must be positive"),
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
