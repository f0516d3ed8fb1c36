"""The arguments several commands share, and what they build (their value types:
planner.cli.arg_types): the problem, hardware-override, limit, target and strategy flags;
the job, strategy and system (with overrides) the flags describe. Each command module adds
its own flags beside these."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, get_args

from planner.cli.arg_types import eighths, expand_stage_layers, number, stage_layers, whole
from planner.errors import InputError
from planner.specs import limits as lim
from planner.specs.precision import Precision

if TYPE_CHECKING:
    from planner.specs import JobSpec, Strategy, SystemSpec


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's or taskset's share, where
    os.cpu_count() counts the whole host's), the default of --jobs."""
    import os

    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


gpu_count = whole(1, lim.MAX_GPUS)
_seconds = number(0, lim.MAX_TIME_LIMIT_S)


def add_problem_args(parser: argparse.ArgumentParser, from_config: bool = False) -> None:
    """--model, --system and the job's flags, shared by every command that takes a problem.
    With ``from_config`` (evaluate --from), --model and --global-batch may come from the file."""
    optional = " (default: from --from's configuration)" if from_config else ""
    parser.add_argument(
        "--model", required=not from_config, help="catalog name or path to a spec file" + optional
    )
    parser.add_argument("--system", required=True, help="catalog name or path to a spec file")
    parser.add_argument("--gpus", type=gpu_count, help="GPU count (default: tp·cp·pp·dp)")
    parser.add_argument(
        "--global-batch",
        type=whole(1, lim.MAX_GLOBAL_BATCH),
        required=not from_config,
        help="sequences per optimizer step" + optional,
    )
    parser.add_argument("--seq-len", type=whole(1, lim.MAX_SEQ_LEN), help="default: the model's")
    parser.add_argument(
        "--precision",
        choices=list(get_args(Precision)),
        help="precision recipe (`planner catalog precisions`): bf16 (default); fp8 = "
        "fp8-delayed (Transformer Engine delayed tensorwise); fp8-current (tensorwise current "
        "scaling: TE, torchao tensorwise); fp8-rowwise (torchao rowwise); mxfp8, nvfp4 "
        "(block scaling, Blackwell)",
    )
    parser.add_argument(
        "--bf16-first-blocks",
        type=whole(0, lim.MAX_LAYERS),
        help="blocks at the start kept in bf16 under a low-precision recipe (default: the "
        "recipe's)",
    )
    parser.add_argument(
        "--bf16-last-blocks",
        type=whole(0, lim.MAX_LAYERS),
        help="blocks at the end kept in bf16 (default: the recipe's)",
    )
    parser.add_argument(
        "--fp8-params",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the low-precision blocks' parameters in the recipe's format and gather them "
        "so (Megatron --fp8-param-gather; fp8-delayed, fp8-current, mxfp8; default: off)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile on/off (fuses eager elementwise work on stacks without fused "
        "kernels, e.g. torchtitan; default: the stack's)",
    )
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
        type=number(lim.MIN_TRAIN_TOKENS, lim.MAX_TRAIN_TOKENS, low_open=False),
        help="token budget: report time and GPU-hours to train it",
    )
    parser.add_argument(
        "--hbm-reserve-gib",
        type=number(0, lim.MAX_CAPACITY_GIB, low_open=False),
        help="HBM kept for CUDA context, NCCL and allocator (default: the stack's, 2 GiB)",
    )
    parser.add_argument(
        "--expert-imbalance",
        type=number(1, lim.MAX_EXPERT_IMBALANCE, low_open=False),
        help="mixture of experts: tokens the busiest expert-parallel rank gets over the mean "
        "(default 1: balanced routing)",
    )
    parser.add_argument(
        "--hbm-usable-fraction",
        type=number(lim.MIN_USABLE_FRACTION, 1, low_open=False),
        help="share of HBM a plan may use (default: the stack's, 0.95 but for calculon's 1)",
    )
    parser.add_argument(
        "--robust",
        action="store_true",
        default=None,
        help="plan for the upper end of the range: messages across nodes priced 1.35x slower, "
        "the collective model's measured error (the report shows the range)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_reliability_args(parser)
    _add_hardware_args(parser)


def _add_reliability_args(parser: argparse.ArgumentParser) -> None:
    """What the goodput of a plan with --train-tokens assumes (planner/cost/goodput.py)."""
    group = parser.add_argument_group(
        "failures and checkpoints",
        "with --train-tokens: failures, checkpoints, restarts and the goodput they leave",
    )
    group.add_argument(
        "--reliability",
        metavar="NAME|FILE",
        help="reliability profile: a catalog name (`planner catalog reliability`) or a spec "
        "file (default: the system's, else h100-llama3: H100-era rates from Llama 3's run)",
    )
    group.add_argument(
        "--checkpoint-mode",
        choices=["sync", "async", "in-memory"],
        help="how checkpoints are taken (default: the profile's)",
    )
    group.add_argument(
        "--checkpoint-interval",
        choices=["daly", "young"],
        help="the optimal interval's formula (default daly: Daly 2006; young: Young 1974)",
    )
    group.add_argument(
        "--no-failures",
        action="store_true",
        help="assume no failures and no planned interruptions (the failure-free numbers)",
    )


def _add_hardware_args(parser: argparse.ArgumentParser) -> None:
    """The hardware quantities a run may override (planner.specs.hardware), per GPU."""
    group = parser.add_argument_group(
        "hardware overrides", "replace the system file's numbers (per GPU, per direction)"
    )
    capacity = number(lim.MIN_CAPACITY_GIB, lim.MAX_CAPACITY_GIB, low_open=False)
    bandwidth = number(lim.MIN_BANDWIDTH_GBPS, lim.MAX_BANDWIDTH_GBPS, low_open=False)
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
        type=gpu_count,
        metavar="GPUS",
        help="GPUs in one scale-up domain (e.g. 72 for an NVL72 rack)",
    )
    group.add_argument(
        "--scale-out-gbps",
        type=bandwidth,
        metavar="GBPS",
        help="scale-out (InfiniBand, Ethernet) bandwidth",
    )
    group.add_argument(
        "--power-cap-w",
        type=number(0, lim.MAX_POWER_W),
        metavar="W",
        help="accelerator power limit (nvidia-smi -pl); slows compute-bound work "
        "(needs the system's tdp_w)",
    )


def system_from(args: argparse.Namespace) -> SystemSpec:
    """--system with the hardware overrides the command line gives."""
    from planner.queries.evaluate import as_system
    from planner.specs.hardware import override_system

    return override_system(as_system(args.system), vars(args))


def overrides_payload(args: argparse.Namespace) -> dict[str, float]:
    from planner.specs.hardware import overrides_from

    return overrides_from(vars(args)).given()


def add_limit_args(command: argparse.ArgumentParser, scope: str) -> None:
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
        type=number(0, lim.MAX_WORK_UNITS),
        default=None,
        metavar="UNITS",
        help=f"a limit on the work of {scope} in CP-SAT deterministic units, about a second "
        f"each (default {lim.DEFAULT_WORK_UNITS:g}; the same answer on any machine under any "
        "load)",
    )


def add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-step-time",
        type=number(lim.MIN_STEP_TIME_S, lim.MAX_STEP_TIME_S, low_open=False),
        metavar="S",
        help="performance target: step time at most S seconds",
    )
    parser.add_argument(
        "--min-mfu",
        type=number(lim.MIN_MFU, 1, low_open=False),
        metavar="F",
        help="performance target: MFU at least F (0-1)",
    )


def add_strategy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tp", type=gpu_count, default=1, help="tensor parallel size")
    parser.add_argument(
        "--tp-column",
        type=gpu_count,
        default=1,
        help="AxoNN's column group X (input features split; --stack axonn): row Y = tp / (X·Z)",
    )
    parser.add_argument(
        "--tp-depth",
        type=gpu_count,
        default=1,
        help="AxoNN's depth group Z (weights sharded, micro-batch split; --stack axonn)",
    )
    parser.add_argument(
        "--cp", type=gpu_count, default=1, help="context parallel size (sequence split)"
    )
    parser.add_argument(
        "--pp", type=whole(1, lim.MAX_LAYERS), default=1, help="pipeline parallel size"
    )
    parser.add_argument("--dp", type=gpu_count, help="data parallel size (default: from --gpus)")
    parser.add_argument(
        "--ep",
        type=whole(1, lim.MAX_EXPERTS),
        default=1,
        help="expert parallel size: each MoE block's experts sharded over EP ranks of tp·cp·dp",
    )
    parser.add_argument(
        "--expert-tp",
        type=whole(0, lim.MAX_GPUS),
        default=0,
        help="expert tensor parallel size: ranks each expert is split over (default 0: = --tp)",
    )
    parser.add_argument(
        "--micro-batch",
        type=whole(1, lim.MAX_GLOBAL_BATCH),
        default=1,
        help="sequences per micro-batch of each data-parallel rank (default 1)",
    )
    parser.add_argument(
        "--interleave",
        type=whole(1, lim.MAX_LAYERS),
        default=1,
        help="virtual pipeline stages per rank",
    )
    parser.add_argument(
        "--stage-layers",
        type=stage_layers,
        metavar="N,N,...",
        help="blocks per pipeline stage, first to last (e.g. 5,6,...,6,5: the stage before "
        "the ellipsis repeats to fill --pp stages; 7,8x14,7: 8 on 14 stages); with "
        "--interleave v, pp entries (each split over its v chunks) or pp·v virtual stages in "
        "pipeline order, also as a Megatron-Core --pipeline-model-parallel-layout string "
        "('Et|(tt|)*62,tL'); default: layers / pp on each",
    )
    parser.add_argument(
        "--recompute",
        choices=["none", "selective", "full"],
        default="none",
        help="activation recomputation: none (default), selective (attention core) or full "
        "(every block)",
    )
    parser.add_argument(
        "--recompute-layers",
        type=whole(1, lim.MAX_LAYERS),
        metavar="R",
        help="with --recompute full: recompute only R blocks of each stage, a multiple of "
        "--interleave (Megatron's --recompute-method block; default: every block)",
    )
    parser.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="shard the norms' and dropouts' activations over the tp ranks (Megatron's sequence "
        "parallelism)",
    )
    parser.add_argument(
        "--placement",
        choices=["tp-cp-dp-pp", "tp-pp-dp"],
        default="tp-cp-dp-pp",
        help="rank order, fastest first (default Megatron-Core's; tp-pp-dp: "
        "--use-tp-pp-dp-mapping, the pipeline inside the scale-up domain)",
    )
    parser.add_argument(
        "--zero-stage",
        type=int,
        choices=[0, 1, 2, 3],
        default=0,
        help="ZeRO sharding over the dp ranks: 1 optimizer state, 2 + gradients, 3 + weights "
        "(default 0: none)",
    )
    for what in ("weights", "activations", "optimizer"):
        parser.add_argument(
            f"--offload-{what}",
            type=whole(0, lim.MAX_MEMORY_TIERS - 1),
            default=0,
            metavar="TIER",
            help=f"memory tier to hold the {what} (0: HBM)",
        )
        parser.add_argument(
            f"--offload-{what}-fraction",
            type=eighths,
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


def job_from(args: argparse.Namespace, stated: dict[str, object] | None = None) -> JobSpec:
    """The job from the flags; ``stated`` (a configuration's fields) fills what they leave out."""
    from pydantic import ValidationError

    from planner.errors import describe_validation_error
    from planner.specs import JobSpec

    fields = {
        "global_batch": args.global_batch,
        "seq_len": args.seq_len,
        "precision": args.precision,
        "bf16_first_blocks": getattr(args, "bf16_first_blocks", None),
        "bf16_last_blocks": getattr(args, "bf16_last_blocks", None),
        "fp8_params": getattr(args, "fp8_params", None),
        "compile": getattr(args, "compile", None),
        **({"stack": args.stack} if args.stack else {}),
        "grad_dtype": args.grad_dtype,
        "attention": args.attention,
        "train_tokens": args.train_tokens,
        "hbm_reserve_gib": args.hbm_reserve_gib,
        "hbm_usable_fraction": args.hbm_usable_fraction,
        "expert_imbalance": args.expert_imbalance,
        "reliability": getattr(args, "reliability", None),
        "checkpoint_mode": getattr(args, "checkpoint_mode", None),
        "checkpoint_interval": getattr(args, "checkpoint_interval", None),
        "failures": False if getattr(args, "no_failures", False) else None,
        "robust": getattr(args, "robust", None),
    }
    fields = {**(stated or {}), **{k: v for k, v in fields.items() if v is not None}}
    try:
        job = JobSpec(**fields)
    except ValidationError as error:
        raise InputError(describe_validation_error(error, "job")) from None
    import hardware_catalog

    hardware_catalog.load_stack(job.stack)  # an unknown stack is a one-line error here
    if job.reliability is not None:
        hardware_catalog.load_reliability(job.reliability)  # likewise a profile
    return job


def strategy_from(args: argparse.Namespace) -> Strategy:
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
        tp_column=args.tp_column,
        tp_depth=args.tp_depth,
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
        stage_layers=expand_stage_layers(args.stage_layers, args.pp),
    )


def work_limit_from(args: argparse.Namespace) -> float | None:
    """--work-limit; by default DEFAULT_WORK_UNITS, none where only --time-limit was given."""
    if args.work_limit is not None or args.time_limit is not None:
        return args.work_limit
    return lim.DEFAULT_WORK_UNITS
