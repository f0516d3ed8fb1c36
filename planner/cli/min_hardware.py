"""`planner min-hardware`: the least hardware (GPUs, capacity, bandwidth) that meets a goal,
proven minimal, and optionally the Pareto front against a second quantity."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.options import (
    add_limit_args,
    add_problem_args,
    add_target_args,
    gpu_count,
    job_from,
    number,
    overrides_payload,
    system_from,
    work_limit_from,
)
from planner.cli.output import EXIT_INFEASIBLE, EXIT_OK, EXIT_TIME_LIMIT, print_json
from planner.errors import InputError
from planner.specs import limits as lim
from planner.specs.hardware import SWEEP_QUANTITIES
from planner.specs.quantities import QUANTITIES

if TYPE_CHECKING:
    from rich.console import Console

    from constraints.target import PerformanceTarget
    from planner.specs import JobSpec


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `min-hardware` command's parser, under ``commands``."""
    hardware_cmd = commands.add_parser(
        "min-hardware", help="the least hardware that meets a goal, proven minimal"
    )
    add_problem_args(hardware_cmd)
    hardware_cmd.add_argument(
        "--minimize", required=True, choices=list(QUANTITIES), help="the quantity to minimise"
    )
    add_target_args(hardware_cmd)
    hardware_cmd.add_argument(
        "--max-days",
        type=number(lim.MIN_DAYS, lim.MAX_DAYS, low_open=False),
        metavar="D",
        help="goal: train --train-tokens within D days, failures counted (the goodput of "
        "--reliability; --no-failures for the failure-free deadline)",
    )
    hardware_cmd.add_argument(
        "--min-goodput",
        type=number(0, 1, low_open=True),
        metavar="G",
        help="with --minimize checkpoint-bandwidth: keep the goodput at least G (0-1)",
    )
    hardware_cmd.add_argument(
        "--max-gpus",
        type=gpu_count,
        help="upper bound of the GPU count (default: the system's)",
    )
    hardware_cmd.add_argument(
        "--bandwidth-range",
        type=number(lim.MIN_BANDWIDTH_GBPS, lim.MAX_BANDWIDTH_GBPS, low_open=False),
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="GB/s range of a bandwidth grid (default: current/64 .. ×16)",
    )
    hardware_cmd.add_argument(
        "--sweep",
        choices=SWEEP_QUANTITIES,
        help="also trace the Pareto front against this quantity",
    )
    hardware_cmd.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="fix a knob of every plan searched, e.g. --pin tp=8 (repeatable)",
    )
    add_limit_args(hardware_cmd, "the whole query (--sweep included)")


def _goal(args: argparse.Namespace, job: JobSpec) -> PerformanceTarget:
    """The step and MFU bounds; --max-days is checked here (its failure-free step bound must
    lie in the allowed range) and goes to the query, which scales it by the goodput per GPU
    count (planner.queries.hardware_query.HardwareQuery.target_at)."""
    from constraints.target import PerformanceTarget

    if args.max_days is not None:
        if not job.train_tokens:
            raise InputError("--max-days needs --train-tokens (the budget to train by then)")
        deadline = (
            args.max_days * 86400 * job.global_batch * args.seq_len_resolved / (job.train_tokens)
        )
        if not lim.MIN_STEP_TIME_S <= deadline <= lim.MAX_STEP_TIME_S:
            raise InputError(
                f"--max-days = {args.max_days:g} with --train-tokens = {job.train_tokens:g}: a "
                f"step-time bound of {deadline:g} s; allowed range is [{lim.MIN_STEP_TIME_S:g}, "
                f"{lim.MAX_STEP_TIME_S:g}] s"
            )
    if args.minimize == "checkpoint-bandwidth" and args.min_goodput is None:
        raise InputError("--minimize checkpoint-bandwidth needs --min-goodput (e.g. 0.9)")
    return PerformanceTarget(max_step_s=args.max_step_time, min_mfu=args.min_mfu)


def _left(limit: float | None, spent: float) -> float | None:
    """What is left of ``limit`` after ``spent`` (None: no limit)."""
    return None if limit is None else limit - spent


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner min-hardware` with the parsed ``args``; its exit code."""
    from planner.cli import report
    from planner.queries.evaluate import as_model
    from planner.queries.min_hardware import min_hardware
    from planner.queries.pareto import check_sweep, pareto
    from planner.space.search_space import parse_pin

    if args.sweep:  # before any solve
        check_sweep(args.minimize, args.sweep)
    model, system = as_model(args.model), system_from(args)
    job = job_from(args)
    args.seq_len_resolved = job.seq_len_for(model)
    target = _goal(args, job)
    pins = dict(parse_pin(text) for text in args.pin)
    common = dict(
        gpus=args.gpus,
        target=target,
        pins=pins,
        max_gpus=args.max_gpus,
        bandwidth_range_gbps=tuple(args.bandwidth_range) if args.bandwidth_range else None,
        max_days=args.max_days,
    )
    work_limit = work_limit_from(args)
    result = min_hardware(
        model,
        system,
        job,
        args.minimize,
        time_limit_s=args.time_limit,
        work_limit=work_limit,
        min_goodput=args.min_goodput,
        **common,
    )
    front = None
    if args.sweep:  # within what the query left of the limits (none left: an empty front)
        left = {
            "time_limit_s": _left(args.time_limit, result.wall_time_s),
            "work_limit": _left(work_limit, result.work_units),
        }
        spent = any(value is not None and value <= 0 for value in left.values())
        front = (
            [] if spent else pareto(model, system, job, args.minimize, args.sweep, **left, **common)
        )
    if args.json:
        payload = {
            "model": model.name,
            "system": system.name,
            "hardware_overrides": overrides_payload(args),
            "job": job.model_dump(mode="json"),
            "goal": result.goal,
            "status": result.status,
            "wall_time_s": result.wall_time_s,
            "work_units": result.work_units,
            "stopped_by": result.stopped_by,
        }
        if result.minimum is not None:
            minimum = result.minimum
            payload["minimum"] = {
                "quantity": minimum.quantity,
                "value": minimum.value,
                "unit": minimum.unit,
                "proven": minimum.proven,
                "evidence": minimum.evidence,
                "unrefuted": minimum.unrefuted,
                "strategy": minimum.strategy.model_dump(mode="json"),
                "estimate": minimum.estimate.model_dump(mode="json"),
                "below": {
                    "value": minimum.below_value,
                    "status": minimum.below_status,
                    "diagnosis": minimum.below_diagnosis.model_dump(mode="json")
                    if minimum.below_diagnosis
                    else None,
                },
            }
        if result.unreachable is not None:
            payload["unreachable"] = result.unreachable.model_dump(mode="json")
        if result.diagnosis is not None:
            payload["diagnosis"] = result.diagnosis.model_dump(mode="json")
        if front is not None:
            payload["pareto"] = [point.model_dump(mode="json") for point in front]
        print_json(payload)
    else:
        report.print_min_hardware(console, result, model, system, job)
        if front is not None:
            report.print_pareto(console, front, args.minimize, args.sweep)
    if result.minimum is not None:
        return EXIT_OK
    return EXIT_TIME_LIMIT if result.status == "unknown" else EXIT_INFEASIBLE
