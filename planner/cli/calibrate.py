"""`planner calibrate`: fit a training stack's efficiency parameters to measured runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.options import available_cpus, whole
from planner.cli.output import EXIT_OK, print_json, slow_progress
from planner.specs import limits as lim
from planner.specs.quantities import CALIBRATED_PARAMETERS

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `calibrate` command's parser, under ``commands``."""
    calibrate_cmd = commands.add_parser(
        "calibrate", help="fit a training stack's efficiency parameters to measured runs"
    )
    calibrate_cmd.add_argument("--dataset", help="YAML/JSON file of runs (default: bundled)")
    calibrate_cmd.add_argument(
        "--stack",
        required=True,
        help="the stack profile whose runs to fit (catalog name or spec file, as the runs' jobs "
        "name it)",
    )
    calibrate_cmd.add_argument(
        "--free",
        help="comma-separated parameters to fit (default: what the runs can inform, of "
        f"{', '.join(CALIBRATED_PARAMETERS)})",
    )
    calibrate_cmd.add_argument("--out", help="write the calibrated stack profile to this YAML file")
    calibrate_cmd.add_argument(
        "--jobs",
        type=whole(1, lim.MAX_JOBS),
        help="the runs' problems evaluated in this many processes, the same answer "
        "(default: one per CPU)",
    )
    calibrate_cmd.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner calibrate` with the parsed ``args``; its exit code."""
    from pathlib import Path

    import yaml

    import hardware_catalog
    from planner.accuracy.calibration import (
        apply_params,
        base_name,
        calibrated_name,
        current_params,
        default_free,
        fit_starts,
        fit_warnings,
        runs_of_stack,
    )
    from planner.accuracy.validation import load_dataset, validate
    from planner.cli import accuracy_report

    dataset = load_dataset(args.dataset)
    stack = hardware_catalog.load_stack(args.stack)
    free = [n.strip() for n in args.free.split(",") if n.strip()] if args.free else None
    before = current_params(stack)
    runs = runs_of_stack(dataset, stack)
    free = free or default_free(runs, stack)
    jobs = args.jobs or available_cpus()
    starts = fit_starts(runs, stack, free, progress=slow_progress("calibrate"), jobs=jobs)
    fitted, _ = min(starts, key=lambda result: result[1])
    warnings = fit_warnings(runs, free, starts)
    params = {name: fitted[name] for name in free}
    note = (
        f"fitted by `planner calibrate --stack {stack.name}` to the {len(runs)} runs of the "
        f"{args.dataset or 'bundled'} dataset that name this stack"
    )
    calibrated = apply_params(stack, params, note).model_copy(
        update={"name": calibrated_name(stack)}
    )
    base = base_name(stack.name)
    result = validate(dataset, {base: calibrated, stack.name: calibrated})
    fitted_runs = [r for r in result.runs if base_name(r.stack) == base]
    if args.out:
        Path(args.out).write_text(
            yaml.safe_dump(calibrated.model_dump(mode="json"), sort_keys=False, width=100),
            encoding="utf-8",
        )
    if args.json:
        print_json(
            {
                "stack": stack.name,
                "before": before,
                "after": params,
                "runs": [r.model_dump() for r in fitted_runs],
                "written": args.out,
                "warnings": warnings,
            }
        )
    else:
        accuracy_report.print_calibration(
            console, stack.name, before, params, fitted_runs, args.out, calibrated.name, warnings
        )
    return EXIT_OK
