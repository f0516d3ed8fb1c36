"""Standard views of a sweep's results (``planner plot``); matplotlib is an optional extra
(``pip install .[plot]``). ``charts`` turns rows into panels of bars and lines (data, tested);
``render`` draws them.

Kinds: ``mfu-vs-gpus`` (a panel per model, a line per variant, optional MFU reference lines),
``mfu-vs-model`` (a panel per GPU count, a line per variant against model size), ``breakdown``
(step time by term, a stacked bar per row, a panel per model), ``memory`` (HBM items and the
offload tiers' stacked per row, HBM capacity marked), ``offload-bandwidth`` (speed relative to
unlimited offload bandwidth — or the study's highest — against bandwidth, a line per model),
``least-hardware`` (the least hardware — HBM, offload capacity, GPUs, a bandwidth — meeting a
min-hardware study's goal, against model size, with GiB reference lines), ``goodput-vs-gpus``
(per model, the goodput and the days to train without and with failures against GPU count: where
adding GPUs stops paying; the study needs ``train_tokens``). ``bars`` builds the two bar charts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from planner.errors import InputError
from planner.specs.quantities import PLOT_KINDS
from planner.studies.plots import bars, charts
from planner.studies.plots.goodput import goodput_vs_gpus
from planner.studies.rows import read_rows_counted, read_study
from planner.studies.study import Study, scenarios

KINDS = PLOT_KINDS
FORMATS = ("png", "svg")
"""Image formats, named by the --out file's suffix."""


def chart(
    results: Path,
    kind: str,
    mfu_lines: tuple[float, ...] = (),
    gbps_lines: tuple[float, ...] = (),
    warn: Callable[[str], None] | None = None,
    gib_lines: tuple[float, ...] = (),
) -> charts.Chart:
    """The chart of ``kind`` for the rows in ``results`` (no drawing). Lines of rows.jsonl
    that are not rows, and rows a chart cannot place (charts.row_problem), are left out and
    counted in one ``warn`` line; a chart larger than charts' limits is refused."""
    if kind not in KINDS:
        raise InputError(f"--kind {kind!r}: allowed: {', '.join(KINDS)}")
    if not results.is_dir():
        raise InputError(f"{results}: no such results folder (a sweep's --out)")
    left_out: list[str] = []
    rows = _rows(results, left_out.append)
    if not any(r.get("step_time_s") is not None for r in rows):
        why = left_out[0].removeprefix(f"{results}: ") if left_out else "run planner sweep"
        raise InputError(f"{results}: no finished feasible rows to plot; {why}")
    for note in left_out if warn is not None else ():
        warn(note)
    study = read_study(results)
    if study is not None:  # the study's order, not the order in which workers finished
        order = {s["id"]: i for i, s in enumerate(scenarios(study))}
        rows.sort(key=lambda row: order.get(row["id"], len(order)))
    drawn = _build(kind, rows, study, mfu_lines, gbps_lines, gib_lines)
    too_large = charts.size_problem(drawn)
    if too_large:
        raise InputError(
            f"{results}: --kind {kind}: {too_large}; plot a study with fewer axis values"
        )
    return drawn


def _rows(results: Path, warn: Callable[[str], None] | None) -> list[dict]:
    """The rows a chart can place; the others counted in one ``warn`` line."""
    rows, unreadable = read_rows_counted(results)
    kept = [row for row in rows if not charts.row_problem(row)]
    left_out = [row for row in rows if charts.row_problem(row)]
    if (unreadable or left_out) and warn is not None:
        parts = [f"{_count(unreadable, 'line')} of rows.jsonl that are not rows"] * bool(unreadable)
        if left_out:
            first = left_out[0]
            parts.append(
                f"{_count(len(left_out), 'row')} a chart cannot place (first: {first['id']!r}: "
                f"{charts.row_problem(first)})"
            )
        warn(f"{results}: left out " + " and ".join(parts))
    return kept


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def _build(
    kind: str,
    rows: list[dict],
    study: Study | None,
    mfu_lines: tuple[float, ...],
    gbps_lines: tuple[float, ...],
    gib_lines: tuple[float, ...] = (),
) -> charts.Chart:
    if kind == "mfu-vs-gpus":
        return charts.mfu_vs_gpus(rows, study, mfu_lines)
    if kind == "mfu-vs-model":
        return charts.mfu_vs_model(rows, study, mfu_lines)
    if kind == "offload-bandwidth":
        return charts.offload_bandwidth(rows, study, gbps_lines, mfu_lines)
    if kind == "least-hardware":
        return charts.least_hardware(rows, study, gib_lines)
    return {
        "breakdown": bars.breakdown,
        "memory": bars.memory,
        "goodput-vs-gpus": goodput_vs_gpus,
    }[kind](rows, study)


def check_target(target: Path) -> str:
    """The image format of ``target`` (its suffix: FORMATS), refused before any drawing when
    it is a folder, has another suffix, or lies in a folder that does not exist or cannot be
    written."""
    if target.is_dir():
        raise InputError(f"--out {target}: a folder; name an image file (.png or .svg)")
    image_format = target.suffix.lower().removeprefix(".")
    if image_format not in FORMATS:
        raise InputError(
            f"--out {target}: the suffix names the format; allowed: "
            + ", ".join(f".{f}" for f in FORMATS)
        )
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"--out {target}: no folder {folder}")
    writable = os.access(target, os.W_OK) if target.exists() else os.access(folder, os.W_OK)
    if not writable:
        raise InputError(f"--out {target}: not writable here (permission denied)")
    return image_format


def plot(
    results: Path,
    kind: str,
    out: Path | None = None,
    mfu_lines: tuple[float, ...] = (),
    gbps_lines: tuple[float, ...] = (),
    warn: Callable[[str], None] | None = None,
    gib_lines: tuple[float, ...] = (),
) -> Path:
    """Draw one view of the rows in ``results`` to ``out`` (PNG or SVG by suffix; default
    ``results/KIND.png``). The target is checked first, the image is drawn in memory and then
    written, so a failed write (a full disk) is an OSError, never a reported success. What was
    left out is said through ``warn`` once the image is written."""
    target = out or results / f"{kind}.png"
    if out is not None:  # a wrong --out is said at once, before reading or drawing anything
        check_target(target)
    if not results.is_dir():
        raise InputError(f"{results}: no such results folder (a sweep's --out)")
    image_format = check_target(target)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("planner plot needs matplotlib: pip install '.[plot]'") from None
    from planner.studies.plots.render import draw

    notes: list[str] = []
    drawn = chart(results, kind, mfu_lines, gbps_lines, notes.append, gib_lines)
    image = draw(drawn, image_format)
    try:
        with target.open("wb") as sink:
            sink.write(image)
    except OSError as error:  # a full disk, a special file: never a reported success
        raise InputError(f"--out {target}: {error.strerror or error}") from None
    for note in notes if warn is not None else ():
        warn(note)
    return target
