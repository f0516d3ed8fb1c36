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
from dataclasses import dataclass, field
from typing import Any

from planner.errors import InputError
from planner.specs.hardware import OVERRIDE_LABELS, describe_override
from planner.studies.study import HARDWARE_AXES, JOB_AXES, Study, scenario_model

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


def row_problem(row: dict[str, Any]) -> str:
    """Why a chart cannot place ``row`` ('' if it can): the scenario's names are text, the GPU
    count and batch whole numbers, every number key a finite number or empty, and a feasible row
    (one with a step time) has a positive step time and its MFU."""
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
    if key == "global_batch":
        return f"batch {value:,}"
    if key in OVERRIDE_LABELS and isinstance(value, float | int):
        return describe_override(key, value)
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{key.removeprefix('model_')}={shown}"


def label(row: dict[str, Any], keys: Iterable[str]) -> str:
    return ", ".join(describe(k, row.get(k)) for k in keys) or "plan"


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


def _bar_panels(
    rows: list[dict[str, Any]], ylabel: str, bar: Callable[[dict[str, Any], str], Bar]
) -> tuple[Panel, ...]:
    """A panel per model, a bar per row (feasible or not) labelled by the other varying keys."""
    keys = [k for k in varying(rows, axis_keys(rows)) if k != "model"]
    panels = []
    for model, members in _groups(rows, lambda r: str(r["model"])).items():
        bars = tuple(bar(row, label(row, keys)) for row in members)
        panels.append(Panel(title=model, xlabel="", ylabel=ylabel, bars=bars))
    return tuple(panels)


def breakdown(rows: list[dict[str, Any]], study: Study | None) -> Chart:
    """Step time by term, a stacked bar per row."""

    def bar(row: dict[str, Any], text: str) -> Bar:
        segments = tuple((term, float(row.get(f"time_{term}_s") or 0.0)) for term in TIME_TERMS)
        return Bar(row["id"], text, segments if _feasible(row) else (), note=_note(row))

    panels = _bar_panels(rows, "seconds per step", bar)
    return Chart(title(study, rows, "step time by term"), panels)


def memory(rows: list[dict[str, Any]], study: Study | None) -> Chart:
    """Memory per GPU by item, HBM then each offload tier stacked (hatched), with the HBM
    capacity marked on each bar."""
    tiers = sorted({"_".join(k.split("_")[1:3]) for r in rows for k in r if _tier(k)})
    names = {t: "offload" if len(tiers) == 1 else t.replace("_", " ") for t in tiers}

    def bar(row: dict[str, Any], text: str) -> Bar:
        if not _feasible(row):
            return Bar(row["id"], text, (), note=_note(row))
        segments = [
            (f"HBM {i}", float(row.get(f"memory_hbm_{i}_gib") or 0.0)) for i in MEMORY_ITEMS
        ]
        other = float(row.get("memory_hbm_gib") or 0.0) - sum(v for _, v in segments)
        segments.append(("HBM other (logits, reserve)", max(0.0, other)))
        for tier in tiers:
            segments += [
                (f"{names[tier]} {i}", float(row.get(f"memory_{tier}_{i}_gib") or 0.0))
                for i in MEMORY_ITEMS
            ]
        capacity = row.get("memory_hbm_capacity_gib")
        return Bar(row["id"], text, tuple(segments), capacity=capacity)

    panels = _bar_panels(rows, "GiB per GPU", bar)
    hatched = frozenset(f"{names[t]} {i}" for t in tiers for i in MEMORY_ITEMS)
    return Chart(title(study, rows, "memory per GPU by tier and item"), panels, hatched)


def _tier(key: str) -> bool:
    """memory_offload_<n>_gib: an offload tier's total."""
    parts = key.split("_")
    return len(parts) == 4 and parts[:2] == ["memory", "offload"] and parts[3] == "gib"


def mfu_vs_gpus(
    rows: list[dict[str, Any]], study: Study | None, mfu_lines: tuple[float, ...] = ()
) -> Chart:
    """MFU against GPU count: a panel per model, a line per combination of the other varying
    keys; ``mfu_lines`` (fractions) drawn as reference lines."""
    panels = _mfu_panels(
        rows,
        mfu_lines,
        panel_of=lambda r: str(r["model"]),
        x_of=lambda r: float(r["gpus"]),
        xlabel="GPUs",
    )
    return Chart(title(study, rows, "MFU against GPU count"), panels)


def offload_bandwidth(
    rows: list[dict[str, Any]], study: Study | None, gbps_lines: tuple[float, ...] = ()
) -> Chart:
    """Relative performance against offload bandwidth: a line per model, a panel per fixed
    combination of the other varying keys. Each line is relative to its own highest bandwidth:
    "unlimited" where that is at least UNLIMITED_GBPS (the point is then the reference, not
    drawn), else that bandwidth, said on the axis."""
    rows = [r for r in rows if r.get("offload_gbps") is not None]
    if not rows:
        raise InputError("offload-bandwidth plots need a study with hardware.offload_gbps")
    top = max(float(r["offload_gbps"]) for r in rows)
    unlimited = top >= UNLIMITED_GBPS
    reference = "unlimited offload bandwidth" if unlimited else f"{top:g} GB/s"
    keys = [k for k in varying(rows, axis_keys(rows)) if k not in ("model", "offload_gbps")]
    panels = []
    for text, members in _groups(rows, lambda r: label(r, keys)).items():
        lines, unplanned = [], []
        for model, points in _groups(members, lambda r: str(r["model"])).items():
            points = sorted(points, key=lambda r: float(r["offload_gbps"]))
            best = points[-1]
            if not _feasible(best):
                unplanned.append(model)
                continue
            shown = [
                r for r in points if _feasible(r) and float(r["offload_gbps"]) < UNLIMITED_GBPS
            ]
            lines.append(
                Line(
                    model,
                    tuple(
                        (float(r["offload_gbps"]), 100 * best["step_time_s"] / r["step_time_s"])
                        for r in shown
                    ),
                    tuple(r["id"] for r in shown),
                )
            )
        panels.append(
            Panel(
                title=text,
                xlabel="offload bandwidth per GPU, GB/s",
                ylabel=f"% of the speed with {reference}",
                lines=tuple(lines),
                vlines=tuple((g, f"{g:g} GB/s") for g in gbps_lines),
                xlog=True,
                note=f"no plan even at the highest bandwidth: {', '.join(unplanned)}"
                if unplanned
                else "",
            )
        )
    return Chart(title(study, rows, "performance against offload bandwidth"), tuple(panels))


def _model_ticks(rows: list[dict[str, Any]]) -> tuple[tuple[float, str], ...]:
    """Each model's size in trillions of parameters, named by the model."""
    sizes = {str(r["model"]): scenario_model(r).params / 1e12 for r in rows}
    return tuple(sorted((size, name) for name, size in sizes.items()))


def least_hardware(rows: list[dict[str, Any]], study: Study | None) -> Chart:
    """The least hardware that meets a min-hardware study's goal (whatever it minimises: HBM,
    offload capacity, GPUs, a bandwidth), against model size: a line per combination of the
    other varying keys. What a plan happens to use is not a requirement, so plan studies are
    refused."""
    if not rows or len({r.get("minimize") for r in rows}) != 1 or rows[0].get("minimize") is None:
        raise InputError(
            "least-hardware plots need a min-hardware study (query: min-hardware, minimize: "
            "...): the least hardware that meets its goal; what a plan happens to use is not a "
            "requirement"
        )
    minimized, unit = rows[0]["minimize"], rows[0].get("minimum_unit", "")
    quantity = QUANTITY_NAMES.get(minimized, minimized)
    keys = [k for k in varying(rows, axis_keys(rows)) if k != "model"]
    lines, unreachable = [], 0
    for text, members in _groups(rows, lambda r: label(r, keys)).items():
        points = []
        for row in members:
            if row.get("minimum") is None:
                unreachable += 1
                continue
            params = scenario_model(row).params
            points.append((params / 1e12, float(row["minimum"]), row["id"]))
        points.sort()
        shown = text if points else f"{text}: not reachable"
        lines.append(Line(shown, tuple((x, y) for x, y, _ in points), tuple(i for *_, i in points)))
    goal = ""
    if study is not None and (study.goal.min_mfu or study.goal.max_step_s):
        goal = f" for MFU ≥ {study.goal.min_mfu:.0%}" if study.goal.min_mfu else ""
        goal += f" for step ≤ {study.goal.max_step_s:g} s" if study.goal.max_step_s else ""
    panel = Panel(
        title=f"least {quantity}{goal}",
        xlabel="model parameters, trillions",
        ylabel=f"{quantity} per GPU, {unit}" if unit != "GPUs" else "GPUs",
        lines=tuple(lines),
        xlog=True,
        note=f"not reachable: {unreachable} of {len(rows)}" if unreachable else "",
        xticks=_model_ticks(rows),
    )
    return Chart(title(study, rows, f"required {quantity}"), (panel,))


def mfu_vs_model(
    rows: list[dict[str, Any]], study: Study | None, mfu_lines: tuple[float, ...] = ()
) -> Chart:
    """MFU against model size: a panel per GPU count, a line per combination of the other
    varying keys (assumptions, batch, hardware), the models named on the axis; ``mfu_lines`` as
    reference lines."""
    panels = _mfu_panels(
        rows,
        mfu_lines,
        panel_of=lambda r: f"{int(r['gpus']):,} GPUs",
        x_of=lambda r: scenario_model(r).params / 1e12,
        xlabel="model parameters, trillions",
        xticks=_model_ticks,
    )
    return Chart(title(study, rows, "MFU against model size"), panels)


def _mfu_panels(
    rows: list[dict[str, Any]],
    mfu_lines: tuple[float, ...],
    panel_of: Callable[[dict[str, Any]], str],
    x_of: Callable[[dict[str, Any]], float],
    xlabel: str,
    xticks: Callable[[list[dict[str, Any]]], tuple[tuple[float, str], ...]] | None = None,
) -> tuple[Panel, ...]:
    """MFU (%) against ``x_of`` on a log axis: a panel per ``panel_of`` value, a line per
    combination of the varying keys other than model and GPU count; rows with no plan are
    missing points, counted in the panel's note."""
    keys = [k for k in varying(rows, axis_keys(rows)) if k not in ("model", "gpus")]
    hlines = tuple((100 * m, f"{m:.0%} MFU") for m in mfu_lines)
    panels = []
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
    return tuple(panels)
