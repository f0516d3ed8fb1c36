"""`planner evaluate`: one strategy's predicted step time and memory, given on the command
line or read from a framework's configuration (--from), optionally compared with the plan."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.emit import add_emit_arg, emit, launch_payload
from planner.cli.options import (
    add_problem_args,
    add_strategy_args,
    job_from,
    overrides_payload,
    strategy_from,
    system_from,
)
from planner.cli.output import EXIT_INFEASIBLE, EXIT_OK, print_json
from planner.errors import InputError
from planner.specs.quantities import LAUNCH_FORMATS

if TYPE_CHECKING:
    from rich.console import Console

    from planner.launch import LaunchConfig
    from planner.specs import SystemSpec


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `evaluate` command's parser, under ``commands``."""
    evaluate_cmd = commands.add_parser("evaluate", help="predict one strategy's step time")
    add_problem_args(evaluate_cmd, from_config=True)
    add_strategy_args(evaluate_cmd)
    evaluate_cmd.add_argument(
        "--from",
        dest="from_config",
        nargs=2,
        metavar=("FORMAT", "PATH"),
        help=f"read model, job and strategy from a configuration ({', '.join(LAUNCH_FORMATS)}); "
        "PATH - reads standard input",
    )
    evaluate_cmd.add_argument(
        "--compare",
        action="store_true",
        help="also plan the same job and print the difference to the best strategy",
    )
    add_emit_arg(evaluate_cmd)


def _strategy_defaults() -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_strategy_args(parser)
    return vars(parser.parse_args([]))


def _read_config(args: argparse.Namespace, system: SystemSpec) -> LaunchConfig:
    """evaluate --from FORMAT PATH: the configuration read; strategy flags may not be mixed in."""
    from planner import launch
    from planner.queries.evaluate import as_model

    fmt, path = args.from_config
    if fmt not in launch.FORMATS:
        raise InputError(f"--from {fmt!r}: unknown format; allowed: {', '.join(launch.FORMATS)}")
    given = [
        f"--{dest.replace('_', '-')}"
        for dest, default in _strategy_defaults().items()
        if getattr(args, dest) != default
    ]
    if given:
        raise InputError(
            f"--from {fmt} reads the strategy from the configuration; drop {', '.join(given)}"
        )
    model = as_model(args.model) if args.model else None
    config = launch.read(fmt, launch.read_source(path), system, args.gpus, model)
    if args.global_batch is None and "global_batch" not in config.job:
        raise InputError(
            f"--from {fmt}: the configuration does not give the global batch; pass --global-batch"
        )
    return config


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner evaluate` with the parsed ``args``; its exit code."""
    from planner.cli import report
    from planner.queries.evaluate import as_model, evaluate

    system = system_from(args)
    config = _read_config(args, system) if args.from_config else None
    if config is not None and config.model and config.strategy:
        model, strategy = config.model, config.strategy
        job = job_from(args, config.job)
    else:
        for flag, value in (("--model", args.model), ("--global-batch", args.global_batch)):
            if value is None:
                raise InputError(f"evaluate needs {flag} (or --from FORMAT PATH)")
        model, job, strategy = as_model(args.model), job_from(args), strategy_from(args)
    if args.gpus is not None and strategy.gpus != args.gpus:
        raise InputError(f"{strategy.product_text()} must equal --gpus = {args.gpus}")
    estimate = evaluate(model, system, job, strategy)
    emitted = emit(args.emit, model, system, job, strategy) if args.emit else None
    comparison = None
    if args.compare:
        from planner.launch.compare import compare

        comparison = compare(model, system, job, strategy, estimate)
    if args.json:
        payload: dict[str, object] = {
            "model": model.name,
            "system": system.name,
            "hardware_overrides": overrides_payload(args),
            "job": job.model_dump(mode="json"),
            "strategy": strategy.model_dump(mode="json"),
            "estimate": estimate.model_dump(mode="json"),
        }
        if config is not None:
            payload["from"] = {
                "format": config.format,
                "path": args.from_config[1],
                "notes": config.notes,
                "unsupported": config.unsupported,
            }
        if emitted is not None:
            payload["launch"] = launch_payload(emitted)
        if comparison is not None:
            payload["compare"] = comparison.model_dump(mode="json")
        print_json(payload)
    else:
        if config is not None:
            report.print_config_read(console, config, args.from_config[1])
        console.print(
            f"[bold]{model.name}[/] ({report.format_params(model.params)}) on "
            f"[bold]{system.name}[/], global batch {job.global_batch}, "
            f"sequence {job.seq_len_for(model)}"
        )
        report.print_estimate(console, estimate, strategy, system)
        if emitted is not None:
            report.print_launch(console, emitted)
        if comparison is not None:
            from planner.launch.compare import summary

            console.print(summary(comparison), markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK if estimate.fits else EXIT_INFEASIBLE
