"""Standard views of a sweep's rows (``planner plot``); matplotlib is an optional extra
(``pip install .[plot]``).

Kinds: ``mfu-vs-gpus`` (MFU against GPU count, a line per model and hardware variant),
``breakdown`` (step-time terms, stacked bars per scenario), ``memory`` (HBM per item, stacked
bars), ``offload-bandwidth`` (relative efficiency — step time at the highest bandwidth over step
time at each — against offload bandwidth, a line per model: the poster's "how fast should offload
memory be" figure), ``offload-capacity`` (offload memory used against model size).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import hardware_catalog
from planner.errors import InputError
from planner.quantities import PLOT_KINDS
from planner.sweep import HARDWARE_AXES, read_rows

KINDS = PLOT_KINDS
TIME_TERMS = (
    "forward",
    "backward",
    "recompute",
    "tp_comm",
    "pp_comm",
    "offload",
    "bubble",
    "dp_comm",
    "optimizer",
)
MEMORY_ITEMS = ("weights", "gradients", "optimizer", "activations")
MAX_BARS = 40


def plot(results: Path, kind: str, out: Path | None = None) -> Path:
    """Draw one view of the rows in ``results`` to ``out`` (PNG or SVG by suffix)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("planner plot needs matplotlib: pip install '.[plot]'") from None
    if kind not in KINDS:
        raise InputError(f"--kind {kind!r}: allowed: {', '.join(KINDS)}")
    rows = [r for r in read_rows(results) if r.get("step_time_s") is not None]
    if not rows:
        raise InputError(f"{results}: no finished feasible rows to plot (run planner sweep)")
    figure, axes = plt.subplots(figsize=(9, 5.5))
    DRAW[kind](axes, rows)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    target = out or results / f"{kind}.png"
    figure.savefig(target, dpi=120)
    plt.close(figure)
    return target


def _variant(row: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    parts = [row["system"]] + [
        f"{a}={row[a]:g}" for a in HARDWARE_AXES if a in row and a not in skip
    ]
    return " ".join(parts)


def _mfu_vs_gpus(axes, rows) -> None:
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        lines[f"{row['model']} ({_variant(row)})"].append((row["gpus"], row["mfu"]))
    for label, points in sorted(lines.items()):
        points.sort()
        axes.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("GPUs")
    axes.set_ylabel("MFU, %")
    axes.legend(fontsize=7)


def _stacked(axes, rows, columns: list[tuple[str, str]], ylabel: str) -> None:
    rows = rows[:MAX_BARS]
    labels = [f"{r['model']} {r['gpus']}" for r in rows]
    bottom = [0.0] * len(rows)
    for key, name in columns:
        values = [float(r.get(key) or 0.0) for r in rows]
        axes.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_ylabel(ylabel)
    axes.tick_params(axis="x", rotation=70, labelsize=7)
    axes.legend(fontsize=7)


def _breakdown(axes, rows) -> None:
    _stacked(axes, rows, [(f"time_{t}_s", t) for t in TIME_TERMS], "seconds per step")


def _memory(axes, rows) -> None:
    _stacked(axes, rows, [(f"memory_hbm_{i}_gib", i) for i in MEMORY_ITEMS], "HBM GiB per GPU")


def _offload_bandwidth(axes, rows) -> None:
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if "offload_gbps" in row:
            key = f"{row['model']} {row['gpus']} ({_variant(row, ('offload_gbps',))})"
            groups[key].append((row["offload_gbps"], row["step_time_s"]))
    if not groups:
        raise InputError("offload-bandwidth plots need a study with hardware.offload_gbps")
    for label, points in sorted(groups.items()):
        points.sort()
        best = points[-1][1]
        axes.plot(
            [p[0] for p in points], [100 * best / p[1] for p in points], marker="o", label=label
        )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("offload bandwidth per GPU, GB/s")
    axes.set_ylabel("efficiency vs the highest bandwidth, %")
    axes.legend(fontsize=7)


def _offload_capacity(axes, rows) -> None:
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        params = hardware_catalog.load_model(row["model"]).params
        points[f"{row['gpus']} GPUs ({_variant(row)})"].append(
            (params / 1e12, row.get("memory_offload_1_gib") or 0.0)
        )
    for label, values in sorted(points.items()):
        values.sort()
        axes.plot([v[0] for v in values], [v[1] for v in values], marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("model parameters, trillions")
    axes.set_ylabel("offload memory used per GPU, GiB")
    axes.legend(fontsize=7)


DRAW = {
    "mfu-vs-gpus": _mfu_vs_gpus,
    "breakdown": _breakdown,
    "memory": _memory,
    "offload-bandwidth": _offload_bandwidth,
    "offload-capacity": _offload_capacity,
}
