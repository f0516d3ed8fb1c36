"""`planner validate`: predicted vs measured step time of real training runs, or
leave-one-source-out cross-validation."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.options import available_cpus, whole
from planner.cli.output import EXIT_OK, print_json, slow_progress
from planner.specs import limits as lim

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `validate` command's parser, under ``commands``."""
    validate_cmd = commands.add_parser(
        "validate", help="predicted vs measured step time of real training runs"
    )
    validate_cmd.add_argument(
        "--dataset", help="YAML/JSON file of runs (default: the bundled published runs)"
    )
    validate_cmd.add_argument("--json", action="store_true", help="print JSON instead of tables")
    validate_cmd.add_argument(
        "--network",
        action="store_true",
        help="the collective model alone against published nccl-tests results (--dataset: a "
        "file of curves; default: the bundled nccl_tests.yaml)",
    )

    validate_cmd.add_argument(
        "--cross-validate",
        action="store_true",
        help="leave one source out: calibrate on the others, predict it (per source, overall)",
    )
    validate_cmd.add_argument(
        "--jobs",
        type=whole(1, lim.MAX_JOBS),
        help="with --cross-validate: folds fitted in this many processes, the same answer "
        "(default: one per CPU)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner validate` with the parsed ``args``; its exit code."""
    from planner.accuracy.cross_validation import cross_validate
    from planner.accuracy.validation import load_dataset, validate
    from planner.cli import accuracy_report

    if args.network:
        return _network(args, console)
    dataset = load_dataset(args.dataset)
    if args.cross_validate:
        jobs = args.jobs or available_cpus()
        result = cross_validate(dataset, jobs=jobs, progress=slow_progress("validate"))
    else:
        result = validate(dataset)
    if args.json:
        print_json(result.model_dump(mode="json"))
    elif args.cross_validate:
        accuracy_report.print_cross_validation(console, result)
    else:
        accuracy_report.print_validation(console, result)
    return EXIT_OK


def _network(args: argparse.Namespace, console: Console) -> int:
    """`planner validate --network`: the collectives against nccl-tests curves."""
    from planner.accuracy.network_validation import load_network_dataset, validate_network
    from planner.cli import accuracy_report
    from planner.errors import InputError

    if args.cross_validate:
        raise InputError("validate: --network takes no --cross-validate (nothing is fitted)")
    result = validate_network(load_network_dataset(args.dataset))
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        accuracy_report.print_network_validation(console, result)
    return EXIT_OK
