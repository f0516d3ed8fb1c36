"""Plots, checked on their data (planner.studies.plots.charts), not their pixels: one bar per row
and every row present, labels unique and naming only what varies, reference lines where asked, the
offload-bandwidth plot relative to unlimited bandwidth, the least-hardware plot only from a
min-hardware study; then each kind drawn once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import InputError
from planner.studies.plots import chart
from planner.studies.study import load_study
from planner.studies.sweep import run_study

PLAN_STUDY = {
    "name": "small offload",
    "models": ["gpt3-1.3b", "llama2-7b"],
    "systems": ["h100-offload-512g"],
    "gpus": [8, 16],
    "global_batch": 64,
    "hardware": {"hbm_gib": [1, 3, 12], "offload_gbps": [6.25, 100000]},
}
CAPACITY_STUDY = {
    "name": "least offload",
    "query": "min-hardware",
    "minimize": "offload-capacity",
    "models": ["gpt3-1.3b", "llama2-7b"],
    "systems": ["h100-offload-512g"],
    "gpus": [8],
    "global_batch": 64,
    "hardware": {"hbm_gib": 12},
}


def sweep(tmp_path: Path, study: dict, name: str) -> tuple[Path, list[dict]]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study))
    out = tmp_path / name
    return out, run_study(load_study(path), out, jobs=2)


@pytest.fixture(scope="module")
def plan_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    return sweep(tmp_path_factory.mktemp("plots"), PLAN_STUDY, "plans")


@pytest.mark.parametrize("kind", ["breakdown", "memory"])
def test_bar_charts_have_one_bar_per_row_with_unique_labels(
    plan_rows: tuple[Path, list[dict]], kind: str
) -> None:
    """Issue 37: a panel per model and combination of the other axes but one (the GPU count),
    whose values label the bars: 2 bars a panel, not 12 (or 40-168) unreadable ones."""
    out, rows = plan_rows
    drawn = chart(out, kind)
    bars = [bar for panel in drawn.panels for bar in panel.bars]
    assert sorted(bar.row_id for bar in bars) == sorted(row["id"] for row in rows)
    assert len(drawn.panels) == 12 and drawn.columns == 4
    for panel in drawn.panels:
        assert panel.title.split("\n")[0] in ("gpt3-1.3b", "llama2-7b")
        assert [bar.label for bar in panel.bars] == ["8", "16"] and panel.xlabel == "GPUs"
        assert "GPUs" not in panel.title and "HBM" in panel.title
        assert panel.ylim == drawn.panels[0].ylim  # one y scale: panels are compared
    assert drawn.title.startswith("small offload: ")
    assert "h100-offload-512g" in drawn.title and "batch 64" in drawn.title
    by_id = {row["id"]: row for row in rows}
    for bar in bars:
        row = by_id[bar.row_id]
        if row["status"] != "optimal":
            assert bar.segments == () and bar.note == row["status"]
    infeasible = [bar for bar in bars if bar.note]
    assert infeasible and len(infeasible) < len(bars)  # 1 GiB is less than the HBM reserve


def test_breakdown_bars_are_shares_of_the_step_named_in_words(
    plan_rows: tuple[Path, list[dict]],
) -> None:
    out, rows = plan_rows
    drawn = chart(out, "breakdown")
    by_id = {row["id"]: row for row in rows}
    for bar in (b for p in drawn.panels for b in p.bars if b.segments):
        assert sum(v for _, v in bar.segments) == pytest.approx(100, rel=1e-6)
        step = by_id[bar.row_id]["step_time_s"]
        assert bar.top == (f"{step:,.0f} s" if step >= 100 else f"{step:.3g} s")
        names = [name for name, _ in bar.segments]
        assert "DP communication (exposed)" in names and "pipeline bubble" in names
        assert not any("_" in name for name in names)  # no raw keys (dp_comm)
    assert all(p.ylabel == "share of the step time, %" for p in drawn.panels)


def test_memory_bars_stack_both_tiers_and_mark_the_hbm(plan_rows: tuple[Path, list[dict]]) -> None:
    out, rows = plan_rows
    drawn = chart(out, "memory")
    by_id = {row["id"]: row for row in rows}
    assert drawn.hatched == {
        f"{i} (offload)" for i in ("weights", "gradients", "optimizer", "activations")
    }
    offloading = 0
    for bar in (b for p in drawn.panels for b in p.bars if b.segments):
        row = by_id[bar.row_id]
        assert bar.capacity == row["hbm_gib"]
        values = dict(bar.segments)
        hbm = sum(v for name, v in values.items() if name.endswith("(HBM)"))
        assert hbm == pytest.approx(row["memory_hbm_gib"])
        offload = sum(v for name, v in values.items() if name.endswith("(offload)"))
        assert offload == pytest.approx(row["memory_offload_1_gib"])
        offloading += offload > 0
        assert sum(values.values()) <= drawn.panels[0].ylim[1]  # the shared scale holds all
    assert offloading  # 3 GiB of HBM makes some plans offload


def test_mfu_lines_cover_every_feasible_row_once(plan_rows: tuple[Path, list[dict]]) -> None:
    out, rows = plan_rows
    drawn = chart(out, "mfu-vs-gpus", mfu_lines=(0.75,))
    ids = [i for panel in drawn.panels for line in panel.lines for i in line.row_ids]
    assert sorted(ids) == sorted(r["id"] for r in rows if r["status"] == "optimal")
    for panel in drawn.panels:
        assert panel.hlines == ((75.0, "75% MFU"),)
        assert len({line.label for line in panel.lines}) == len(panel.lines)
        for line in panel.lines:
            assert "GPUs" not in line.label and all(0 < y < 100 for _, y in line.points)


def test_mfu_vs_model_has_a_panel_per_gpu_count_and_every_feasible_row_once(
    plan_rows: tuple[Path, list[dict]],
) -> None:
    out, rows = plan_rows
    drawn = chart(out, "mfu-vs-model", mfu_lines=(0.5,))
    assert [p.title for p in drawn.panels] == ["8 GPUs", "16 GPUs"]
    shown = [i for panel in drawn.panels for line in panel.lines for i in line.row_ids]
    feasible = [r["id"] for r in rows if r.get("mfu") is not None]
    assert sorted(shown) == sorted(feasible)
    for panel in drawn.panels:
        assert panel.hlines == ((50.0, "50% MFU"),)
        assert len({line.label for line in panel.lines}) == len(panel.lines)
        for line in panel.lines:
            sizes = [x for x, _ in line.points]
            assert sizes == sorted(sizes) and "gpt3" not in line.label  # x is the model
            assert sizes[0] == pytest.approx(1.3, rel=0.05)  # billions: 1.3B-7B models
        assert panel.xlabel == "model parameters, billions (log scale)"
        assert [name for _, name in panel.xticks] == ["gpt3-1.3b\n1.31B", "llama2-7b\n6.74B"]


def test_offload_bandwidth_is_relative_to_unlimited(plan_rows: tuple[Path, list[dict]]) -> None:
    """Relative speed on one y scale, and below each panel the absolute MFU (issue 39: 95 % of
    a 20 % MFU is still 20 %); a model without a point has no line, so no legend entry."""
    out, rows = plan_rows
    drawn = chart(out, "offload-bandwidth", gbps_lines=(100,), mfu_lines=(0.75,))
    titles = [f"{g} GPUs, HBM {h} GiB" for g in (8, 16) for h in (1, 3, 12)]
    relative, absolute = drawn.panels[:6], drawn.panels[6:]
    assert [p.title for p in relative] == titles
    assert [p.title for p in absolute] == [f"{t}: MFU" for t in titles]
    assert relative[0].note.startswith("no plan at the highest bandwidth: gpt3-1.3b")
    assert len({p.ylim for p in relative}) == 1 and relative[0].ylim[1] == 101.0
    lines = [line for panel in relative for line in panel.lines]
    assert lines and all(p.ylabel.endswith("unlimited offload bandwidth") for p in relative)
    assert all(panel.vlines == ((100, "100 GB/s"),) for panel in drawn.panels)
    assert all(p.hlines == ((75.0, "75% MFU"),) and p.ylabel == "MFU, %" for p in absolute)
    assert all(line.points for panel in drawn.panels for line in panel.lines)
    for line in lines:
        assert [x for x, _ in line.points] == [6.25]  # the unlimited point is the reference
        # An optimal plan at a lower bandwidth is never faster than at an unlimited one.
        assert all(0 < y <= 100 + 1e-9 for _, y in line.points)
        assert relative[0].ylim[0] <= min(y for _, y in line.points)
    slowed = [y for line in lines for _, y in line.points if y < 99.9]
    assert slowed  # offloading at 6.25 GB/s costs something somewhere
    by_id = {row["id"]: row for row in rows}
    for line in (line for panel in absolute for line in panel.lines):
        assert [y for _, y in line.points] == [100 * by_id[i]["mfu"] for i in line.row_ids]


def test_least_hardware_needs_a_min_hardware_study(
    tmp_path: Path, plan_rows: tuple[Path, list[dict]]
) -> None:
    with pytest.raises(InputError, match="least-hardware plots need a min-hardware study"):
        chart(plan_rows[0], "least-hardware")
    out, rows = sweep(tmp_path, CAPACITY_STUDY, "least")
    drawn = chart(out, "least-hardware")
    assert drawn.panels[0].title == "least offload capacity"
    assert drawn.panels[0].ylabel == "offload capacity per GPU, GiB"
    (panel,) = drawn.panels
    ((_, line),) = [(p.title, p.lines[0]) for p in drawn.panels]
    minimum = {row["model"]: row["minimum"] for row in rows}
    assert [y for _, y in line.points] == [minimum["gpt3-1.3b"], minimum["llama2-7b"]]
    assert minimum["llama2-7b"] > 0  # 7B on 12 GiB HBM needs the offload tier
    assert line.points[0][0] == pytest.approx(1.3, rel=0.05)  # x: billions of parameters
    assert line.label == "least offload capacity"  # nothing varies: the quantity, not "plan"
    assert panel.xlabel == "model parameters, billions (log scale)"
    assert chart(out, "least-hardware", gib_lines=(120,)).panels[0].hlines == ((120, "120 GiB"),)


def test_each_kind_draws_and_bad_requests_exit_2(
    tmp_path: Path, plan_rows: tuple[Path, list[dict]], capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = plan_rows[0]
    for kind in ("mfu-vs-gpus", "mfu-vs-model", "breakdown", "memory", "offload-bandwidth"):
        target = tmp_path / f"{kind}.svg"
        argv = ["plot", str(out), "--kind", kind, "--out", str(target)]
        assert main([*argv, "--mfu-line", "0.75", "--gbps-line", "100"]) == 0
        assert target.stat().st_size > 5000
    least, _ = sweep(tmp_path, CAPACITY_STUDY, "least")
    assert main(["plot", str(least), "--kind", "least-hardware"]) == 0
    assert (least / "least-hardware.png").stat().st_size > 5000
    capsys.readouterr()
    assert main(["plot", str(out), "--kind", "least-hardware"]) == 2
    assert main(["plot", str(out), "--kind", "mfu-vs-gpus", "--mfu-line", "75"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "--mfu-line" in errors[1]


def _copy_results(source: Path, target: Path, change=None) -> Path:  # noqa: ANN001
    """A copy of a results folder, ``change`` applied to its first feasible row."""
    target.mkdir()
    (target / "study.json").write_bytes((source / "study.json").read_bytes())
    rows = [json.loads(line) for line in (source / "rows.jsonl").read_text().splitlines()]
    if change is not None:
        change(next(row for row in rows if row.get("step_time_s") is not None))
    (target / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return target


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda r: r.update(mfu="eight"), "mfu = 'eight' is not a finite number"),
        (lambda r: r.update(gpus="eight"), "gpus = 'eight' is not a positive whole number"),
        (lambda r: r.update(step_time_s=0.0), "step_time_s = 0.0 is not positive"),
        (
            lambda r: r.update(time_forward_s=None, hbm_gib=True),
            "hbm_gib = True is not a finite number",
        ),
        (lambda r: r.pop("mfu"), "a step time without its mfu"),
        (lambda r: r.pop("model"), "model = None is not a name"),
        (lambda r: r.pop("gpus"), "gpus = None is not a positive whole number"),
    ],
)
def test_a_row_a_chart_cannot_place_is_left_out_and_said(
    tmp_path: Path,
    plan_rows: tuple[Path, list[dict]],
    capsys: pytest.CaptureFixture[str],
    change,  # noqa: ANN001
    reason: str,
) -> None:
    source, rows = plan_rows
    feasible = [r["id"] for r in rows if r.get("step_time_s") is not None]
    out = _copy_results(source, tmp_path / "odd", change)
    changed = next(
        json.loads(line)["id"]
        for line in (source / "rows.jsonl").read_text().splitlines()
        if json.loads(line).get("step_time_s") is not None
    )
    said: list[str] = []
    drawn = chart(out, "mfu-vs-gpus", warn=said.append)
    ids = {i for panel in drawn.panels for line in panel.lines for i in line.row_ids}
    assert ids == set(feasible) - {changed}
    assert said == [f"{out}: left out 1 row a chart cannot place (first: {changed!r}: {reason})"]
    pytest.importorskip("matplotlib")
    for kind in ("mfu-vs-gpus", "mfu-vs-model", "breakdown", "memory", "offload-bandwidth"):
        target = tmp_path / f"{kind}.png"
        assert main(["plot", str(out), "--kind", kind, "--out", str(target)]) == 0, kind
        err = capsys.readouterr().err
        assert err.startswith("planner: warning: ") and reason in err and err.count("\n") == 1
        assert target.stat().st_size > 5000


def test_lines_that_are_not_rows_and_a_study_file_that_is_not_text(
    tmp_path: Path, plan_rows: tuple[Path, list[dict]], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _copy_results(plan_rows[0], tmp_path / "bytes")
    with (out / "rows.jsonl").open("ab") as sink:
        sink.write(b"\xff\xfe not a row\n[1, 2]\n")
    with (out / "study.json").open("ab") as sink:
        sink.write(b"\xff")
    said: list[str] = []
    drawn = chart(out, "breakdown", warn=said.append)
    assert sum(len(panel.bars) for panel in drawn.panels) == len(plan_rows[1])
    assert said == [f"{out}: left out 2 lines of rows.jsonl that are not rows"]
    assert drawn.title.startswith("sweep: ")  # the study file is not read


def test_the_output_is_refused_before_anything_is_drawn(
    tmp_path: Path,
    plan_rows: tuple[Path, list[dict]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrong --out is one line at once, not after the render; a write that fails (a full
    device) is an error, never 'wrote'."""
    pytest.importorskip("matplotlib")
    import planner.studies.plots.render

    out = plan_rows[0]
    (tmp_path / "folder").mkdir()
    cases = {
        str(tmp_path / "p.txt"): "the suffix names the format; allowed: .png, .svg",
        str(tmp_path / "noext"): "the suffix names the format",
        str(tmp_path / "folder"): "a folder; name an image file",
        str(tmp_path / "missing" / "x.png"): f"no folder {tmp_path / 'missing'}",
    }
    real_draw = planner.studies.plots.render.draw
    monkeypatch.setattr(planner.studies.plots.render, "draw", lambda *a: pytest.fail("drew"))
    for target, message in cases.items():
        assert main(["plot", str(out), "--kind", "breakdown", "--out", target]) == 2, target
        err = capsys.readouterr().err
        assert err == f"planner: error: --out {target}: {message}" + err.split(message, 1)[1]
        assert err.count("\n") == 1
    assert not (tmp_path / "folder.png").exists() and not (tmp_path / "p.txt").exists()
    monkeypatch.setattr(planner.studies.plots.render, "draw", real_draw)
    if not Path("/dev/full").exists():
        return
    full = tmp_path / "full.png"
    full.symlink_to("/dev/full")
    assert main(["plot", str(out), "--kind", "breakdown", "--out", str(full)]) == 2
    captured = capsys.readouterr()
    assert "wrote" not in captured.out
    assert captured.err == f"planner: error: --out {full}: No space left on device\n"


def test_a_chart_past_the_drawing_limits_is_refused(
    tmp_path: Path, plan_rows: tuple[Path, list[dict]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Thousands of rows: refused, naming the limit (it was a FreeType error after 20 s for
    bars, minutes of drawing for lines)."""
    from planner.studies.plots import charts

    first = next(row for row in plan_rows[1] if row.get("step_time_s") is not None)
    big = tmp_path / "big"
    big.mkdir()
    rows = [first | {"id": f"{first['id']}|seq_len={n}", "seq_len": n} for n in range(1, 1501)]
    (big / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    limits = {
        "breakdown": f"1,500 bars (a bar per row) in panel 'gpt3-1.3b'; a chart draws at most "
        f"{charts.MAX_BARS_PER_PANEL} per panel",
        "mfu-vs-gpus": f"1,500 series (a legend entry each: a line per combination of the "
        f"varying axes); a chart draws at most {charts.MAX_SERIES}",
        "mfu-vs-model": f"1,500 series (a legend entry each: a line per combination of the "
        f"varying axes); a chart draws at most {charts.MAX_SERIES}",
    }
    for kind, message in limits.items():
        assert main(["plot", str(big), "--kind", kind, "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err
        assert (
            err == f"planner: error: {big}: --kind {kind}: {message}; plot a study with fewer "
            "axis values\n"
        )
    within = rows[: charts.MAX_BARS_PER_PANEL]
    (big / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in within))
    assert charts.size_problem(chart(big, "breakdown")) == ""


def test_every_legend_entry_is_drawn_and_every_axis_has_its_unit(
    plan_rows: tuple[Path, list[dict]],
) -> None:
    """Issue 37: a legend names only series the figure draws (a line with points, a segment
    above zero), colours are the colour-blind-safe palette's, and every axis says its unit."""
    from planner.studies.plots import render

    out, _ = plan_rows
    for kind in ("mfu-vs-gpus", "mfu-vs-model", "breakdown", "memory", "offload-bandwidth"):
        drawn = chart(out, kind, mfu_lines=(0.75,))
        names = render._legend_names(drawn)
        lines = {line.label for p in drawn.panels for line in p.lines if line.points}
        segments = {n for p in drawn.panels for b in p.bars for n, v in b.segments if v > 0}
        capacity = {"HBM capacity"} if kind == "memory" else set()
        assert set(names) == lines | segments | capacity, kind
        colours = render._colours(names)
        assert all(c in render.OKABE_ITO or c in render.SERIES_COLOURS.values()
                   for c, _, _ in colours.values())  # fmt: skip
        for panel in drawn.panels:
            assert any(u in panel.ylabel for u in ("%", "GiB")), (kind, panel.ylabel)
            if panel.lines:
                assert any(u in panel.xlabel for u in ("GPUs", "GB/s", "billions")), kind


def test_mfu_panels_with_no_plan_are_left_out_and_named(
    tmp_path: Path, plan_rows: tuple[Path, list[dict]]
) -> None:
    """An all-infeasible panel drew an empty 0-1 axis; now it is left out, named in the note."""

    def drop(row: dict) -> None:
        return None

    out = _copy_results(plan_rows[0], tmp_path / "none", drop)
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    for row in rows:
        if row["model"] == "llama2-7b":
            row.update(step_time_s=None, mfu=None, status="infeasible")
    (out / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    drawn = chart(out, "mfu-vs-gpus")
    assert [p.title for p in drawn.panels] == ["gpt3-1.3b"]
    assert drawn.note == "no plan at all, so no panel: llama2-7b"


def test_a_wrong_out_fails_before_the_results_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`planner plot --out /nonexistent/x.png` is one line, whatever the results (the results
    folder does not exist either: the target is checked first)."""
    argv = ["plot", str(tmp_path / "no-results"), "--kind", "breakdown"]
    assert main([*argv, "--out", str(tmp_path / "nowhere" / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err == f"planner: error: --out {tmp_path / 'nowhere' / 'x.png'}: no folder " + (
        f"{tmp_path / 'nowhere'}\n"
    )
