"""Drawing a chart (planner.studies.plots.charts) with matplotlib: panels on a grid sized to their
content, stacked bars or lines, reference lines, one legend for the figure (series share their
colour across panels), the chart's title on top."""

from __future__ import annotations

import io
import math
from typing import Any

from planner.studies.plots.charts import Chart, Panel

BAR_WIDTH_IN = 0.42
"""Figure width per bar: every row gets a readable bar, however many there are."""
PANEL_MIN_WIDTH_IN, PANEL_HEIGHT_IN = 4.5, 3.6
MAX_COLUMNS = 4
LEGEND_PAD_IN, LEGEND_CHAR_IN = 0.6, 0.052
"""The legend's width: a marker and margins, then per character of the longest name (7 pt)."""
MAX_WIDTH_PX = 2400
"""Wider figures get a lower resolution, so a committed image stays a few hundred KB."""


def draw(chart: Chart, image_format: str) -> bytes:
    """The chart as an image file's bytes (``image_format``: png or svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(chart.panels)
    most_bars = max((len(p.bars) for p in chart.panels), default=0)
    panel_width = max(PANEL_MIN_WIDTH_IN, BAR_WIDTH_IN * most_bars + 1.2)
    columns = max(1, min(count, MAX_COLUMNS, int(24 // panel_width) or 1))
    rows = math.ceil(count / columns)
    figure, grid = plt.subplots(
        rows,
        columns,
        figsize=(panel_width * columns, PANEL_HEIGHT_IN * rows + 1.0),
        squeeze=False,
    )
    colours = _colours(chart, plt)
    handles: dict[str, Any] = {}
    for index, panel in enumerate(chart.panels):
        axes = grid[index // columns][index % columns]
        _panel(axes, panel, chart, colours, handles)
    for index in range(count, rows * columns):
        grid[index // columns][index % columns].set_visible(False)
    figure.suptitle(chart.title, fontsize=11)
    order = [*colours, "HBM capacity"]
    handles = {name: handles[name] for name in order if name in handles}
    legend_in = LEGEND_PAD_IN + LEGEND_CHAR_IN * max((len(name) for name in handles), default=0)
    figure.set_figwidth(panel_width * columns + legend_in)
    if handles:
        figure.legend(
            list(handles.values()),
            list(handles),
            loc="center left",
            bbox_to_anchor=(1.0 - (legend_in - 0.1) / figure.get_figwidth(), 0.5),
            fontsize=7,
            frameon=False,
        )
    figure.tight_layout(rect=(0, 0, 1.0 - legend_in / figure.get_figwidth(), 0.96))
    image = io.BytesIO()
    dpi = min(110, MAX_WIDTH_PX / figure.get_figwidth())
    figure.savefig(image, format=image_format, dpi=dpi)
    plt.close(figure)
    return image.getvalue()


def _colours(chart: Chart, plt: Any) -> dict[str, Any]:
    """A colour per series name (segment or line label), the same in every panel."""
    names: dict[str, None] = {}
    for panel in chart.panels:
        for bar in panel.bars:
            names.update(dict.fromkeys(name for name, _ in bar.segments))
        names.update(dict.fromkeys(line.label for line in panel.lines))
    cycle = plt.get_cmap("tab20").colors
    return {name: cycle[i % len(cycle)] for i, name in enumerate(names)}


def _panel(axes: Any, panel: Panel, chart: Chart, colours: dict, handles: dict) -> None:
    note = f"\n{panel.note}" if panel.note else ""  # a second title line: it never covers data
    axes.set_title(panel.title + note, fontsize=8)
    axes.set_xlabel(panel.xlabel, fontsize=8)
    axes.set_ylabel(panel.ylabel, fontsize=8)
    axes.tick_params(labelsize=7)
    axes.grid(alpha=0.3)
    if panel.bars:
        _bars(axes, panel, chart, colours, handles)
    for line in panel.lines:
        xs, ys = [p[0] for p in line.points], [p[1] for p in line.points]
        (drawn,) = axes.plot(xs, ys, marker="o", markersize=3, color=colours[line.label])
        handles.setdefault(line.label, drawn)
    if panel.xlog and panel.lines:
        axes.set_xscale("log", base=2)
        axes.minorticks_off()
    if panel.xticks:
        positions, names = zip(*panel.xticks, strict=True)
        axes.set_xticks(positions, names, rotation=45, ha="right")
        axes.minorticks_off()
    elif panel.xlog and panel.lines:
        ticks = sorted({x for line in panel.lines for x, _ in line.points})
        axes.set_xticks(ticks, [f"{x:,g}" for x in ticks])
    if panel.ylim is not None:
        axes.set_ylim(*panel.ylim)
    for y, text in panel.hlines:
        axes.axhline(y, color="black", linestyle="--", linewidth=0.8)
        axes.annotate(text, (0.01, y), xycoords=("axes fraction", "data"), fontsize=7, va="bottom")
    for x, text in panel.vlines:
        axes.axvline(x, color="black", linestyle="--", linewidth=0.8)
        axes.annotate(text, (x, 0.02), xycoords=("data", "axes fraction"), fontsize=7, rotation=90)


def _bars(axes: Any, panel: Panel, chart: Chart, colours: dict, handles: dict) -> None:
    positions = range(len(panel.bars))
    for x, bar in zip(positions, panel.bars, strict=True):
        bottom = 0.0
        for name, value in bar.segments:
            if value <= 0:
                continue
            drawn = axes.bar(
                x,
                value,
                bottom=bottom,
                color=colours[name],
                width=0.8,
                hatch="//" if name in chart.hatched else None,
                edgecolor="white",
                linewidth=0.3,
            )
            handles.setdefault(name, drawn)
            bottom += value
        if bar.capacity is not None:
            axes.plot([x - 0.45, x + 0.45], [bar.capacity] * 2, color="black", linewidth=1.2)
        if bar.note:
            axes.annotate(
                bar.note, (x, 0), rotation=90, ha="center", va="bottom", fontsize=7, color="dimgray"
            )
    if any(bar.capacity is not None for bar in panel.bars):
        handles.setdefault("HBM capacity", axes.lines[-1])
    axes.set_xticks(
        list(positions), [bar.label for bar in panel.bars], rotation=60, ha="right", fontsize=6
    )
