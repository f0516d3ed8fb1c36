"""The bar charts of a sweep: step time by term (``breakdown``) and memory per GPU by tier and
item (``memory``), as data (planner.studies.plots.charts' Chart, Panel, Bar).

A study crosses several axes, and one bar per row in one panel per model gave 40 to 168 bars
whose labels nobody could read (issue 37). So a panel holds one model and one combination of
the other varying axes but one, the *bar axis* (the GPU count where it varies, else the
numeric axis with the most values, else the axis with the most values), and its bars are that
axis's values, labelled by the value alone (the axis is the x label, the rest the panel's
title). Step time is shown as each term's share of the step (every bar is 100 %, its step time
written above it), so a 10 s step reads as well as a 300 s one; memory in GiB on one y scale
for all panels, the HBM capacity marked on each bar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.specs.hardware import OVERRIDE_LABELS, describe_override
from planner.studies.plots.charts import (
    MEMORY_ITEMS,
    NUMBER_KEYS,
    TIME_TERMS,
    Bar,
    Chart,
    Panel,
    _feasible,
    _groups,
    _hashable,
    axis_keys,
    label,
    title,
    varying,
)
from planner.studies.study import Study

TERM_NAMES = {
    "forward": "forward compute",
    "backward": "backward compute",
    "recompute": "recompute",
    "tp_comm": "TP communication (exposed)",
    "cp_comm": "CP communication (exposed)",
    "ep_comm": "expert all-to-all (exposed)",
    "pp_comm": "PP transfers (exposed)",
    "offload": "offload transfers (exposed)",
    "bubble": "pipeline bubble",
    "dp_comm": "DP communication (exposed)",
    "optimizer": "optimizer step",
}
"""The step-time terms (Estimate.breakdown_s, planner.cost.step) in words: communication terms
are what overlap leaves exposed, as the cost model charges them."""
AXIS_NAMES = {"gpus": "GPUs", "global_batch": "global batch, sequences"}
HEADROOM = 1.12
"""The shared y range's top, as a multiple of the tallest bar: room for the labels above."""


def bar_axis(rows: list[dict[str, Any]], keys: list[str]) -> str | None:
    """The axis whose values are a panel's bars: the GPU count where it varies, else the
    numeric axis with the most values, else the axis with the most values; None if none
    varies."""
    if "gpus" in keys:
        return "gpus"
    count = {k: len({_hashable(r.get(k)) for r in rows}) for k in keys}
    numeric = [k for k in keys if k in NUMBER_KEYS]
    pool = numeric or keys
    return max(pool, key=lambda k: count[k]) if pool else None


def short(key: str, value: object) -> str:
    """A bar axis value as its tick label: '1,024', 'offload 25 GB/s', 'calculon'."""
    if key in ("gpus", "global_batch") and isinstance(value, int):
        return f"{value:,}"
    if key in OVERRIDE_LABELS and isinstance(value, float | int):
        return describe_override(key, value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bar_panels(
    rows: list[dict[str, Any]],
    ylabel: str,
    bar: Callable[[dict[str, Any], str], Bar],
    ylim: Callable[[list[Bar]], tuple[float, float]],
) -> tuple[tuple[Panel, ...], int]:
    """Panels of bars (module docstring) on one y range, and the panels per row: as many as
    the combinations that share a model, at most 4."""
    keys = [k for k in varying(rows, axis_keys(rows)) if k != "model"]
    along = bar_axis(rows, keys)
    others = [k for k in keys if k != along]
    grouped = _groups(rows, lambda r: f"{r['model']}\n{label(r, others, '')}".strip())
    built = {
        name: tuple(bar(r, short(along, r.get(along)) if along else "plan") for r in members)
        for name, members in grouped.items()
    }
    limits = ylim([b for bars in built.values() for b in bars])
    panels = tuple(
        Panel(
            title=name,
            xlabel=AXIS_NAMES.get(along, along) if along else "",
            ylabel=ylabel,
            bars=bars,
            ylim=limits,
        )
        for name, bars in built.items()
    )
    per_model = max(len(_groups(rows, lambda r: label(r, others, ""))), 1)
    return panels, min(per_model, 4)


def breakdown(rows: list[dict[str, Any]], study: Study | None) -> Chart:
    """Each term's share of the step time (%), a stacked bar per row with its step time above
    it; a row without a plan is an empty bar saying why."""

    def bar(row: dict[str, Any], text: str) -> Bar:
        if not _feasible(row):
            return Bar(row["id"], text, (), note=_status(row))
        step = float(row["step_time_s"])
        segments = tuple(
            (TERM_NAMES[term], 100 * float(row.get(f"time_{term}_s") or 0.0) / step)
            for term in TIME_TERMS
        )
        top = f"{step:,.0f} s" if step >= 100 else f"{step:.3g} s"
        return Bar(row["id"], text, segments, top=top)

    panels, columns = _bar_panels(
        rows, "share of the step time, %", bar, lambda bars: (0.0, 100 * HEADROOM)
    )
    return Chart(
        title(study, rows, "where the step time goes (step time above each bar)"),
        panels,
        columns=columns,
    )


def memory(rows: list[dict[str, Any]], study: Study | None) -> Chart:
    """Memory per GPU by item, HBM then each offload tier stacked (hatched), with the HBM
    capacity marked on each bar, on one y scale for every panel."""
    tiers = sorted({"_".join(k.split("_")[1:3]) for r in rows for k in r if _tier(k)})
    names = {t: "offload" if len(tiers) == 1 else t.replace("_", " ") for t in tiers}

    def bar(row: dict[str, Any], text: str) -> Bar:
        if not _feasible(row):
            return Bar(row["id"], text, (), note=_status(row))
        segments = [
            (f"{i} (HBM)", float(row.get(f"memory_hbm_{i}_gib") or 0.0)) for i in MEMORY_ITEMS
        ]
        other = float(row.get("memory_hbm_gib") or 0.0) - sum(v for _, v in segments)
        segments.append(("logits and reserve (HBM)", max(0.0, other)))
        for tier in tiers:
            segments += [
                (f"{i} ({names[tier]})", float(row.get(f"memory_{tier}_{i}_gib") or 0.0))
                for i in MEMORY_ITEMS
            ]
        capacity = row.get("memory_hbm_capacity_gib")
        return Bar(row["id"], text, tuple(segments), capacity=capacity)

    def ylim(bars: list[Bar]) -> tuple[float, float]:
        tallest = max(
            [sum(v for _, v in b.segments) for b in bars] + [b.capacity or 0.0 for b in bars],
            default=1.0,
        )
        return (0.0, HEADROOM * tallest or 1.0)

    panels, columns = _bar_panels(rows, "GiB per GPU", bar, ylim)
    hatched = frozenset(f"{i} ({names[t]})" for t in tiers for i in MEMORY_ITEMS)
    return Chart(
        title(study, rows, "memory per GPU by tier and item"), panels, hatched, columns=columns
    )


def _status(row: dict[str, Any]) -> str:
    return str(row.get("status", "no plan"))


def _tier(key: str) -> bool:
    """memory_offload_<n>_gib: an offload tier's total."""
    parts = key.split("_")
    return len(parts) == 4 and parts[:2] == ["memory", "offload"] and parts[3] == "gib"
