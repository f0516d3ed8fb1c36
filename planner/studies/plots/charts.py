"""What each plot shows, as data: a chart of panels holding bars or lines, built from a sweep's
rows without drawing anything (planner.studies.plots.render draws it), so the tests check the
content — one bar per row, every row present, labels unique — rather than pixels.

Labels name only what varies: the keys of a row that take more than one value across the
study (model, system, GPU count, global batch, job fields, model-shape and hardware overrides)
label the bars and lines; the ones that stay fixed go into the chart's title with the study's
name. Small multiples keep each panel readable: one panel per model for MFU, step time and
memory; one per GPU count (and other fixed combination) for offload bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from planner.errors import InputError
from planner.specs.hardware import OVERRIDE_LABELS, describe_override
from planner.studies.study import HARDWARE_AXES, JOB_AXES, Study, model_params

TIME_TERMS = (
    "forward",
    "backward",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "offload",
    "bubble",
    "dp_comm",
    "optimizer",
)
"""The step-time terms of an estimate (Estimate.breakdown_s), bottom to top."""
MEMORY_ITEMS = ("weights", "gradients", "optimizer", "activations")
SCENARIO_KEYS = ("model", "system", "gpus", "global_batch")
QUANTITY_NAMES = {
    "hbm": "HBM",
    "offload-capacity": "offload capacity",
    "offload-bandwidth": "offload bandwidth",
    "scale-out-bandwidth": "scale-out bandwidth",
}
"""How a minimised quantity reads on a plot."""
UNLIMITED_GBPS = 10_000.0
"""An offload bandwidth at or above this (faster than any HBM) stands for "unlimited": the
reference of the offload-bandwidth plot, not a point on its axis."""


MAX_PANELS = 32
MAX_BARS_PER_PANEL = 100
MAX_BARS = 400
MAX_SERIES = 40
"""What one chart draws at most: panels, bars per panel and in all (a bar per row), and
series (lines or stacked segments, one legend entry each). Past these a figure is unreadable
(and its fonts shrink until FreeType refuses them), so a larger study is refused, saying which
limit it passes, rather than drawn for minutes."""

NUMBER_KEYS = frozenset(
    {
        "gpus",
        "global_batch",
        "mfu",
        "tokens_per_s",
        "minimum",
        "goodput",
        "failures_per_day",
        "days",
        "effective_days",
        *HARDWARE_AXES,
    }
)
NUMBER_SUFFIXES = ("_s", "_gib", "_gbps")
"""Row keys whose values a chart reads as numbers (times, memory, bandwidths, the scenario's
counts); every other key is shown as text."""
TEXT_KEYS = ("id", "model", "system", "status")
SHARE_KEYS = ("mfu", "goodput")  # shares of a whole, in [0, 1]
MAX_ROW_NUMBER = 1e18
"""Largest number a chart takes from a row: past anything planner writes (MAX_TRAIN_TOKENS is
1e18), inside the float range so that axis limits stay finite (a row's 1e308 made them inf)."""


def row_problem(row: dict[str, Any]) -> str:
    """Why a chart cannot place ``row`` ('' if it can): names are text, the GPU count and batch
    whole numbers, each number key empty or in [0, MAX_ROW_NUMBER] ([0, 1]: SHARE_KEYS), and a
    row with a step time has a positive one and its MFU."""
    for key in TEXT_KEYS:
        if not isinstance(row.get(key), str):
            return f"{key} = {row.get(key)!r} is not a name"
    for key in ("gpus", "global_batch"):
        value = row.get(key)
        if (key == "gpus" or value is not None) and not (_whole(value) and value > 0):
            return f"{key} = {value!r} is not a positive whole number"
    for key, value in row.items():
        numeric = key in NUMBER_KEYS or key.endswith(NUMBER_SUFFIXES)
        if numeric and value is not None and not _finite(value):
            return f"{key} = {value!r} is not a finite number"
        high = 1.0 if key in SHARE_KEYS else MAX_ROW_NUMBER
        if numeric and value is not None and not 0 <= value <= high:
            return f"{key} = {value!r} is outside the allowed range [0, {high:g}]"
    if row.get("step_time_s") is not None and row.get("mfu") is None:
        return "a step time without its mfu"
    if row.get("step_time_s") is not None and not row["step_time_s"] > 0:
        return f"step_time_s = {row['step_time_s']!r} is not positive"
    return ""


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def size_problem(chart: Chart) -> str:
    """Which drawing limit ``chart`` passes ('' if none): MAX_PANELS, MAX_BARS_PER_PANEL,
    MAX_BARS or MAX_SERIES."""
    if len(chart.panels) > MAX_PANELS:
        return f"{len(chart.panels):,} panels; a chart draws at most {MAX_PANELS}"
    for panel in chart.panels:
        if len(panel.bars) > MAX_BARS_PER_PANEL:
            return (
                f"{len(panel.bars):,} bars (a bar per row) in panel {panel.title!r}; a chart "
                f"draws at most {MAX_BARS_PER_PANEL} per panel"
            )
    bars = sum(len(panel.bars) for panel in chart.panels)
    if bars > MAX_BARS:
        return f"{bars:,} bars (a bar per row); a chart draws at most {MAX_BARS}"
    series = {line.label for panel in chart.panels for line in panel.lines}
    series |= {name for panel in chart.panels for bar in panel.bars for name, _ in bar.segments}
    if len(series) > MAX_SERIES:
        return (
            f"{len(series):,} series (a legend entry each: a line per combination of the "
            f"varying axes); a chart draws at most {MAX_SERIES}"
        )
    return ""


@dataclass(frozen=True)
class Bar:
    """One row as a stacked bar: (series, value) segments bottom to top; ``capacity`` a marker
    (the HBM a plan may fill); ``note`` says why a bar is empty (infeasible, error)."""

    row_id: str
    label: str
    segments: tuple[tuple[str, float], ...]
    capacity: float | None = None
    note: str = ""
    top: str = ""
    """Text above the bar (the step time of a bar of shares)."""


@dataclass(frozen=True)
class Line:
    label: str
    points: tuple[tuple[float, float], ...]
    row_ids: tuple[str, ...]


@dataclass(frozen=True)
class Panel:
    title: str
    xlabel: str
    ylabel: str
    bars: tuple[Bar, ...] = ()
    lines: tuple[Line, ...] = ()
    hlines: tuple[tuple[float, str], ...] = ()
    vlines: tuple[tuple[float, str], ...] = ()
    xlog: bool = False
    ylim: tuple[float, float] | None = None
    note: str = ""
    xticks: tuple[tuple[float, str], ...] = ()
    """Named positions on the x axis (a model's size named by the model), if not the values."""


@dataclass(frozen=True)
class Chart:
    title: str
    panels: tuple[Panel, ...]
    hatched: frozenset[str] = field(default_factory=frozenset)
    """Series drawn hatched (the offload tier's items)."""
    note: str = ""
    """A line under the title: what the chart leaves out (panels with no plan)."""
    columns: int = 0
    """Panels per row (0: as many as fit), so that panels compared sit in one column."""


def axis_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The keys that place a row in the study: the scenario's and every axis a row carries."""
    extra = {k for row in rows for k in row if _is_axis(k)}
    return [*SCENARIO_KEYS, *sorted(extra)]


def _is_axis(key: str) -> bool:
    return key in HARDWARE_AXES or key in JOB_AXES or key.startswith("model_")


def varying(rows: list[dict[str, Any]], keys: Iterable[str]) -> list[str]:
    return [k for k in keys if len({_hashable(row.get(k)) for row in rows}) > 1]


def _hashable(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def describe(key: str, value: object) -> str:
    """One axis value in words: '16,384 GPUs', 'offload 25 GB/s', 'heads=160'."""
    if key in ("model", "system"):
        return str(value)
    if key == "gpus":
        return f"{value:,} GPUs"
    if key == "global_batch":  # a row may leave it out (row_problem): say so
        return f"batch {value:,}" if isinstance(value, int) else "batch unstated"
    if key in OVERRIDE_LABELS and isinstance(value, float | int):
        return describe_override(key, value)
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{key.removeprefix('model_')}={shown}"


def label(row: dict[str, Any], keys: Iterable[str], alone: str = "plan") -> str:
    """The row's values of ``keys`` in words; ``alone`` where no key varies."""
    return ", ".join(describe(k, row.get(k)) for k in keys) or alone


def title(study: Study | None, rows: list[dict[str, Any]], what: str) -> str:
    """'<study>: <what> — <the fixed axes>'."""
    keys = axis_keys(rows)
    fixed = [k for k in keys if k not in varying(rows, keys)]
    shown = ", ".join(describe(k, rows[0].get(k)) for k in fixed if rows[0].get(k) is not None)
    name = study.name if study is not None else "sweep"
    return f"{name}: {what}" + (f" — {shown}" if shown else "")


def _groups(
    rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by ``key``, groups and rows in the study's order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


def _feasible(row: dict[str, Any]) -> bool:
    return row.get("step_time_s") is not None


def _note(row: dict[str, Any]) -> str:
    return "" if _feasible(row) else str(row.get("status", "no plan"))


def mfu_vs_gpus(
    rows: list[dict[str, Any]], study: Study | None, mfu_lines: tuple[float, ...] = ()
) -> Chart:
    """MFU against GPU count: a panel per model, a line per combination of the other varying
    keys; ``mfu_lines`` (fractions) drawn as reference lines."""
    panels, empty = _mfu_panels(
        rows,
        mfu_lines,
        panel_of=lambda r: str(r["model"]),
        x_of=lambda r: float(r["gpus"]),
        xlabel="GPUs (log scale)",
    )
    return Chart(title(study, rows, "MFU against GPU count"), panels, note=_empty_note(empty))


def _empty_note(empty: list[str]) -> str:
    """The chart's note naming the panels left out for having no plan at all."""
    return f"no plan at all, so no panel: {', '.join(empty)}" if empty else ""


def offload_bandwidth(
    rows: list[dict[str, Any]],
    study: Study | None,
    gbps_lines: tuple[float, ...] = (),
    mfu_lines: tuple[float, ...] = (),
) -> Chart:
    """Performance against offload bandwidth, a line per model: for each fixed combination of
    the other varying keys a panel of relative speed and, below it, one of absolute MFU (a
    relative 95 % of 20 % MFU is still 19 %). Each line is relative to its own highest
    bandwidth: "unlimited" where that is at least UNLIMITED_GBPS (the point is then the
    reference, not drawn), else that bandwidth, said on the axis. The relative panels share
    one y range, the MFU panels 0–100 %; a model with no point to draw has no line (and no
    legend entry), named in the panel's note."""
    rows = [r for r in rows if r.get("offload_gbps") is not None]
    if not rows:
        raise InputError("offload-bandwidth plots need a study with hardware.offload_gbps")
    top = max(float(r["offload_gbps"]) for r in rows)
    reference = "unlimited offload bandwidth" if top >= UNLIMITED_GBPS else f"{top:g} GB/s"
    keys = [k for k in varying(rows, axis_keys(rows)) if k not in ("model", "offload_gbps")]
    groups = _groups(rows, lambda r: label(r, keys, ""))
    relative, absolute = [], []
    for text, members in groups.items():
        speed, mfu, unplanned = [], [], []
        for model, points in _groups(members, lambda r: str(r["model"])).items():
            points = sorted(points, key=lambda r: float(r["offload_gbps"]))
            best = points[-1]
            shown = [
                r for r in points if _feasible(r) and float(r["offload_gbps"]) < UNLIMITED_GBPS
            ]
            ids = tuple(r["id"] for r in shown)
            if shown:
                mfu.append(Line(model, _points(shown, lambda r: 100 * float(r["mfu"])), ids))
            if not _feasible(best):
                unplanned.append(model)
            elif shown:
                fastest = float(best["step_time_s"])
                ratio = _points(shown, lambda r, f=fastest: 100 * f / r["step_time_s"])
                speed.append(Line(model, ratio, ids))
        note = f"no plan at the highest bandwidth: {', '.join(unplanned)}" if unplanned else ""
        vlines = tuple((g, f"{g:g} GB/s") for g in gbps_lines)
        common = {"xlabel": "offload bandwidth per GPU, GB/s (log scale)", "xlog": True}
        relative.append(
            Panel(
                title=text or "speed",
                ylabel=f"% of the speed with {reference}",
                lines=tuple(speed),
                vlines=vlines,
                note=note,
                **common,
            )
        )
        absolute.append(
            Panel(
                title=f"{text}: MFU" if text else "MFU",
                ylabel="MFU, %",
                lines=tuple(mfu),
                vlines=vlines,
                hlines=tuple((100 * m, f"{m:.0%} MFU") for m in mfu_lines),
                ylim=(0.0, 100.0),
                **common,
            )
        )
    low = min((y for p in relative for line in p.lines for _, y in line.points), default=0.0)
    span = (max(0.0, low - 0.05 * (100 - low) - 1), 101.0)
    relative = [replace(p, ylim=span) for p in relative]  # one y range for all
    return Chart(
        title(study, rows, "performance against offload bandwidth"),
        (*relative, *absolute),
        columns=min(len(groups), 4) if len(groups) <= 4 else 0,
    )


def _points(
    rows: list[dict[str, Any]], y_of: Callable[[dict[str, Any]], float]
) -> tuple[tuple[float, float], ...]:
    return tuple((float(r["offload_gbps"]), y_of(r)) for r in rows)


def model_unit(rows: list[dict[str, Any]]) -> tuple[float, str, str]:
    """(parameters per unit, unit name, suffix) for the models of ``rows``: trillions where the
    largest has at least 10¹² parameters, else billions, so an 8B–405B study does not read
    "trillions" under its axis."""
    largest = max(model_params(r) for r in rows)
    return (1e12, "trillions", "T") if largest >= 1e12 else (1e9, "billions", "B")


def _model_ticks(rows: list[dict[str, Any]]) -> tuple[tuple[float, str], ...]:
    """Each model's size in the rows' unit (model_unit), named by the model and its size."""
    scale, _, suffix = model_unit(rows)
    sizes = {str(r["model"]): model_params(r) / scale for r in rows}
    return tuple(sorted((size, f"{name}\n{size:.3g}{suffix}") for name, size in sizes.items()))


def least_hardware(
    rows: list[dict[str, Any]], study: Study | None, gib_lines: tuple[float, ...] = ()
) -> Chart:
    """The least hardware that meets a min-hardware study's goal (whatever it minimises: HBM,
    offload capacity, GPUs, a bandwidth), against model size: a line per combination of the
    other varying keys (combinations that reach no model are named in the chart's note, not
    drawn); ``gib_lines`` mark thresholds such as the poster's 120 GiB. What a plan happens to
    use is not a requirement, so plan studies are refused."""
    if not rows or len({r.get("minimize") for r in rows}) != 1 or rows[0].get("minimize") is None:
        raise InputError(
            "least-hardware plots need a min-hardware study (query: min-hardware, minimize: "
            "...): the least hardware that meets its goal; what a plan happens to use is not a "
            "requirement"
        )
    minimized, unit = rows[0]["minimize"], rows[0].get("minimum_unit", "")
    quantity = QUANTITY_NAMES.get(minimized, minimized)
    scale, size_unit, _ = model_unit(rows)
    keys = [k for k in varying(rows, axis_keys(rows)) if k != "model"]
    lines: list[Line] = []
    unreachable: list[str] = []
    for text, members in _groups(rows, lambda r: label(r, keys, f"least {quantity}")).items():
        points = sorted(
            (model_params(r) / scale, float(r["minimum"]), r["id"])
            for r in members
            if r.get("minimum") is not None
        )
        missing = [str(r["model"]) for r in members if r.get("minimum") is None]
        if missing:
            unreachable.append(f"{text} ({', '.join(missing)})" if keys else ", ".join(missing))
        if points:
            xy = tuple((x, y) for x, y, _ in points)
            lines.append(Line(text, xy, tuple(i for *_, i in points)))
    goal = ""
    if study is not None and (study.goal.min_mfu or study.goal.max_step_s):
        goal = f" for MFU ≥ {study.goal.min_mfu:.0%}" if study.goal.min_mfu else ""
        goal += f" for step ≤ {study.goal.max_step_s:g} s" if study.goal.max_step_s else ""
    per_gpu = unit != "GPUs"
    reached = sum(len(line.row_ids) for line in lines)
    panel = Panel(
        title=f"least {quantity}{goal}",
        xlabel=f"model parameters, {size_unit} (log scale)",
        ylabel=f"{quantity} per GPU, {unit}" if per_gpu else "GPUs",
        lines=merge_identical(lines),
        hlines=tuple((g, f"{g:g} GiB") for g in gib_lines) if unit == "GiB" else (),
        xlog=True,
        note=f"not reachable: {len(rows) - reached} of {len(rows)}" if unreachable else "",
        xticks=_model_ticks(rows),
    )
    note = ""
    if unreachable:
        note = f"not reachable, so no line: {unreachable[0]}"
        more = len(unreachable) - 1
        note += f" and {more} other combination{'s' * (more > 1)}" if more else ""
    return Chart(title(study, rows, f"required {quantity}"), (panel,), note=note)


def merge_identical(lines: list[Line]) -> tuple[Line, ...]:
    """Lines with the same points drawn once, their labels joined: a line hidden exactly under
    another would otherwise be a legend entry with nothing to see."""
    merged: dict[tuple[tuple[float, float], ...], Line] = {}
    for line in lines:
        same = merged.get(line.points)
        merged[line.points] = (
            line
            if same is None
            else Line(f"{same.label}\n= {line.label}", line.points, same.row_ids + line.row_ids)
        )
    return tuple(merged.values())


def mfu_vs_model(
    rows: list[dict[str, Any]], study: Study | None, mfu_lines: tuple[float, ...] = ()
) -> Chart:
    """MFU against model size: a panel per GPU count, a line per combination of the other
    varying keys (assumptions, batch, hardware), the models named on the axis; ``mfu_lines`` as
    reference lines."""
    scale, unit, _ = model_unit(rows)
    panels, empty = _mfu_panels(
        rows,
        mfu_lines,
        panel_of=lambda r: f"{int(r['gpus']):,} GPUs",
        x_of=lambda r: model_params(r) / scale,
        xlabel=f"model parameters, {unit} (log scale)",
        xticks=_model_ticks,
    )
    return Chart(title(study, rows, "MFU against model size"), panels, note=_empty_note(empty))


def _mfu_panels(
    rows: list[dict[str, Any]],
    mfu_lines: tuple[float, ...],
    panel_of: Callable[[dict[str, Any]], str],
    x_of: Callable[[dict[str, Any]], float],
    xlabel: str,
    xticks: Callable[[list[dict[str, Any]]], tuple[tuple[float, str], ...]] | None = None,
) -> tuple[tuple[Panel, ...], list[str]]:
    """MFU (%) against ``x_of`` on a log axis: a panel per ``panel_of`` value, a line per
    combination of the varying keys other than model and GPU count; rows with no plan are
    missing points, counted in the panel's note; a panel with none is left out and named
    (the second item)."""
    keys = [k for k in varying(rows, axis_keys(rows)) if k not in ("model", "gpus")]
    hlines = tuple((100 * m, f"{m:.0%} MFU") for m in mfu_lines)
    panels, empty = [], []
    for name, members in _groups(rows, panel_of).items():
        lines = []
        for text, points in _groups(
            [r for r in members if _feasible(r)], lambda r: label(r, keys)
        ).items():
            ordered = sorted(points, key=x_of)
            lines.append(
                Line(
                    text,
                    tuple((x_of(r), 100 * float(r["mfu"])) for r in ordered),
                    tuple(r["id"] for r in ordered),
                )
            )
        missing = sum(not _feasible(r) for r in members)
        if not lines:  # nothing to draw: an empty panel with a 0-100 axis says nothing
            empty.append(name)
            continue
        panels.append(
            Panel(
                title=name,
                xlabel=xlabel,
                ylabel="MFU, %",
                lines=tuple(lines),
                hlines=hlines,
                xlog=True,
                ylim=(0.0, 100.0),
                note=f"no plan: {missing} of {len(members)}" if missing else "",
                xticks=xticks(members) if xticks else (),
            )
        )
    return tuple(panels), empty
