"""Every command's tables read at any width, piped or not (issue 37): at COLUMNS 60, 80 and
200, and piped (no COLUMNS, no terminal), every cell of a numeric column appears whole, every
number in a text column appears unbroken, nothing is cut with "…", no line runs past the width;
and the numbers of each command's JSON appear in its tables."""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from rich.table import Table

from planner.cli import accuracy_report, catalog_report, layout, main, report
from planner.cli.layout import PIPED_WIDTH, WORD_CAP


def _args(text: str) -> list[str]:
    return text.split()


WIDTHS = (60, 80, 200, None)
"""COLUMNS values; None: piped, no COLUMNS (PIPED_WIDTH)."""

GPT3 = _args("--model gpt3-175b --system dgx-a100-80g --gpus 1024 --global-batch 1536")
EVALUATE = [
    "evaluate",
    *GPT3,
    *_args("--tp 8 --pp 16 --micro-batch 1 --interleave 2 --recompute selective"),
    "--sequence-parallel",
    *_args("--train-tokens 300e9"),
]
PLAN_TOP = _args("plan --model llama3-8b --system dgx-h100 --gpus 64 --global-batch 512 --top 3")
PLAN_TOKENS = _args(
    "plan --model llama3-8b --system dgx-h100 --gpus 64 --global-batch 512 --train-tokens 15e12"
)
PLAN_INFEASIBLE = _args("plan --model megatron-1t --system dgx-h100 --gpus 64 --global-batch 64")
MIN_HARDWARE = _args(
    "min-hardware --model gpt3-1.3b --system h100-offload-512g --gpus 8 --global-batch 64 "
    "--minimize hbm --sweep offload-capacity"
)


def _plain(cell: object) -> str:
    return layout._text(cell).plain


def _record(monkeypatch: pytest.MonkeyPatch) -> list[Table]:
    """The tables print_table is given, copied before it lays them out."""
    tables: list[Table] = []
    original = layout.print_table

    def recording(console: Console, table: Table) -> None:
        tables.append(copy.deepcopy(table))
        original(console, table)

    for module in (layout, report, catalog_report, accuracy_report):
        monkeypatch.setattr(module, "print_table", recording)
    return tables


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    columns: int | None,
) -> tuple[str, list[Table]]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    tables = _record(monkeypatch)
    main(argv)
    out = capsys.readouterr().out
    monkeypatch.undo()
    return out, tables


def _numbers(text: str) -> Iterator[str]:
    """The whitespace-separated words of ``text`` that hold a digit, up to WORD_CAP long."""
    for word in text.split():
        if any(ch.isdigit() for ch in word) and len(word) <= WORD_CAP:
            yield word.strip(",;()")


def check_readable(out: str, tables: list[Table], width: int) -> None:
    """Every numeric cell whole on one line, every number of a text cell unbroken, header words
    present, no "…", no line past ``width``."""
    assert not re.search(r"[^\s,(]…", out)  # rich's cut ("1.3…"); prose may say ", …"
    lines = out.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), max(lines, key=len)
    words = set(out.split())
    for table in tables:
        for column in table.columns:
            for word in _plain(column.header).split() if table.show_header else ():
                assert word in words, (table.title, word)
            for cell in column.cells:
                text = _plain(cell)
                if column.no_wrap:
                    assert any(text in line for line in lines), (table.title, text)
                for number in _numbers(text):
                    assert number in out, (table.title, number)


def cells(tables: list[Table]) -> set[str]:
    """Every cell's plain text, and the numbers within text cells."""
    found: set[str] = set()
    for table in tables:
        for column in table.columns:
            for cell in column.cells:
                text = _plain(cell)
                found.add(text)
                found.update(_numbers(text))
    return found


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


def _leaves(data: object) -> Iterator[object]:
    if isinstance(data, dict):
        for value in data.values():
            yield from _leaves(value)
    elif isinstance(data, list):
        for value in data:
            yield from _leaves(value)
    else:
        yield data


def _every_width(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> list[Table]:
    """Run ``argv`` at every width, check it reads, return the piped run's tables."""
    tables: list[Table] = []
    for columns in WIDTHS:
        out, tables = _run(monkeypatch, capsys, argv, columns)
        assert tables, argv
        check_readable(out, tables, columns or PIPED_WIDTH)
    return tables


def _rerender(tables: list[Table]) -> None:
    """A slow command's tables (recorded once) laid out again at every width."""
    for width in WIDTHS:
        console = Console(width=width or PIPED_WIDTH, file=io.StringIO(), color_system=None)
        copies = [copy.deepcopy(t) for t in tables]
        for table in copies:
            layout.print_table(console, table)
        check_readable(console.file.getvalue(), tables, width or PIPED_WIDTH)


@pytest.mark.parametrize("what", ["systems", "models", "stacks", "reliability"])
def test_catalog_listings(
    what: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _every_width(monkeypatch, capsys, ["catalog", what])
    shown = cells(tables)
    for entry in _json(capsys, ["catalog", what]):
        if what == "systems":
            hbm = entry["memory_tiers"][0]
            expected = [f"{hbm['capacity_gib']:g}", f"{hbm['bandwidth_gbps']:g}"]
        elif what == "models":
            expected = [str(entry[k]) for k in ("hidden", "layers", "heads", "vocab", "seq_len")]
        elif what == "reliability":
            rates = entry["failures"]
            expected = [f"{rates[k]:.4g}" for k in ("gpu_per_1k_hours", "node_per_1k_hours")]
        else:
            expected = [f"{entry['gemm_efficiency']:.3g}"]
        assert set(expected) <= shown, (entry["name"], expected)


@pytest.mark.parametrize("name", ["dgx-h100", "llama3-70b", "megatron-core", "h100-llama3"])
def test_catalog_show(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every field's value; the sources once each below the table, not on every row."""
    tables = _every_width(monkeypatch, capsys, ["catalog", "show", name])
    shown = cells(tables)
    data = _json(capsys, ["catalog", "show", name])
    for value in _leaves({k: v for k, v in data.items() if k not in ("sources", "description")}):
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert str(value) in shown, value
    out, _ = _run(monkeypatch, capsys, ["catalog", "show", name], 80)
    assert len(out.splitlines()) < 400
    for number, source in enumerate(data["sources"].values(), start=1):
        assert f"[{number}]" in out
        assert source.split()[0] in out


def test_evaluate(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tables = _every_width(monkeypatch, capsys, EVALUATE)
    shown = cells(tables)
    estimate = _json(capsys, EVALUATE)["estimate"]
    assert f"{estimate['step_time_s']:.4g}" in shown
    assert {f"{s:.4g}" for s in estimate["breakdown_s"].values()} <= shown
    for tier in estimate["memory_gib"].values():
        assert {f"{v:.2f}" for k, v in tier.items() if k != "capacity"} <= shown
    assert isinstance(estimate["training"]["steps"], int)  # a whole number of steps
    _goodput_shown(estimate, shown)


def _goodput_shown(estimate: dict, shown: set[str]) -> None:
    """The Failures & checkpoints table (issue 35) carries the JSON's goodput numbers."""
    goodput = estimate["goodput"]
    assert {
        f"{goodput['failures_per_day']:.2f}",
        f"{goodput['job_mtbf_h']:.2f}",
        f"{goodput['goodput']:.1%}",
        f"{goodput['interval_s']:,.0f}",
        f"{goodput['restart_s']:.0f}",
        f"{estimate['training']['effective_days']:,.1f}",
    } <= shown


def test_plan_with_train_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan with a token budget: its goodput table read at every width."""
    out, tables = _run(monkeypatch, capsys, PLAN_TOKENS, None)
    check_readable(out, tables, PIPED_WIDTH)
    assert any(str(t.title).startswith("Failures & checkpoints") for t in tables)
    _rerender(tables)
    _goodput_shown(_json(capsys, PLAN_TOKENS)["estimate"], cells(tables))


def test_evaluate_memory_table_names_no_stage_with_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With pp = 1 there is no first or last stage to name."""
    argv = _args("evaluate --model llama3-8b --system dgx-a100-80g --gpus 8 --global-batch 64")
    out, _ = _run(monkeypatch, capsys, [*argv, "--tp", "8"], 200)
    assert "stage" not in out.split("Memory per GPU")[1].split("Throughput")[0]
    out, _ = _run(monkeypatch, capsys, [*argv, "--tp", "4", "--pp", "2"], 200)
    assert "stage" in out.split("Memory per GPU")[1].split("Throughput")[0]


def test_plan_top(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The ranks, their step times and MFU, and what each differs in, tied variants included."""
    out, tables = _run(monkeypatch, capsys, PLAN_TOP, None)
    check_readable(out, tables, PIPED_WIDTH)
    _rerender(tables)
    shown = cells(tables)
    payload = _json(capsys, PLAN_TOP)
    for alt in payload["alternatives"]:
        assert {f"{alt['step_time_s']:.4g}", f"{alt['mfu']:.1%}"} <= shown
        for differs in alt["differs_in"]:
            assert differs in out.replace("\n", " ") or differs.rstrip(",") in shown


def test_plan_infeasible(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The diagnosis (no table) reads at 60 columns: no "…"."""
    out, _ = _run(monkeypatch, capsys, PLAN_INFEASIBLE, 60)
    assert not re.search(r"[^\s,(]…", out) and "No feasible strategy" in out


def test_min_hardware_pareto(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The least hardware's tables and the Pareto front, whose headers carry units."""
    out, tables = _run(monkeypatch, capsys, MIN_HARDWARE, None)
    check_readable(out, tables, PIPED_WIDTH)
    _rerender(tables)
    pareto = [t for t in tables if str(t.title).startswith("Pareto")]
    assert pareto
    headers = [_plain(c.header) for c in pareto[0].columns]
    assert headers[:2] == ["hbm GiB", "offload-capacity GiB"]
    payload = _json(capsys, MIN_HARDWARE)
    shown = cells(tables)
    for point in payload["pareto"]:
        assert {report.format_quantity(point["first"]), f"{point['step_time_s']:.4g}"} <= shown


def test_validate(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tables = _every_width(monkeypatch, capsys, ["validate"])
    shown = cells(tables)
    for run in _json(capsys, ["validate"])["runs"]:
        expected = {
            str(run["gpus"]),
            f"{run['measured_step_time_s']:.4g}",
            f"{run['predicted_step_time_s']:.4g}",
            f"{run['error']:+.1%}",
            f"{run['measured_mfu']:.1%}",
            f"{run['predicted_mfu']:.1%}",
        }
        assert expected <= shown, run["id"]


@pytest.fixture
def small_dataset(tmp_path: Path) -> Path:
    """One run of each source of the bundled dataset (cross-validation in about a second)."""
    from planner.accuracy.validation import load_dataset, source_of

    runs, seen = [], set()
    for run in load_dataset().runs:
        if source_of(run) not in seen:
            seen.add(source_of(run))
            runs.append(run.model_dump(mode="json", exclude_none=True))
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": runs}, sort_keys=False))
    return path


def test_cross_validate(
    small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["validate", "--cross-validate", "--dataset", str(small_dataset), "--jobs", "1"]
    tables = _every_width(monkeypatch, capsys, argv)
    shown = cells(tables)
    for fold in _json(capsys, argv)["folds"]:
        summary = fold["summary"]
        assert {f"{summary['mean_abs_error']:.1%}", str(summary["runs"])} <= shown


def test_calibrate(
    small_dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["calibrate", "--stack", "llm-foundry", "--dataset", str(small_dataset), "--jobs", "1"]
    tables = _every_width(monkeypatch, capsys, argv)
    shown = cells(tables)
    payload = _json(capsys, argv)
    assert {f"{v:.4g}" for v in payload["after"].values()} <= shown
    assert {f"{r['error']:+.1%}" for r in payload["runs"]} <= shown


def test_calibrated_profile_has_its_own_name(
    small_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "stack.yaml"
    main(
        ["calibrate", "--stack", "llm-foundry", "--dataset", str(small_dataset), "--out", str(out)]
    )
    assert "llm-foundry-calibrated" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["name"] == "llm-foundry-calibrated"
    argv = [*EVALUATE[:-2], "--stack", str(out), "--json"]
    main(argv)
    assert json.loads(capsys.readouterr().out)["estimate"]["stack"] == "llm-foundry-calibrated"


def test_sweep_progress_lines_do_not_wrap_when_piped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    study = {
        "name": "a-study-with-a-rather-long-name-to-push-the-progress-line-past-sixty-columns",
        "models": ["gpt3-1.3b"],
        "systems": ["dgx-h100"],
        "gpus": [8, 16],
        "global_batch": {"per_gpu": 4},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    monkeypatch.setenv("COLUMNS", "60")
    main(["sweep", str(path), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    progress = [line for line in out.splitlines() if study["name"] in line]
    assert progress and all(re.search(r"\d", line) for line in progress)


def test_piped_console_is_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped without COLUMNS: PIPED_WIDTH, not rich's 80; COLUMNS wins where set."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert layout.make_console().width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "72")
    assert layout.make_console().width == 72
