"""`planner plan`: the provably optimal strategy for a job on a number of GPUs, and the K best."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from planner.cli.emit import add_emit_arg, emit, launch_payload
from planner.cli.options import (
    add_limit_args,
    add_problem_args,
    add_target_args,
    job_from,
    overrides_payload,
    system_from,
    whole,
    work_limit_from,
)
from planner.cli.output import EXIT_INFEASIBLE, EXIT_OK, EXIT_TIME_LIMIT, print_json
from planner.errors import InputError
from planner.specs import limits as lim
from planner.specs.quantities import (
    DEFAULT_MAX_STAGE_SKEW,
    DEFAULT_OFFLOAD_STEP,
    MIN_CP_CHUNK_TOKENS,
    OFFLOAD_STEP_CHOICES,
    OFFLOAD_STEPS,
    parse_eighths,
)

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `plan` command's parser, under ``commands``."""
    plan_cmd = commands.add_parser("plan", help="find the provably optimal strategy")
    add_problem_args(plan_cmd)
    plan_cmd.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="fix a knob, e.g. --pin tp=8 --pin recompute=full (repeatable)",
    )
    plan_cmd.add_argument(
        "--top",
        type=whole(1, lim.MAX_TOP),
        default=1,
        help=f"also list the K best distinct strategies (K ≤ {lim.MAX_TOP})",
    )
    plan_cmd.add_argument(
        "--rank-by",
        choices=["step", "structure", "strategy"],
        default="structure",
        help="with --top: rank distinct structures (tp, cp, pp, layout, dp, micro-batch, "
        "interleave, recompute), tied variants listed (default); distinct step times, ties "
        "walked one by one; or every strategy",
    )
    add_limit_args(plan_cmd, "the search")
    add_target_args(plan_cmd)
    plan_cmd.add_argument(
        "--max-micro-batch",
        type=whole(1, lim.MAX_GLOBAL_BATCH),
        default=64,
        help="the search (and its proof) covers micro-batches that divide the global batch, "
        "up to this (default 64)",
    )
    plan_cmd.add_argument(
        "--max-interleave",
        type=whole(1, lim.MAX_LAYERS),
        default=None,
        help="the search covers interleaves (virtual stages per rank) up to this (default: "
        "every interleave that divides the blocks per stage, or the blocks plus Megatron's "
        "embedding and loss slots)",
    )
    plan_cmd.add_argument(
        "--max-cp",
        type=whole(1, lim.MAX_GPUS),
        default=None,
        help="the search covers context parallelism up to this (default: sequence chunks of "
        f"at least {MIN_CP_CHUNK_TOKENS} tokens, seq_len / {MIN_CP_CHUNK_TOKENS})",
    )
    plan_cmd.add_argument(
        "--max-stage-skew",
        type=whole(0, lim.MAX_LAYERS),
        default=DEFAULT_MAX_STAGE_SKEW,
        help="the search covers layouts whose last pipeline stage holds up to this many blocks "
        f"fewer than the middle ones (default {DEFAULT_MAX_STAGE_SKEW}; the first stage: up to "
        "one fewer, or none at 0)",
    )
    plan_cmd.add_argument(
        "--offload-step",
        choices=OFFLOAD_STEP_CHOICES,
        default=f"1/{OFFLOAD_STEPS // DEFAULT_OFFLOAD_STEP}",
        help="the search covers offloaded shares of a tensor class in steps of this (default "
        "%(default)s; 1/8 is finer and can be slow to prove; 1/2 and 1 narrow the search)",
    )
    add_emit_arg(plan_cmd)


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner plan` with the parsed ``args``; its exit code."""
    from constraints.target import PerformanceTarget
    from planner.cli import report
    from planner.queries.evaluate import as_model
    from planner.queries.plan import plan
    from planner.space.search_space import parse_pin

    model, system = as_model(args.model), system_from(args)
    job = job_from(args)
    if args.gpus is None:
        raise InputError("plan needs --gpus (how many GPUs to plan for)")
    pins = dict(parse_pin(text) for text in args.pin)
    target = PerformanceTarget(max_step_s=args.max_step_time, min_mfu=args.min_mfu)
    if args.emit:  # only what the format runs; its configuration reads back as the plan
        from planner.launch import stack_for
        from planner.launch.restrict import plan_for

        job = stack_for(args.emit, job, stated=bool(args.stack))

        plan = lambda *a, **k: plan_for(args.emit, *a, **k)  # noqa: E731
    result = plan(
        model,
        system,
        job,
        args.gpus,
        pins=pins,
        top=args.top,
        rank_by=args.rank_by,
        target=target,
        time_limit_s=args.time_limit,
        work_limit=work_limit_from(args),
        max_micro_batch=args.max_micro_batch,
        max_interleave=args.max_interleave,
        max_cp=args.max_cp,
        max_stage_skew=args.max_stage_skew,
        offload_step=parse_eighths(args.offload_step),
    )
    emitted = None
    if args.emit and result.strategy is not None:
        emitted = emit(args.emit, model, system, job, result.strategy)
    if args.json:
        payload = {
            "model": model.name,
            "system": system.name,
            "hardware_overrides": overrides_payload(args),
            "gpus": args.gpus,
            "job": job.model_dump(mode="json"),
            "status": result.status,
            "strategy": result.strategy.model_dump(mode="json") if result.strategy else None,
            "estimate": result.estimate.model_dump(mode="json") if result.estimate else None,
            "solver": result.solver.model_dump(mode="json") if result.solver else None,
        }
        if result.tp_forms is not None:
            payload["tp_forms"] = result.tp_forms.model_dump(mode="json")
        if args.top > 1:
            payload["alternatives"] = [a.model_dump(mode="json") for a in result.alternatives]
        if result.status == "infeasible":
            payload["diagnosis"] = (
                result.diagnosis.model_dump(mode="json") if result.diagnosis else None
            )
        if args.emit:
            payload["launch"] = launch_payload(emitted) if emitted else None
        print_json(payload)
    else:
        report.print_plan(console, result, model, system, job, args.gpus)
        if emitted is not None:
            report.print_launch(console, emitted)
    if result.strategy is not None:
        return EXIT_OK
    return EXIT_TIME_LIMIT if result.status == "unknown" else EXIT_INFEASIBLE
