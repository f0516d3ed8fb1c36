"""Standard views of a sweep's results (``planner plot``); matplotlib is an optional extra
(``pip install .[plot]``). ``charts`` turns rows into panels of bars and lines (data, tested);
``render`` draws them.

Kinds: ``mfu-vs-gpus`` (a panel per model, a line per variant, optional MFU reference lines),
``mfu-vs-model`` (a panel per GPU count, a line per variant against model size), ``breakdown``
(step time by term, a stacked bar per row, a panel per model), ``memory`` (HBM items and the
offload tiers' stacked per row, HBM capacity marked), ``offload-bandwidth`` (speed relative to
unlimited offload bandwidth — or the study's highest — against bandwidth, a line per model),
``least-hardware`` (the least hardware — HBM, offload capacity, GPUs, a bandwidth — meeting a
min-hardware study's goal, against model size).
"""

from __future__ import annotations

from pathlib import Path

from planner.errors import InputError
from planner.plots import charts
from planner.quantities import PLOT_KINDS
from planner.sweep import read_rows, read_study, scenarios

KINDS = PLOT_KINDS


def chart(
    results: Path,
    kind: str,
    mfu_lines: tuple[float, ...] = (),
    gbps_lines: tuple[float, ...] = (),
) -> charts.Chart:
    """The chart of ``kind`` for the rows in ``results`` (no drawing)."""
    if kind not in KINDS:
        raise InputError(f"--kind {kind!r}: allowed: {', '.join(KINDS)}")
    rows = read_rows(results)
    if not any(r.get("step_time_s") is not None for r in rows):
        raise InputError(f"{results}: no finished feasible rows to plot (run planner sweep)")
    study = read_study(results)
    if study is not None:  # the study's order, not the order in which workers finished
        order = {s["id"]: i for i, s in enumerate(scenarios(study))}
        rows.sort(key=lambda row: order.get(row["id"], len(order)))
    if kind == "mfu-vs-gpus":
        return charts.mfu_vs_gpus(rows, study, mfu_lines)
    if kind == "mfu-vs-model":
        return charts.mfu_vs_model(rows, study, mfu_lines)
    if kind == "offload-bandwidth":
        return charts.offload_bandwidth(rows, study, gbps_lines)
    return {
        "breakdown": charts.breakdown,
        "memory": charts.memory,
        "least-hardware": charts.least_hardware,
    }[kind](rows, study)


def plot(
    results: Path,
    kind: str,
    out: Path | None = None,
    mfu_lines: tuple[float, ...] = (),
    gbps_lines: tuple[float, ...] = (),
) -> Path:
    """Draw one view of the rows in ``results`` to ``out`` (PNG or SVG by suffix)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("planner plot needs matplotlib: pip install '.[plot]'") from None
    from planner.plots.render import draw

    drawn = chart(results, kind, mfu_lines, gbps_lines)
    target = out or results / f"{kind}.png"
    draw(drawn, target)
    return target
