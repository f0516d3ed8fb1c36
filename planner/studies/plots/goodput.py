"""The goodput chart (``planner plot --kind goodput-vs-gpus``, issue 35): where adding GPUs stops
paying, from a sweep's rows with a token budget (their ``goodput``, ``days`` and
``effective_days`` columns). Built like the charts of planner.studies.plots.charts, with its
panels, lines and labels."""

from __future__ import annotations

from typing import Any

from planner.studies.plots.charts import (
    Chart,
    Line,
    Panel,
    _feasible,
    _groups,
    axis_keys,
    label,
    title,
    varying,
)
from planner.studies.study import Study


def goodput_vs_gpus(rows: list[dict[str, Any]], study: Study | None) -> Chart:
    """Where adding GPUs stops paying: per model, the goodput (%) against GPU count, and the
    days to train the study's token budget without and with failures, a line per combination
    of the other varying keys. Rows without a goodput (no train_tokens, no plan) are counted
    as missing in the panels' notes."""
    keys = [k for k in varying(rows, axis_keys(rows)) if k not in ("model", "gpus")]

    def has(row: dict[str, Any]) -> bool:
        return _feasible(row) and row.get("goodput") is not None

    panels = []
    for name, members in _groups(rows, lambda r: str(r["model"])).items():
        found = [r for r in members if has(r)]
        missing = len(members) - len(found)
        note = f"no goodput: {missing} of {len(members)}" if missing else ""
        goodput_lines, day_lines = [], []
        for text, points in _groups(found, lambda r: label(r, keys)).items():
            ordered = sorted(points, key=lambda r: float(r["gpus"]))
            ids = tuple(r["id"] for r in ordered)
            prefix = f"{text}: " if text else ""
            goodput_lines.append(
                Line(
                    text,
                    tuple((float(r["gpus"]), 100 * float(r["goodput"])) for r in ordered),
                    ids,
                )
            )
            for key, what in (("days", "no failures"), ("effective_days", "with failures")):
                usable = [r for r in ordered if r.get(key) is not None]
                day_lines.append(
                    Line(
                        prefix + what,
                        tuple((float(r["gpus"]), float(r[key])) for r in usable),
                        tuple(r["id"] for r in usable),
                    )
                )
        panels.append(
            Panel(
                title=f"{name}: goodput",
                xlabel="GPUs",
                ylabel="goodput, %",
                lines=tuple(goodput_lines),
                xlog=True,
                ylim=(0.0, 100.0),
                note=note,
            )
        )
        panels.append(
            Panel(
                title=f"{name}: days to train",
                xlabel="GPUs",
                ylabel="days",
                lines=tuple(day_lines),
                xlog=True,
                note=note,
            )
        )
    return Chart(title(study, rows, "Goodput and days to train against GPU count"), panels)
