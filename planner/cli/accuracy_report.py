"""Rich tables of the accuracy commands: predicted vs measured step time (planner validate), its
cross-validation, and a calibration's parameters and errors (planner calibrate). Apart from
report, which renders the planning queries' answers."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.cli.layout import print_table


def print_validation(console: Console, result) -> None:
    """Predicted vs measured per run, then mean and worst error per group and overall."""
    table = Table(title="Predicted vs measured step time", title_justify="left")
    table.add_column("run")
    table.add_column("GPUs", justify="right", no_wrap=True)
    table.add_column("strategy")
    for column in ("meas. s", "pred. s", "error", "MFU meas.", "MFU pred."):
        table.add_column(column, justify="right", no_wrap=True)
    for r in result.runs:
        table.add_row(
            r.id,
            str(r.gpus),
            r.strategy,
            f"{r.measured_step_time_s:.4g}",
            f"{r.predicted_step_time_s:.4g}",
            f"{r.error:+.1%}",
            f"{r.measured_mfu:.1%}",
            f"{r.predicted_mfu:.1%}",
        )
    print_table(console, table)
    summary = Table(title="Absolute step-time error", title_justify="left")
    for column in ("group", "runs", "mean", "worst"):
        summary.add_column(
            column, justify="left" if column == "group" else "right", no_wrap=column != "group"
        )
    for g in [*result.groups, result.overall]:
        summary.add_row(g.group, str(g.runs), f"{g.mean_abs_error:.1%}", f"{g.worst_abs_error:.1%}")
    print_table(console, summary)
    with_memory = [r for r in result.runs if r.memory_error is not None]
    if with_memory:
        memory = Table(title="Peak memory, measured and predicted (GiB)", title_justify="left")
        for column in ("run", "measured", "predicted", "error"):
            memory.add_column(column, justify="left" if column == "run" else "right")
        for r in with_memory:
            memory.add_row(
                r.id,
                f"{r.measured_memory_gib:.1f}",
                f"{r.predicted_memory_gib:.1f}",
                f"{r.memory_error:+.1%}",
            )
        print_table(console, memory)
        o = result.overall
        console.print(
            f"memory: {o.memory_runs} runs, mean absolute error {o.memory_mean_abs_error:.1%}, "
            f"median {o.memory_median_error:+.1%} (the model's HBM less its fixed reserve, "
            "against the allocator's reserved peak)"
        )


def print_network_validation(console: Console, result) -> None:
    """Per nccl-tests curve the model's bus-bandwidth error, then the summaries by size."""
    table = Table(title="Predicted vs measured bus bandwidth (nccl-tests)", title_justify="left")
    table.add_column("curve")
    table.add_column("system")
    for column in ("ranks", "collective", "algorithm", "points", "mean", "worst"):
        table.add_column(column, justify="right", no_wrap=True)
    for c in result.curves:
        mean = "-" if c.mean_abs_error is None else f"{c.mean_abs_error:.0%}"
        worst = "-" if c.worst_abs_error is None else f"{c.worst_abs_error:.0%}"
        algorithm = c.algorithm if c.modelled else f"{c.algorithm} (left out)"
        table.add_row(
            c.id, c.system, str(c.ranks), c.collective, algorithm, str(len(c.points)), mean, worst
        )
    print_table(console, table)
    summary = Table(title="Absolute bus-bandwidth error, 64 KiB to 4 GiB", title_justify="left")
    for column in ("curves", "sizes", "points", "mean", "signed mean"):
        summary.add_column(column, justify="left" if column == "curves" else "right")
    for label, s in (("modelled", result.modelled), ("left out (SHARP)", result.left_out)):
        if s is None:
            continue
        summary.add_row(f"{label}: {s.curves}", "all", str(s.points), f"{s.mean_abs_error:.0%}", "")
        for band in s.bands:
            summary.add_row(
                "",
                band.band,
                str(band.points),
                f"{band.mean_abs_error:.0%}",
                f"{band.mean_error:+.0%}",
            )
    print_table(console, summary)
    console.print(
        "mean: over curves of each curve's mean; signed: negative where the model is slower"
    )


def print_cross_validation(console: Console, result) -> None:
    """Leave-one-source-out error per source, what each fold was fitted on, and overall."""
    table = Table(
        title="Cross-validated step-time error (leave one source out)", title_justify="left"
    )
    for column in ("left out", "runs", "mean", "worst", "calibrated on"):
        numeric = column in ("runs", "mean", "worst")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=numeric)
    for fold in result.folds:
        s = fold.summary
        fitted = "; ".join(f"{k}: {v}" for k, v in fold.calibrated_on.items())
        table.add_row(
            fold.source, str(s.runs), f"{s.mean_abs_error:.1%}", f"{s.worst_abs_error:.1%}", fitted
        )
    o, i = result.overall, result.in_sample
    table.add_row(
        "[bold]all", str(o.runs), f"{o.mean_abs_error:.1%}", f"{o.worst_abs_error:.1%}", ""
    )
    print_table(console, table)
    console.print(
        f"in-sample (catalog profiles, fitted on every run): mean {i.mean_abs_error:.1%}, "
        f"worst {i.worst_abs_error:.1%}"
    )


def print_calibration(
    console: Console,
    stack: str,
    before: dict,
    after: dict,
    runs,
    written: str | None,
    profile: str = "",
    warnings: list[str] = (),
) -> None:
    """A calibration's parameters before and after, the runs' errors after it, what the fit
    warns of, and where the calibrated profile (named ``profile``) was written."""
    table = Table(title=f"Calibrated parameters of stack {stack}", title_justify="left")
    table.add_column("parameter")
    table.add_column("before", justify="right", no_wrap=True)
    table.add_column("after", justify="right", no_wrap=True)
    for name, value in after.items():
        table.add_row(name, f"{before[name]:.4g}", f"{value:.4g}")
    print_table(console, table)
    errors = Table(title="Step-time error after calibration", title_justify="left")
    errors.add_column("run")
    errors.add_column("error", justify="right", no_wrap=True)
    for r in runs:
        errors.add_row(r.id, f"{r.error:+.1%}")
    print_table(console, errors)
    mean = sum(abs(r.error) for r in runs) / len(runs)
    worst = max(abs(r.error) for r in runs)
    console.print(f"{len(runs)} runs: mean absolute error {mean:.1%}, worst {worst:.1%}")
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", markup=True)
    if written:
        console.print(f"calibrated stack profile {profile or stack} written to {written}")
