"""Drawing a chart (planner.studies.plots.charts) with matplotlib: panels on a grid sized to their
content, stacked bars or lines, reference lines, one legend for the figure (series share their
colour across panels) naming only what is drawn, the chart's title (wrapped to the figure) and
note on top.

Colours are Okabe and Ito's colour-blind-safe palette ("Color Universal Design", 2008: black,
orange, sky blue, bluish green, yellow, blue, vermillion, reddish purple) with a grey and Paul
Tol's wine (https://personal.sron.nl/~pault/, "muted") for the eleven step-time terms, each term
its fixed colour so that neighbours in a stack always differ; lines past eight take a second
line style and marker.
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any

from planner.studies.plots.charts import Chart, Panel

OKABE_ITO = (
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#000000",  # black
    "#F0E442",  # yellow (last: faint as a line on white)
)
SERIES_COLOURS = {
    "forward compute": "#0072B2",
    "backward compute": "#56B4E9",
    "recompute": "#CC79A7",
    "TP communication (exposed)": "#E69F00",
    "CP communication (exposed)": "#F0E442",
    "expert all-to-all (exposed)": "#666666",
    "PP transfers (exposed)": "#D55E00",
    "offload transfers (exposed)": "#009E73",
    "pipeline bubble": "#BBBBBB",
    "DP communication (exposed)": "#000000",
    "optimizer step": "#882255",
    "weights": "#0072B2",
    "gradients": "#56B4E9",
    "optimizer": "#E69F00",
    "activations": "#009E73",
    "logits and reserve": "#BBBBBB",
}
"""Fixed colours of the bar charts' series (a memory item keeps its colour in every tier, the
offload tier hatched); bottom-to-top neighbours never share a hue."""
STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")

BAR_WIDTH_IN = 0.55
"""Figure width per bar."""
TICK_WIDTH_IN = 0.62
"""Figure width per named x tick (a model name and its size on two lines)."""
PANEL_MIN_WIDTH_IN, PANEL_HEIGHT_IN = 4.2, 3.4
MAX_COLUMNS = 4
LEGEND_PAD_IN, LEGEND_CHAR_IN = 0.6, 0.058
"""The legend's width: a marker and margins, then per character of the longest line (7.5 pt)."""
MAX_WIDTH_PX = 2400
"""Wider figures get a lower resolution, so a committed image stays a few hundred KB."""
TITLE_CHAR_IN = 0.085
"""Width of a title character (11 pt): the title wraps to the figure."""


def draw(chart: Chart, image_format: str) -> bytes:
    """The chart as an image file's bytes (``image_format``: png or svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(chart.panels)
    panel_width = max(PANEL_MIN_WIDTH_IN, *(_panel_width(p) for p in chart.panels))
    fit = max(1, int(24 // panel_width))
    columns = max(1, min(count, chart.columns or MAX_COLUMNS, fit))
    rows = math.ceil(count / columns)
    names = _legend_names(chart)
    legend_in = LEGEND_PAD_IN + LEGEND_CHAR_IN * max(
        (len(line) for name in names for line in name.split("\n")), default=0
    )
    width = panel_width * columns + (legend_in if names else 0.0)
    heading = _heading(chart, width)
    heading_in = 0.25 + 0.22 * heading.count("\n")
    figure, grid = plt.subplots(
        rows,
        columns,
        figsize=(width, PANEL_HEIGHT_IN * rows + heading_in + 0.3),
        squeeze=False,
    )
    colours = _colours(names)
    handles: dict[str, Any] = {}
    for index, panel in enumerate(chart.panels):
        axes = grid[index // columns][index % columns]
        _panel(axes, panel, chart, colours, handles)
    for index in range(count, rows * columns):
        grid[index // columns][index % columns].set_visible(False)
    figure.suptitle(heading, fontsize=11, y=0.995, va="top")
    handles = {name: handles[name] for name in names if name in handles}  # drawn ones only
    right = 1.0 - (legend_in / width if handles else 0.0)
    if handles:
        figure.legend(
            list(handles.values()),
            list(handles),
            loc="center left",
            bbox_to_anchor=(right, 0.5),
            fontsize=7.5,
            frameon=False,
        )
    top = 1.0 - heading_in / figure.get_figheight()
    figure.tight_layout(rect=(0, 0, right, top))
    image = io.BytesIO()
    dpi = min(110, MAX_WIDTH_PX / figure.get_figwidth())
    figure.savefig(image, format=image_format, dpi=dpi)
    plt.close(figure)
    return image.getvalue()


def _panel_width(panel: Panel) -> float:
    """Room for the panel's bars, or for its named ticks side by side."""
    return max(BAR_WIDTH_IN * len(panel.bars), TICK_WIDTH_IN * len(panel.xticks)) + 1.0


def _heading(chart: Chart, width_in: float) -> str:
    """The title, then the note, each wrapped to the figure's width."""
    chars = max(40, int(width_in / TITLE_CHAR_IN))
    parts = [textwrap.fill(chart.title, chars)]
    if chart.note:
        parts.append(textwrap.fill(chart.note, chars))
    return "\n".join(parts)


def _legend_names(chart: Chart) -> list[str]:
    """Every series drawn (a line with points, a bar segment above zero), in order."""
    names: dict[str, None] = {}
    drawn = {name for p in chart.panels for bar in p.bars for name, value in bar.segments
             if value > 0}  # fmt: skip
    for panel in chart.panels:  # bar series in stacking order, bottom first
        for bar in panel.bars:
            names.update(dict.fromkeys(name for name, _ in bar.segments if name in drawn))
        names.update(dict.fromkeys(line.label for line in panel.lines if line.points))
    if any(bar.capacity is not None and bar.segments for p in chart.panels for bar in p.bars):
        names["HBM capacity"] = None
    return list(names)


def _colours(names: list[str]) -> dict[str, tuple[str, str, str]]:
    """(colour, line style, marker) per series name, the same in every panel: a bar series by
    its base name (SERIES_COLOURS), a line by its place in the legend."""
    styles: dict[str, tuple[str, str, str]] = {}
    lines = 0
    for name in names:
        base = name.split(" (")[0] if name not in SERIES_COLOURS else name
        if base in SERIES_COLOURS:
            styles[name] = (SERIES_COLOURS[base], "-", "o")
            continue
        turn = lines // len(OKABE_ITO)
        styles[name] = (
            OKABE_ITO[lines % len(OKABE_ITO)],
            STYLES[turn % len(STYLES)],
            MARKERS[turn % len(MARKERS)],
        )
        lines += 1
    return styles


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
        if not line.points:
            continue
        xs, ys = [p[0] for p in line.points], [p[1] for p in line.points]
        colour, style, marker = colours[line.label]
        (drawn,) = axes.plot(
            xs, ys, marker=marker, markersize=3.5, color=colour, linestyle=style, linewidth=1.4
        )
        handles.setdefault(line.label, drawn)
    if panel.xlog and panel.lines:
        axes.set_xscale("log", base=2)
        axes.minorticks_off()
    if panel.xticks:
        positions, names = zip(*panel.xticks, strict=True)
        axes.set_xticks(positions, names, fontsize=6.5)
        axes.minorticks_off()
    elif panel.xlog and panel.lines:
        ticks = sorted({x for line in panel.lines for x, _ in line.points})
        axes.set_xticks(ticks, [f"{x:,g}" for x in ticks])
    if panel.ylim is not None:
        axes.set_ylim(*panel.ylim)
    for y, text in panel.hlines:
        axes.axhline(y, color="#444444", linestyle="--", linewidth=0.9)
        axes.annotate(
            text, (0.99, y), xycoords=("axes fraction", "data"), fontsize=7, va="bottom",
            ha="right", annotation_clip=False,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5},
        )  # fmt: skip
    for x, text in panel.vlines:
        axes.axvline(x, color="#444444", linestyle="--", linewidth=0.9)
        axes.annotate(
            text, (x, 0.03), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
            ha="right", va="bottom", xytext=(-2, 0), textcoords="offset points",
        )  # fmt: skip


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
                color=colours[name][0],
                width=0.75,
                hatch="///" if name in chart.hatched else None,
                edgecolor="white",
                linewidth=0.4,
            )
            handles.setdefault(name, drawn)
            bottom += value
        if bar.capacity is not None and bar.segments:
            (mark,) = axes.plot([x - 0.45, x + 0.45], [bar.capacity] * 2, color="black", lw=1.4)
            handles.setdefault("HBM capacity", mark)
        if bar.top:
            axes.annotate(bar.top, (x, bottom), ha="center", va="bottom", fontsize=6.5,
                          xytext=(0, 1), textcoords="offset points")  # fmt: skip
        if bar.note:  # inside the panel, from its floor up: never clipped at an edge
            axes.annotate(
                bar.note, (x, 0.03), xycoords=("data", "axes fraction"), rotation=90,
                ha="center", va="bottom", fontsize=7, color="#555555",
            )  # fmt: skip
    axes.set_xlim(-0.6, len(panel.bars) - 0.4)
    labels = [bar.label for bar in panel.bars]
    crowded = sum(map(len, labels)) * 0.075 > BAR_WIDTH_IN * len(labels) + 0.6
    axes.set_xticks(
        list(positions), labels, rotation=35 if crowded else 0, ha="right" if crowded else "center"
    )
