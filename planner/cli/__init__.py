"""The ``planner`` command line.

Exit codes: 0 success; 2 bad input (one line naming the field, the value and what is allowed);
3 infeasible (the strategy or problem does not fit, with the reason); 4 the time limit ran out
before any answer (neither a plan nor a proof that none exists); 1 an internal error (a bug: one
line; PLANNER_DEBUG=1 shows the traceback).

Commands import what they need when they run: ``catalog``, ``evaluate``, ``validate``,
``calibrate``, ``plot`` and ``--help`` never load OR-Tools (tests/test_startup.py guards it), and
matplotlib loads only inside ``plot``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn

from planner.errors import InputError
from planner.specs import limits as lim
from planner.specs.quantities import (
    CALIBRATED_PARAMETERS,
    DEFAULT_MAX_STAGE_SKEW,
    DEFAULT_OFFLOAD_STEP,
    LAUNCH_FORMATS,
    MIN_CP_CHUNK_TOKENS,
    OFFLOAD_STEP_CHOICES,
    OFFLOAD_STEPS,
    PLOT_KINDS,
    QUANTITIES,
    SWEEP_BACKENDS,
    parse_eighths,
)

if TYPE_CHECKING:
    from rich.console import Console

    from constraints.target import PerformanceTarget
    from planner.launch import LaunchConfig
    from planner.specs import JobSpec, Strategy, SystemSpec

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_TIME_LIMIT = 0, 1, 2, 3, 4


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{message} (see `{self.prog} --help`)")


def _stage_layers(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated whole numbers, one '...' allowed (expanded against
    --pp in _strategy)."""
    parts = tuple(part.strip() for part in text.split(","))
    count = _whole(1, lim.MAX_LAYERS)
    if (
        parts.count("...") > 1
        or parts[0] == "..."
        or not all(part == "..." or part.isdigit() for part in parts)
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected whole numbers separated by commas, e.g. 5,6,...,6,5"
        )
    for part in parts:
        if part != "...":
            count(part)
    return parts


def _expand_stage_layers(parts: tuple[str, ...] | None, pp: int) -> tuple[int, ...] | None:
    """5,6,...,6,5 with pp = 12 → (5, 6 × 10, 5): the entry before '...' fills the gap."""
    if parts is None:
        return None
    if "..." not in parts:
        return tuple(int(part) for part in parts)
    cut = parts.index("...")
    head = [int(part) for part in parts[:cut]]
    tail = [int(part) for part in parts[cut + 1 :]]
    fill = pp - len(head) - len(tail)
    if fill < 0:
        raise InputError(
            f"--stage-layers {','.join(parts)}: {len(head) + len(tail)} stages given, --pp {pp}"
        )
    return tuple(head + [head[-1]] * fill + tail)


def _whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high] (planner.specs.limits states the ranges)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside the allowed range {low}..{high}")
        return value

    return parse


def _eighths(text: str) -> float:
    """An argparse type: an offload fraction, a multiple of 1/8 in (0, 1], as ``0.375`` or
    ``3/8``."""
    try:
        return parse_eighths(text) / OFFLOAD_STEPS
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _number(low: float, high: float, low_open: bool = True) -> Callable[[str], float]:
    """An argparse type: a finite number in (low, high] ([low, high] without ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        try:
            lim.check_range("value", value, low, high, low_open)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("value = ")) from None
        return value

    return parse


_gpu_count = _whole(1, lim.MAX_GPUS)
_fraction = _number(0, 1)
_seconds = _number(0, lim.MAX_TIME_LIMIT_S)


def _add_problem_args(parser: argparse.ArgumentParser, from_config: bool = False) -> None:
    """--model, --system and the job's flags, shared by every command that takes a problem.
    With ``from_config`` (evaluate --from), --model and --global-batch may come from the file."""
    optional = " (default: from --from's configuration)" if from_config else ""
    parser.add_argument(
        "--model", required=not from_config, help="catalog name or path to a spec file" + optional
    )
    parser.add_argument("--system", required=True, help="catalog name or path to a spec file")
    parser.add_argument("--gpus", type=_gpu_count, help="GPU count (default: tp·cp·pp·dp)")
    parser.add_argument(
        "--global-batch",
        type=_whole(1, lim.MAX_GLOBAL_BATCH),
        required=not from_config,
        help="sequences per optimizer step" + optional,
    )
    parser.add_argument("--seq-len", type=_whole(1, lim.MAX_SEQ_LEN), help="default: the model's")
    parser.add_argument("--precision", choices=["bf16", "fp8"], help="default: bf16")
    parser.add_argument(
        "--stack",
        help="training-stack profile: a catalog name (`planner catalog stacks`) or a spec file "
        "(default: megatron-core)",
    )
    parser.add_argument(
        "--grad-dtype",
        choices=["fp32", "bf16"],
        help="gradient accumulation / reduction precision (default: the stack's)",
    )
    parser.add_argument(
        "--attention",
        choices=["flash", "materialized"],
        help="flash (default): fused kernel; materialized: s×s scores in memory (2021-22)",
    )
    parser.add_argument(
        "--train-tokens",
        type=_number(lim.MIN_TRAIN_TOKENS, lim.MAX_TRAIN_TOKENS, low_open=False),
        help="token budget: report time and GPU-hours to train it",
    )
    parser.add_argument(
        "--hbm-reserve-gib",
        type=_number(0, lim.MAX_CAPACITY_GIB, low_open=False),
        help="HBM kept for CUDA context, NCCL and allocator (default: the stack's, 2 GiB)",
    )
    parser.add_argument(
        "--expert-imbalance",
        type=_number(1, lim.MAX_EXPERT_IMBALANCE, low_open=False),
        help="mixture of experts: tokens the busiest expert-parallel rank gets over the mean "
        "(default 1: balanced routing)",
    )
    parser.add_argument(
        "--hbm-usable-fraction",
        type=_number(lim.MIN_USABLE_FRACTION, 1, low_open=False),
        help="share of HBM a plan may use (default: the stack's, 0.95 but for calculon's 1)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_hardware_args(parser)


def _add_hardware_args(parser: argparse.ArgumentParser) -> None:
    """The hardware quantities a run may override (planner.specs.hardware), per GPU."""
    group = parser.add_argument_group(
        "hardware overrides", "replace the system file's numbers (per GPU, per direction)"
    )
    capacity = _number(lim.MIN_CAPACITY_GIB, lim.MAX_CAPACITY_GIB, low_open=False)
    bandwidth = _number(lim.MIN_BANDWIDTH_GBPS, lim.MAX_BANDWIDTH_GBPS, low_open=False)
    group.add_argument("--hbm-gib", type=capacity, metavar="GIB", help="HBM capacity")
    group.add_argument(
        "--offload-gib",
        type=capacity,
        metavar="GIB",
        help="offload-tier capacity (host DDR, CXL); adds a tier with --offload-gbps",
    )
    group.add_argument(
        "--offload-gbps", type=bandwidth, metavar="GBPS", help="offload-tier bandwidth"
    )
    group.add_argument(
        "--scale-up-gbps", type=bandwidth, metavar="GBPS", help="scale-up (NVLink) bandwidth"
    )
    group.add_argument(
        "--scale-up-domain",
        type=_gpu_count,
        metavar="GPUS",
        help="GPUs in one scale-up domain (e.g. 72 for an NVL72 rack)",
    )
    group.add_argument(
        "--scale-out-gbps",
        type=bandwidth,
        metavar="GBPS",
        help="scale-out (InfiniBand, Ethernet) bandwidth",
    )


def _system(args: argparse.Namespace) -> SystemSpec:
    """--system with the hardware overrides the command line gives."""
    from planner.queries.evaluate import as_system
    from planner.specs.hardware import override_system

    return override_system(as_system(args.system), vars(args))


def _overrides_payload(args: argparse.Namespace) -> dict[str, float]:
    from planner.specs.hardware import overrides_from

    return overrides_from(vars(args)).given()


def _add_limit_args(command: argparse.ArgumentParser, scope: str) -> None:
    """--time-limit and --work-limit, each bounding ``scope``."""
    command.add_argument(
        "--time-limit",
        type=_seconds,
        default=None,
        help=f"a wall-clock limit in seconds on {scope} (default: none; answers then depend "
        "on the machine's load); alone, it replaces the default work limit",
    )
    command.add_argument(
        "--work-limit",
        type=_number(0, lim.MAX_WORK_UNITS),
        default=None,
        metavar="UNITS",
        help=f"a limit on the work of {scope} in CP-SAT deterministic units, about a second "
        f"each (default {lim.DEFAULT_WORK_UNITS:g}; the same answer on any machine under any "
        "load)",
    )


def _add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-step-time",
        type=_number(lim.MIN_STEP_TIME_S, lim.MAX_STEP_TIME_S, low_open=False),
        metavar="S",
        help="performance target: step time at most S seconds",
    )
    parser.add_argument(
        "--min-mfu",
        type=_number(lim.MIN_MFU, 1, low_open=False),
        metavar="F",
        help="performance target: MFU at least F (0-1)",
    )


def _add_strategy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tp", type=_gpu_count, default=1, help="tensor parallel size")
    parser.add_argument(
        "--cp", type=_gpu_count, default=1, help="context parallel size (sequence split)"
    )
    parser.add_argument(
        "--pp", type=_whole(1, lim.MAX_LAYERS), default=1, help="pipeline parallel size"
    )
    parser.add_argument("--dp", type=_gpu_count, help="data parallel size (default: from --gpus)")
    parser.add_argument(
        "--ep",
        type=_whole(1, lim.MAX_EXPERTS),
        default=1,
        help="expert parallel size: each MoE block's experts sharded over EP ranks of tp·cp·dp",
    )
    parser.add_argument(
        "--expert-tp",
        type=_whole(0, lim.MAX_GPUS),
        default=0,
        help="expert tensor parallel size: ranks each expert is split over (default 0: = --tp)",
    )
    parser.add_argument("--micro-batch", type=_whole(1, lim.MAX_GLOBAL_BATCH), default=1)
    parser.add_argument(
        "--interleave",
        type=_whole(1, lim.MAX_LAYERS),
        default=1,
        help="virtual pipeline stages per rank",
    )
    parser.add_argument(
        "--stage-layers",
        type=_stage_layers,
        metavar="N,N,...",
        help="blocks per pipeline stage, first to last (e.g. 5,6,...,6,5: the stage before "
        "the ellipsis repeats to fill --pp stages; default: layers / pp on each)",
    )
    parser.add_argument("--recompute", choices=["none", "selective", "full"], default="none")
    parser.add_argument(
        "--recompute-layers",
        type=_whole(1, lim.MAX_LAYERS),
        metavar="R",
        help="with --recompute full: recompute only R blocks of each stage, a multiple of "
        "--interleave (Megatron's --recompute-method block; default: every block)",
    )
    parser.add_argument("--sequence-parallel", action="store_true")
    parser.add_argument(
        "--placement",
        choices=["tp-cp-dp-pp", "tp-pp-dp"],
        default="tp-cp-dp-pp",
        help="rank order, fastest first (default Megatron-Core's; tp-pp-dp: "
        "--use-tp-pp-dp-mapping, the pipeline inside the scale-up domain)",
    )
    parser.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3], default=0)
    for what in ("weights", "activations", "optimizer"):
        parser.add_argument(
            f"--offload-{what}",
            type=_whole(0, lim.MAX_MEMORY_TIERS - 1),
            default=0,
            metavar="TIER",
            help=f"memory tier to hold the {what} (0: HBM)",
        )
        parser.add_argument(
            f"--offload-{what}-fraction",
            type=_eighths,
            default=1.0,
            metavar="Q",
            help=f"share of the {what} in that tier, in steps of 1/8 (e.g. 0.25 or 1/4; "
            "default 1: all)",
        )
    parser.add_argument(
        "--no-dp-overlap", action="store_true", help="do not overlap DP communication with compute"
    )
    parser.add_argument(
        "--tp-overlap", action="store_true", help="overlap TP communication with the GEMMs"
    )


def _add_emit_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--emit",
        choices=list(LAUNCH_FORMATS),
        help="also print the strategy as this framework's launch configuration",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="planner", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    catalog = commands.add_parser("catalog", help="list or show built-in systems and models")
    catalog.add_argument("what", choices=["systems", "models", "stacks", "show"])
    catalog.add_argument("name", nargs="?", help="with show: a system or model name")
    catalog.add_argument("--json", action="store_true")

    evaluate_cmd = commands.add_parser("evaluate", help="predict one strategy's step time")
    _add_problem_args(evaluate_cmd, from_config=True)
    _add_strategy_args(evaluate_cmd)
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
    _add_emit_arg(evaluate_cmd)

    plan_cmd = commands.add_parser("plan", help="find the provably optimal strategy")
    _add_problem_args(plan_cmd)
    plan_cmd.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="fix a knob, e.g. --pin tp=8 --pin recompute=full (repeatable)",
    )
    plan_cmd.add_argument(
        "--top",
        type=_whole(1, lim.MAX_TOP),
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
    _add_limit_args(plan_cmd, "the search")
    _add_target_args(plan_cmd)
    plan_cmd.add_argument(
        "--max-micro-batch",
        type=_whole(1, lim.MAX_GLOBAL_BATCH),
        default=64,
        help="the search (and its proof) covers micro-batches that divide the global batch, "
        "up to this (default 64)",
    )
    plan_cmd.add_argument(
        "--max-interleave",
        type=_whole(1, lim.MAX_LAYERS),
        default=None,
        help="the search covers interleaves (virtual stages per rank) up to this (default: "
        "every interleave that divides the blocks per stage)",
    )
    plan_cmd.add_argument(
        "--max-cp",
        type=_whole(1, lim.MAX_GPUS),
        default=None,
        help="the search covers context parallelism up to this (default: sequence chunks of "
        f"at least {MIN_CP_CHUNK_TOKENS} tokens, seq_len / {MIN_CP_CHUNK_TOKENS})",
    )
    plan_cmd.add_argument(
        "--max-stage-skew",
        type=_whole(0, lim.MAX_LAYERS),
        default=DEFAULT_MAX_STAGE_SKEW,
        help="the search covers layouts whose last pipeline stage holds up to this many blocks "
        f"fewer than the others (default {DEFAULT_MAX_STAGE_SKEW})",
    )
    plan_cmd.add_argument(
        "--offload-step",
        choices=OFFLOAD_STEP_CHOICES,
        default=f"1/{OFFLOAD_STEPS // DEFAULT_OFFLOAD_STEP}",
        help="the search covers offloaded shares of a tensor class in steps of this (default "
        "%(default)s; 1/8 is finer and can be slow to prove; 1/2 and 1 narrow the search)",
    )
    _add_emit_arg(plan_cmd)

    hardware_cmd = commands.add_parser(
        "min-hardware", help="the least hardware that meets a goal, proven minimal"
    )
    _add_problem_args(hardware_cmd)
    hardware_cmd.add_argument(
        "--minimize", required=True, choices=list(QUANTITIES), help="the quantity to minimise"
    )
    _add_target_args(hardware_cmd)
    hardware_cmd.add_argument(
        "--max-days",
        type=_number(lim.MIN_DAYS, lim.MAX_DAYS, low_open=False),
        metavar="D",
        help="goal: train --train-tokens within D days",
    )
    hardware_cmd.add_argument(
        "--max-gpus",
        type=_gpu_count,
        help="upper bound of the GPU count (default: the system's)",
    )
    hardware_cmd.add_argument(
        "--bandwidth-range",
        type=_number(lim.MIN_BANDWIDTH_GBPS, lim.MAX_BANDWIDTH_GBPS, low_open=False),
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="GB/s range of a bandwidth grid (default: current/64 .. ×16)",
    )
    hardware_cmd.add_argument(
        "--sweep",
        choices=[q for q in QUANTITIES if q != "cost"] + ["step-time"],
        help="also trace the Pareto front against this quantity",
    )
    hardware_cmd.add_argument("--pin", action="append", default=[], metavar="KNOB=VALUE")
    _add_limit_args(hardware_cmd, "the whole query (--sweep included)")

    sweep_cmd = commands.add_parser("sweep", help="run a study file: many plans at once")
    sweep_cmd.add_argument("study", help="YAML/JSON study file")
    sweep_cmd.add_argument("--out", required=True, help="results folder (resumed if present)")
    sweep_cmd.add_argument(
        "--jobs",
        type=_whole(1, lim.MAX_JOBS),
        default=1,
        help="worker processes (with --backend ray and no --address: the local Ray's CPUs)",
    )
    sweep_cmd.add_argument(
        "--backend",
        choices=SWEEP_BACKENDS,
        default="local",
        help="local: this machine's processes; ray: Ray tasks (pip install 'planner[ray]')",
    )
    sweep_cmd.add_argument(
        "--address",
        help="with --backend ray: the cluster to join (HOST:PORT of its head, ray://HOST:PORT "
        "or auto); default: a local Ray instance for this sweep",
    )
    sweep_cmd.add_argument(
        "--diagnose",
        action="store_true",
        help="name the conflicting constraints of each infeasible plan (one more solve each; "
        "the study's `diagnose: true` does the same)",
    )

    plot_cmd = commands.add_parser("plot", help="draw a sweep's results (needs .[plot])")
    plot_cmd.add_argument("results", help="a sweep's --out folder")
    plot_cmd.add_argument("--kind", required=True, choices=list(PLOT_KINDS))
    plot_cmd.add_argument("--out", help="image file (.png or .svg); default: results/KIND.png")
    plot_cmd.add_argument(
        "--mfu-line",
        type=_fraction,
        action="append",
        default=[],
        metavar="F",
        help="mfu-vs-gpus: a reference line at MFU F (0-1), e.g. 0.75; repeatable",
    )
    plot_cmd.add_argument(
        "--gbps-line",
        type=_number(0, lim.MAX_BANDWIDTH_GBPS),
        action="append",
        default=[],
        metavar="GBPS",
        help="offload-bandwidth: a reference line at this bandwidth, e.g. 100; repeatable",
    )

    validate_cmd = commands.add_parser(
        "validate", help="predicted vs measured step time of real training runs"
    )
    validate_cmd.add_argument(
        "--dataset", help="YAML/JSON file of runs (default: the bundled published runs)"
    )
    validate_cmd.add_argument("--json", action="store_true")

    validate_cmd.add_argument(
        "--cross-validate",
        action="store_true",
        help="leave one source out: calibrate on the others, predict it (per source, overall)",
    )
    validate_cmd.add_argument(
        "--jobs",
        type=_whole(1, lim.MAX_JOBS),
        help="with --cross-validate: folds fitted in this many processes, the same answer "
        "(default: one per CPU)",
    )

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
        type=_whole(1, lim.MAX_JOBS),
        help="the runs' problems evaluated in this many processes, the same answer "
        "(default: one per CPU)",
    )
    calibrate_cmd.add_argument("--json", action="store_true")
    return parser


def _job(args: argparse.Namespace, stated: dict[str, object] | None = None) -> JobSpec:
    """The job from the flags; ``stated`` (a configuration's fields) fills what they leave out."""
    from pydantic import ValidationError

    from planner.errors import describe_validation_error
    from planner.specs import JobSpec

    fields = {
        "global_batch": args.global_batch,
        "seq_len": args.seq_len,
        "precision": args.precision,
        **({"stack": args.stack} if args.stack else {}),
        "grad_dtype": args.grad_dtype,
        "attention": args.attention,
        "train_tokens": args.train_tokens,
        "hbm_reserve_gib": args.hbm_reserve_gib,
        "hbm_usable_fraction": args.hbm_usable_fraction,
        "expert_imbalance": args.expert_imbalance,
    }
    fields = {**(stated or {}), **{k: v for k, v in fields.items() if v is not None}}
    try:
        job = JobSpec(**fields)
    except ValidationError as error:
        raise InputError(describe_validation_error(error, "job")) from None
    import hardware_catalog

    hardware_catalog.load_stack(job.stack)  # an unknown stack is a one-line error here
    return job


def _strategy(args: argparse.Namespace) -> Strategy:
    from planner.specs import Strategy

    dp = args.dp
    if dp is None:
        if args.gpus is None:
            dp = 1
        elif args.gpus % (args.tp * args.cp * args.pp):
            raise InputError(
                f"--gpus = {args.gpus} is not divisible by tp·cp·pp = "
                f"{args.tp}·{args.cp}·{args.pp} = {args.tp * args.cp * args.pp}"
            )
        else:
            dp = args.gpus // (args.tp * args.cp * args.pp)
    return Strategy(
        tp=args.tp,
        cp=args.cp,
        pp=args.pp,
        dp=dp,
        ep=args.ep,
        expert_tp=args.expert_tp,
        micro_batch=args.micro_batch,
        interleave=args.interleave,
        recompute=args.recompute,
        recompute_layers=args.recompute_layers,
        sequence_parallel=args.sequence_parallel,
        placement=args.placement,
        zero_stage=args.zero_stage,
        offload_weights=args.offload_weights,
        offload_activations=args.offload_activations,
        offload_optimizer=args.offload_optimizer,
        offload_weights_fraction=args.offload_weights_fraction,
        offload_activations_fraction=args.offload_activations_fraction,
        offload_optimizer_fraction=args.offload_optimizer_fraction,
        dp_overlap=not args.no_dp_overlap,
        tp_overlap=args.tp_overlap,
        stage_layers=_expand_stage_layers(args.stage_layers, args.pp),
    )


def _print_json(payload: object) -> None:
    """``payload`` as strict JSON: a non-finite number (which JSON cannot hold; Python would
    write ``Infinity``) becomes null."""
    print(json.dumps(_finite(payload), indent=2, sort_keys=False, allow_nan=False))


def _finite(value: object) -> object:
    """``value`` with every non-finite float, however deep in dicts and lists, replaced by
    None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def run_catalog(args: argparse.Namespace, console: Console) -> int:
    import hardware_catalog
    from planner.cli import report

    catalog = hardware_catalog
    listings = {
        "systems": (catalog.system_names, catalog.load_system, report.systems_table),
        "models": (catalog.model_names, catalog.load_model, report.models_table),
        "stacks": (catalog.stack_names, catalog.load_stack, report.stacks_table),
    }
    if args.what in listings:
        names, load, table = listings[args.what]
        specs = [load(name) for name in names()]
        if args.json:
            _print_json([_catalog_json(spec) for spec in specs])
        else:
            console.print(table(specs))
        return EXIT_OK
    if not args.name:
        raise InputError("catalog show needs a name, e.g. `planner catalog show dgx-h100`")
    spec = _find_any(args.name)
    data = spec.model_dump(mode="json")
    if args.json:
        _print_json(data)
        return EXIT_OK
    title = f"{spec.name}: {spec.description}" if spec.description else spec.name
    console.print(report.spec_table(title, data, spec.sources))
    if hasattr(spec, "params"):
        console.print(f"parameters: {report.format_params(spec.params)} ({spec.params:,})")
        if spec.is_moe:
            active = spec.active_params
            console.print(f"active per token: {report.format_params(active)} ({active:,})")
    if spec.aliases:
        console.print(f"aliases: {', '.join(spec.aliases)}")
    return EXIT_OK


def _catalog_json(spec) -> dict:
    """A catalog entry as JSON; a model also gives its parameter counts (total, and active per
    token: the same for a dense model)."""
    data = spec.model_dump(mode="json")
    if not hasattr(spec, "params"):
        return data
    return {**data, "params": spec.params, "active_params": spec.active_params}


def _find_any(name: str):
    """A system, model or stack by name; the error names the three catalogs."""
    import hardware_catalog

    try:
        return hardware_catalog.load_system(name)
    except InputError as system_error:
        for load in (hardware_catalog.load_model, hardware_catalog.load_stack):
            try:
                return load(name)
            except InputError:
                pass
        raise InputError(str(system_error).replace("system", "system, model or stack", 1)) from None


def _strategy_defaults() -> dict[str, object]:
    parser = argparse.ArgumentParser()
    _add_strategy_args(parser)
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


def _emit(fmt: str, model, system, job: JobSpec, strategy: Strategy) -> LaunchConfig:
    """The launch configuration of ``--emit`` (planner.launch loads only when asked for)."""
    from planner import launch

    return launch.emit(fmt, model, system, job, strategy)


def _launch_payload(config: LaunchConfig) -> dict[str, object]:
    return {"format": config.format, "text": config.text, "notes": config.notes}


def run_evaluate(args: argparse.Namespace, console: Console) -> int:
    from planner.cli import report
    from planner.queries.evaluate import as_model, evaluate

    system = _system(args)
    config = _read_config(args, system) if args.from_config else None
    if config is not None and config.model and config.strategy:
        model, strategy = config.model, config.strategy
        job = _job(args, config.job)
    else:
        for flag, value in (("--model", args.model), ("--global-batch", args.global_batch)):
            if value is None:
                raise InputError(f"evaluate needs {flag} (or --from FORMAT PATH)")
        model, job, strategy = as_model(args.model), _job(args), _strategy(args)
    if args.gpus is not None and strategy.gpus != args.gpus:
        raise InputError(f"{strategy.product_text()} must equal --gpus = {args.gpus}")
    estimate = evaluate(model, system, job, strategy)
    emitted = _emit(args.emit, model, system, job, strategy) if args.emit else None
    comparison = None
    if args.compare:
        from planner.launch.compare import compare

        comparison = compare(model, system, job, strategy, estimate)
    if args.json:
        payload: dict[str, object] = {
            "model": model.name,
            "system": system.name,
            "hardware_overrides": _overrides_payload(args),
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
            payload["launch"] = _launch_payload(emitted)
        if comparison is not None:
            payload["compare"] = comparison.model_dump(mode="json")
        _print_json(payload)
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


def _work_limit(args: argparse.Namespace) -> float | None:
    """--work-limit; by default DEFAULT_WORK_UNITS, none where only --time-limit was given."""
    if args.work_limit is not None or args.time_limit is not None:
        return args.work_limit
    return lim.DEFAULT_WORK_UNITS


def run_plan(args: argparse.Namespace, console: Console) -> int:
    from constraints.target import PerformanceTarget
    from planner.cli import report
    from planner.queries.evaluate import as_model
    from planner.queries.plan import plan
    from planner.space.search_space import parse_pin

    model, system = as_model(args.model), _system(args)
    job = _job(args)
    if args.gpus is None:
        raise InputError("plan needs --gpus (how many GPUs to plan for)")
    pins = dict(parse_pin(text) for text in args.pin)
    target = PerformanceTarget(max_step_s=args.max_step_time, min_mfu=args.min_mfu)
    if args.emit:  # only what the format runs; its configuration reads back as the plan
        from planner.launch.restrict import plan_for

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
        work_limit=_work_limit(args),
        max_micro_batch=args.max_micro_batch,
        max_interleave=args.max_interleave,
        max_cp=args.max_cp,
        max_stage_skew=args.max_stage_skew,
        offload_step=parse_eighths(args.offload_step),
    )
    emitted = None
    if args.emit and result.strategy is not None:
        emitted = _emit(args.emit, model, system, job, result.strategy)
    if args.json:
        payload = {
            "model": model.name,
            "system": system.name,
            "hardware_overrides": _overrides_payload(args),
            "gpus": args.gpus,
            "job": job.model_dump(mode="json"),
            "status": result.status,
            "strategy": result.strategy.model_dump(mode="json") if result.strategy else None,
            "estimate": result.estimate.model_dump(mode="json") if result.estimate else None,
            "solver": result.solver.model_dump(mode="json") if result.solver else None,
        }
        if args.top > 1:
            payload["alternatives"] = [a.model_dump(mode="json") for a in result.alternatives]
        if result.status == "infeasible":
            payload["diagnosis"] = (
                result.diagnosis.model_dump(mode="json") if result.diagnosis else None
            )
        if args.emit:
            payload["launch"] = _launch_payload(emitted) if emitted else None
        _print_json(payload)
    else:
        report.print_plan(console, result, model, system, job, args.gpus)
        if emitted is not None:
            report.print_launch(console, emitted)
    if result.strategy is not None:
        return EXIT_OK
    return EXIT_TIME_LIMIT if result.status == "unknown" else EXIT_INFEASIBLE


def _goal(args: argparse.Namespace, job: JobSpec) -> PerformanceTarget:
    from constraints.target import PerformanceTarget

    step = args.max_step_time
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
        step = min(step, deadline) if step else deadline
    return PerformanceTarget(max_step_s=step, min_mfu=args.min_mfu)


def _left(limit: float | None, spent: float) -> float | None:
    """What is left of ``limit`` after ``spent`` (None: no limit)."""
    return None if limit is None else limit - spent


def run_min_hardware(args: argparse.Namespace, console: Console) -> int:
    from planner.cli import report
    from planner.queries.evaluate import as_model
    from planner.queries.min_hardware import min_hardware
    from planner.queries.pareto import pareto
    from planner.space.search_space import parse_pin

    model, system = as_model(args.model), _system(args)
    job = _job(args)
    args.seq_len_resolved = job.seq_len_for(model)
    target = _goal(args, job)
    pins = dict(parse_pin(text) for text in args.pin)
    common = dict(
        gpus=args.gpus,
        target=target,
        pins=pins,
        max_gpus=args.max_gpus,
        bandwidth_range_gbps=tuple(args.bandwidth_range) if args.bandwidth_range else None,
    )
    work_limit = _work_limit(args)
    result = min_hardware(
        model,
        system,
        job,
        args.minimize,
        time_limit_s=args.time_limit,
        work_limit=work_limit,
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
            "hardware_overrides": _overrides_payload(args),
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
        _print_json(payload)
    else:
        report.print_min_hardware(console, result, model, system, job)
        if front is not None:
            report.print_pareto(console, front, args.minimize, args.sweep)
    if result.minimum is not None:
        return EXIT_OK
    return EXIT_TIME_LIMIT if result.status == "unknown" else EXIT_INFEASIBLE


def run_sweep(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from planner.studies.sweep import load_study, run_study

    study = load_study(args.study)
    if args.diagnose:
        study = study.model_copy(update={"diagnose": True})
    out = Path(args.out)
    with _sweep_progress(console, study.name) as progress:
        rows = run_study(
            study,
            out,
            jobs=args.jobs,
            progress=progress,
            backend=args.backend,
            address=args.address,
        )
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    console.print(
        f"{len(rows)} scenarios in {out}/rows.jsonl and rows.csv: "
        + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    )
    return EXIT_OK


@contextlib.contextmanager
def _sweep_progress(console: Console, name: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback (done, total): a live bar with elapsed time and ETA on a terminal;
    elsewhere (a log, CI) one line per tenth of the study, with the same ETA."""
    if console.is_terminal:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        ) as bar:
            task = bar.add_task(name, total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    import time

    from planner.studies.sweep import eta_line

    started = time.perf_counter()
    first: list[int] = []
    shown: set[int] = set()

    def progress(done: int, total: int) -> None:
        if not first:
            first.append(done)  # rows already there when the sweep resumed
            return
        tenth = (10 * done) // max(total, 1)
        if tenth not in shown or done == total:
            shown.add(tenth)
            line = eta_line(name, done, total, first[0], time.perf_counter() - started)
            console.print(line, markup=False, highlight=False)

    yield progress


def run_plot(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from planner.studies.plots import plot

    path = plot(
        Path(args.results),
        args.kind,
        Path(args.out) if args.out else None,
        mfu_lines=tuple(args.mfu_line),
        gbps_lines=tuple(args.gbps_line),
        warn=lambda line: _print_error(f"planner: warning: {line}"),
    )
    console.print(f"wrote {path}")
    return EXIT_OK


def run_validate(args: argparse.Namespace, console: Console) -> int:
    from planner.accuracy.cross_validation import cross_validate
    from planner.accuracy.validation import load_dataset, validate
    from planner.cli import report

    dataset = load_dataset(args.dataset)
    if args.cross_validate:
        jobs = args.jobs or os.cpu_count() or 1
        result = cross_validate(dataset, jobs=jobs, progress=_slow_progress("validate"))
    else:
        result = validate(dataset)
    if args.json:
        _print_json(result.model_dump(mode="json"))
    elif args.cross_validate:
        report.print_cross_validation(console, result)
    else:
        report.print_validation(console, result)
    return EXIT_OK


PROGRESS_AFTER_S = 5.0
"""A command that has run this long reports its progress on stderr (a short one says nothing)."""


def _slow_progress(command: str) -> Callable[[str], None]:
    """A progress callback that prints each line on stderr ('planner validate: ...') once the
    command has run PROGRESS_AFTER_S; the lines before that are dropped."""
    import time

    started = time.perf_counter()

    def progress(line: str) -> None:
        if time.perf_counter() - started >= PROGRESS_AFTER_S:
            _print_error(f"planner {command}: {line}")

    return progress


def run_calibrate(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    import yaml

    import hardware_catalog
    from planner.accuracy.calibration import (
        apply_params,
        current_params,
        default_free,
        fit,
        runs_of_stack,
    )
    from planner.accuracy.validation import load_dataset, validate
    from planner.cli import report

    dataset = load_dataset(args.dataset)
    stack = hardware_catalog.load_stack(args.stack)
    free = [n.strip() for n in args.free.split(",") if n.strip()] if args.free else None
    before = current_params(stack)
    runs = runs_of_stack(dataset, stack)
    free = free or default_free(runs, stack)
    jobs = args.jobs or os.cpu_count() or 1
    fitted, _ = fit(runs, stack, free, progress=_slow_progress("calibrate"), jobs=jobs)
    params = {name: fitted[name] for name in free}
    note = (
        f"fitted by `planner calibrate --stack {stack.name}` to the {len(runs)} runs of the "
        f"{args.dataset or 'bundled'} dataset that name this stack"
    )
    calibrated = apply_params(stack, params, note)
    result = validate(dataset, {stack.name: calibrated})
    fitted_runs = [r for r in result.runs if r.stack == stack.name]
    if args.out:
        Path(args.out).write_text(
            yaml.safe_dump(calibrated.model_dump(mode="json"), sort_keys=False, width=100),
            encoding="utf-8",
        )
    if args.json:
        _print_json(
            {
                "stack": stack.name,
                "before": before,
                "after": params,
                "runs": [r.model_dump() for r in fitted_runs],
                "written": args.out,
            }
        )
    else:
        report.print_calibration(console, stack.name, before, params, fitted_runs, args.out)
    return EXIT_OK


COMMANDS = {
    "catalog": run_catalog,
    "evaluate": run_evaluate,
    "plan": run_plan,
    "min-hardware": run_min_hardware,
    "sweep": run_sweep,
    "plot": run_plot,
    "validate": run_validate,
    "calibrate": run_calibrate,
}


def _print_error(message: str) -> None:
    """One line on stderr, through rich (which wraps and colours like the rest of the output);
    rich.console loads here, not at start-up, for the paths that print nothing else."""
    from rich.console import Console

    Console(stderr=True).print(message, markup=False, highlight=False, soft_wrap=True)


SOLVING_COMMANDS = frozenset({"plan", "min-hardware", "sweep"})
"""Commands that import OR-Tools' CP-SAT API."""


def main(argv: Sequence[str] | None = None, own_process: bool = False) -> int:
    """Run one command; its exit code. ``own_process``: the caller is the console script, so
    the solving commands import CP-SAT without pandas (planner.cli.cpsat_import)."""
    from pydantic import ValidationError

    try:
        args = build_parser().parse_args(argv)
        if own_process and args.command in SOLVING_COMMANDS:
            from planner.cli.cpsat_import import import_cp_model_without_pandas

            import_cp_model_without_pandas()
        from rich.console import Console  # after parsing: `--help` and usage errors skip it

        return COMMANDS[args.command](args, Console())
    except InputError as error:
        _print_error(f"planner: error: {error}")
        return EXIT_BAD_INPUT
    except ValidationError as error:
        from planner.errors import describe_validation_error

        _print_error(f"planner: error: {describe_validation_error(error, 'input')}")
        return EXIT_BAD_INPUT
    except OSError as error:  # a file the user named cannot be read or written
        where = f"{error.filename}: " if error.filename else ""
        _print_error(f"planner: error: {where}{error.strerror or error}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _print_error("planner: interrupted")
        return 130
    except Exception as error:  # a bug: one line, the traceback only on request
        if os.environ.get("PLANNER_DEBUG"):
            raise
        _print_error(
            f"planner: internal error: {type(error).__name__}: {error} (a bug in planner; "
            "PLANNER_DEBUG=1 shows the traceback)"
        )
        return EXIT_INTERNAL


YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation in the console script (run)."""


def run() -> NoReturn:
    """The ``planner`` console script (and ``python -m planner``): main(), then exit.

    Before exiting, every object is moved out of the garbage collector's reach (gc.freeze), so
    the collections that the interpreter runs while tearing down its modules do not traverse
    pydantic's, rich's and numpy's tens of thousands of objects one last time: ~30 ms of a
    ~200 ms command (benchmarks/startup.py). Nothing is lost: objects are still freed by their
    reference counts, atexit handlers still run, and the process ends right after. main() itself
    does not do it, since tests and library users call it many times in one process.

    The youngest generation is collected every YOUNG_GC_THRESHOLD allocations rather than
    Python's 700: start-up imports allocate ~100,000 long-lived objects (pydantic's schemas,
    numpy, rich, OR-Tools), and each early collection re-traverses them (plan: ~15 ms).

    The process is the console script's own, so solving commands import CP-SAT without pandas
    (main's ``own_process``; planner.cli.cpsat_import)."""
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    code = main(own_process=True)
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
