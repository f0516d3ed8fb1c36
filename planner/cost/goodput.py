"""Goodput: what failures, checkpoints and restarts cost a training run (issue 35).

Pure functions of a strategy's state per GPU (planner/cost/memory.py) and a reliability profile
(planner/specs/reliability.py). Notation: M job MTBF, δ time training stops per checkpoint, τ
compute time between checkpoints, R time from a failure to training again, L how long a checkpoint
stays non-durable after its stall (async/in-memory: the background drain).

**Checkpoint contents.** Weights (16-bit) and optimizer state (the stack's bytes per
parameter: fp32 master weights and two Adam moments, 12 bytes) — not gradients or activations,
which a step rebuilds. Unique bytes: P·(2 + o) for P parameters. Each unique shard is written
once: by the data-parallel-rank-0 replica, unless ZeRO shards it over the replicas (ZeRO ≥ 1
the optimizer state, ZeRO-3 also the weights) or the storage's ``fully_parallel_save`` spreads
the replicated state over the replicas.

**Write time.** Writers write their shards at once; a node's writers share its storage link
and the file system caps the total:

    t_write = max(unique bytes / aggregate bandwidth, bytes of the busiest node / per-node bw)

``sync`` stops training for t_write (δ = t_write, L = 0). ``async`` and ``in-memory`` stop it
only while each GPU copies its shard to host memory, δ = per-GPU bytes / host link bandwidth
(the system's offload tier if it has one, else the profile's PCIe figure); the drain takes
t_write in the background (L = t_write for async; the in-memory copy is durable once in the
peer's memory, L = 0, its network traffic assumed hidden under compute as in Gemini).

**Restart.** R = detection + relaunch + communicator init + warm-up + checkpoint read, the read
being every GPU's state from the file system (or the unique bytes once with
``fully_parallel_save``, exchanged over the network), or, ``in-memory``, the per-GPU bytes over
the GPU's scale-out link from the peer.

**Interval.** Young 1974 ("A first order approximation to the optimum checkpoint interval",
CACM 17(9)): τ = √(2·δ·M). Daly 2006 ("A higher order estimate of the optimum checkpoint
interval for restart dumps", FGCS 22(3)), eq. 37: τ = √(2δM)·[1 + ⅓·√(δ/(2M)) + (1/9)·(δ/(2M))]
− δ for δ < 2M, else τ = M. τ is rounded to whole steps (at least one) and, for async, kept
≥ the drain (a checkpoint cannot start before the previous one is on disk).

**Waste and goodput** (first order; failures exponential, at most one per interval, failures
during restarts ignored): per unit of time, checkpoints cost δ/τ; a failure loses on average
half a segment of compute and checkpoint, (τ + δ)/2, plus the latency L for which the newest
checkpoint is not yet durable, and costs the restart R; planned interruptions cost R each and
lose nothing:

    waste   = δ/τ + ((τ + δ)/2 + L)/M + R/M + planned_rate · R
    goodput = max(0, 1 − waste)

Daly 2006's complete exponential model is reported beside it as a check: the expected wall time
per unit of work is M·e^{(R+L)/M}·(e^{(τ+δ)/M} − 1)/τ (his eq. 13 with the lost latency added to
the restart), so goodput_exponential = τ / (M·e^{(R+L)/M}·(e^{(τ+δ)/M} − 1)) · (1 − planned
waste). The two agree to second order in τ/M and R/M.

**Time to train.** ideal time = tokens / (tokens per step / step time); effective time = ideal /
goodput; GPU-hours = GPUs · effective hours; failures per day = 24 / M (hours).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.cost.context import ACTIVATION_BYTES, BYTES_PER_GIB, CostContext
from planner.cost.experts import expert_dp_size
from planner.cost.memory import STAGES, model_state
from planner.errors import InputError
from planner.specs import CheckpointMode, IntervalFormula, ReliabilityProfile, Strategy
from planner.specs import limits as lim
from planner.specs.reliability import failure_rates_per_hour, job_nodes

SECONDS_PER_DAY = 86400.0
SECONDS_PER_HOUR = 3600.0
GB = 1e9


# ---------------------------------------------------------------- interval and waste formulas


def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Young 1974: τ = √(2·δ·M) (first order in δ/M)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Daly 2006 eq. 37: τ = √(2δM)·[1 + ⅓·√(δ/(2M)) + (1/9)·(δ/(2M))] − δ for δ < 2M, else M.
    With M infinite (no failures) τ is infinite: never checkpoint."""
    if math.isinf(mtbf_s):
        return math.inf
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def interval_s(delta_s: float, mtbf_s: float, formula: IntervalFormula = "daly") -> float:
    """The optimal compute time between checkpoints by ``formula`` ("young" or "daly")."""
    if math.isinf(mtbf_s):
        return math.inf
    return (
        young_interval_s(delta_s, mtbf_s)
        if formula == "young"
        else daly_interval_s(delta_s, mtbf_s)
    )


def waste_terms(
    interval: float,
    delta_s: float,
    mtbf_s: float,
    restart_s: float,
    latency_s: float = 0.0,
    planned_per_s: float = 0.0,
) -> dict[str, float]:
    """First-order waste fractions of wall time (module docstring): checkpoint δ/τ, lost work
    ((τ + δ)/2 + L)/M, restart R/M, planned restarts planned_rate·R."""
    per_failure = 0.0 if math.isinf(mtbf_s) else 1.0 / mtbf_s
    return {
        "checkpoint": 0.0 if math.isinf(interval) else delta_s / interval,
        "lost_work": ((interval + delta_s) / 2.0 + latency_s) * per_failure
        if not math.isinf(interval)
        else (math.inf if per_failure else 0.0),
        "restart": restart_s * per_failure,
        "planned": planned_per_s * restart_s,
    }


def goodput_first_order(terms: dict[str, float]) -> float:
    """1 − Σ waste, floored at 0."""
    return max(0.0, 1.0 - sum(terms.values()))


def goodput_exponential(
    interval: float,
    delta_s: float,
    mtbf_s: float,
    restart_s: float,
    latency_s: float = 0.0,
    planned_per_s: float = 0.0,
) -> float:
    """Daly 2006's complete model (exponential failures, failures during restart included):
    τ / (M·e^{(R+L)/M}·(e^{(τ+δ)/M} − 1)), times 1 − planned_rate·R."""
    planned = max(0.0, 1.0 - planned_per_s * restart_s)
    if math.isinf(mtbf_s):
        return planned
    if math.isinf(interval):
        return 0.0
    m = mtbf_s
    try:
        wall = m * math.exp((restart_s + latency_s) / m) * math.expm1((interval + delta_s) / m)
    except OverflowError:  # e^(x) past 1.8e308: the job restarts forever, no useful work
        return 0.0
    return interval / wall * planned


# ---------------------------------------------------------------- checkpoint size and times


def _scalar(value: object) -> float:
    return float(np.max(np.asarray(value, dtype=float)))


def checkpoint_bytes_total(ctx: CostContext) -> float:
    """Unique checkpoint bytes: P·(2 + o), weights in 16 bits and the stack's optimizer bytes
    per parameter (KV projections replicated over t > kv_heads ranks are written once)."""
    return ctx.model.params * (ACTIVATION_BYTES + ctx.optimizer_bytes_per_param)


def state_bytes_per_gpu(ctx: CostContext, strategy: Strategy) -> tuple[float, float]:
    """(weights, optimizer) bytes one GPU holds on the heaviest pipeline stage, sharded as
    the strategy's ZeRO stage shards them (planner.cost.memory.model_state, nothing offloaded;
    under ZeRO-3 the weights include the two gathered blocks, a small over-count). A checkpoint
    writes the state, not the step's unsharded copies: the stage's whole weights and gradients a
    stack holds under PP (StackProfile.zero3_unsharded_under_pp) are left out."""
    if ctx.stack.zero3_unsharded_under_pp:
        resharded = ctx.stack.model_copy(update={"zero3_unsharded_under_pp": False})
        ctx = replace(ctx, stack=resharded)
    first, middle, last = strategy.stage_blocks(ctx.model.layers)
    blocks = {"first": first, "middle": middle, "last": last}
    dp_cp = strategy.dp * strategy.cp
    edp = expert_dp_size(strategy.tp, strategy.cp, strategy.dp, strategy.ep, strategy.expert_tp)
    weights, optimizer = 0.0, 0.0
    for stage in STAGES:
        state = model_state(
            ctx,
            strategy.tp,
            strategy.pp,
            blocks[stage],
            dp_cp,
            strategy.zero_stage,
            0,
            0,
            stage,
            strategy.ep,
            strategy.expert_tp,
            edp,
        )
        w, o = _scalar(state.weights), _scalar(state.optimizer)
        if w + o > weights + optimizer:
            weights, optimizer = w, o
    return weights, optimizer


def written_bytes_per_gpu(
    weights: float, optimizer: float, strategy: Strategy, fully_parallel: bool
) -> float:
    """Bytes the busiest writer GPU writes: its optimizer shard (sharded by ZeRO ≥ 1, else
    replicated) and its weight shard (sharded by ZeRO-3, else replicated over dp·cp). Replicated
    state is written by the dp-rank-0 replica, or split over the dp·cp replicas with
    ``fully_parallel``."""
    replicas = strategy.dp * strategy.cp
    split = replicas if fully_parallel else 1
    weight_part = weights if strategy.zero_stage >= 3 else weights / split
    optimizer_part = optimizer if strategy.zero_stage >= 1 else optimizer / split
    return weight_part + optimizer_part


def writers_per_node(strategy: Strategy, gpus_per_node: int, fully_parallel: bool) -> int:
    """Writer GPUs on the busiest node. Every GPU writes under ZeRO ≥ 1 (its optimizer shard)
    or ``fully_parallel``; otherwise only the dp-rank-0 replica writes, whose t·cp consecutive
    ranks per stage (Megatron's tp-cp-dp-pp order) fill min(gpus_per_node, t·cp) of a node."""
    if fully_parallel or strategy.zero_stage >= 1 or strategy.dp * strategy.cp == 1:
        return min(gpus_per_node, strategy.gpus)
    return min(gpus_per_node, strategy.tp * strategy.cp)


def transfer_s(
    total_bytes: float,
    node_bytes: float,
    per_node_gbps: float,
    aggregate_gbps: float | None,
) -> float:
    """max(total / aggregate, busiest node's bytes / per-node bandwidth), bandwidths in GB/s."""
    node_s = node_bytes / (per_node_gbps * GB)
    total_s = 0.0 if aggregate_gbps is None else total_bytes / (aggregate_gbps * GB)
    return max(node_s, total_s)


def peer_gbps(ctx: CostContext, profile: ReliabilityProfile) -> float:
    """What an in-memory restart reads its state at from the peer's host memory, GB/s per GPU:
    min(host link, scale-out link)."""
    return min(host_link_gbps(ctx, profile), ctx.system.network_tiers[-1].bandwidth_gbps)


def host_link_gbps(ctx: CostContext, profile: ReliabilityProfile) -> float:
    """GPU → host copy bandwidth, GB/s: the system's first offload tier (its achievable
    bandwidth) if it has one, else the profile's host link (PCIe)."""
    tiers = ctx.system.offload_tiers
    if tiers:
        return tiers[0].bandwidth_gbps * tiers[0].efficiency
    return profile.storage.host_link_gbps


# ---------------------------------------------------------------- the estimate


class GoodputEstimate(BaseModel):
    """Everything a report shows about failures, checkpoints and goodput for one plan (floats
    in the units their names give; None where a value is infinite: the MTBF and the interval of
    a job that never fails). ``model_dump(mode="json")`` is the JSON ``goodput`` object."""

    model_config = ConfigDict(frozen=True)

    profile: str
    checkpoint_mode: CheckpointMode
    interval_formula: IntervalFormula
    gpus: int
    nodes: int
    failures_per_day: float
    """Unexpected interruptions per day of the job (Σ_i rate_i·count_i × 24)."""
    failures_per_day_by_kind: dict[str, float]
    planned_interruptions_per_day: float
    job_mtbf_h: float | None
    """Mean time between the job's unexpected interruptions, hours (None: never)."""
    checkpoint_gib_total: float
    checkpoint_gib_per_gpu: float
    """What the busiest writer GPU writes per checkpoint."""
    checkpoint_write_s: float
    """Time to make a checkpoint durable on the file system (sync: the stall; async: the drain)."""
    checkpoint_stall_s: float
    """Training time lost per checkpoint (δ)."""
    checkpoint_read_s: float
    restart_s: float
    """R: detection + relaunch + communicator init + warm-up + checkpoint read."""
    interval_s: float | None
    """Compute time between checkpoints (None: no failures, never checkpoint for them)."""
    interval_steps: int
    """The interval in whole steps (0: none)."""
    waste: dict[str, float]
    """Fractions of wall time lost: checkpoint, lost_work, restart, planned."""
    goodput: float
    goodput_exponential: float
    train_tokens: float | None = None
    ideal_days: float | None = None
    effective_days: float | None = None
    gpu_hours: float | None = None
    """GPUs × effective hours (with failures)."""
    expected_failures: float | None = None
    """Unexpected interruptions expected over the effective time to train."""

    def to_json(self) -> dict:
        """The estimate as a JSON-ready mapping."""
        return self.model_dump(mode="json")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _check_finite_times(profile: ReliabilityProfile, **times_s: float) -> None:
    """A one-line InputError unless every checkpoint time is finite: the profile's ranges
    (planner.specs.reliability, limits.MIN_STORAGE_GBPS) keep them so; this only guards a
    combination they did not foresee."""
    for name, seconds in times_s.items():
        if not math.isfinite(seconds):
            raise InputError(
                f"reliability profile {profile.name!r}: checkpoint {name.removesuffix('_s')} "
                f"time = {seconds!r} s is not finite; a storage or host-link bandwidth is "
                f"outside the goodput model's range (at least {lim.MIN_STORAGE_GBPS:g} GB/s)"
            )


def checkpoint_mode(
    ctx: CostContext, profile: ReliabilityProfile, mode: CheckpointMode | None = None
) -> CheckpointMode:
    """The checkpoint mode in force: ``mode`` if given, else the job's, else the profile's."""
    return mode or ctx.job.checkpoint_mode or profile.checkpoint_mode


def estimate_goodput(
    ctx: CostContext,
    strategy: Strategy,
    step_time_s: float,
    profile: ReliabilityProfile | None = None,
    train_tokens: float | None = None,
    mode: CheckpointMode | None = None,
    formula: IntervalFormula | None = None,
) -> GoodputEstimate:
    """Failures, checkpoint cost, optimal interval and goodput of ``strategy`` at
    ``step_time_s`` (the cost model's step time) under ``profile`` (formulas: module
    docstring). Unset, ``profile``, ``mode`` and ``formula`` are the job's (ctx.reliability,
    job.checkpoint_mode else the profile's, job.checkpoint_interval); ``train_tokens``
    (default: the job's) adds the effective time to train and GPU-hours."""
    profile = profile or ctx.reliability
    mode = checkpoint_mode(ctx, profile, mode)
    formula = formula or ctx.job.checkpoint_interval
    storage, gpn = profile.storage, ctx.system.gpus_per_node
    gpus = strategy.gpus
    nodes = job_nodes(gpus, gpn)

    by_kind = failure_rates_per_hour(profile.failures, gpus, gpn)
    per_hour = sum(by_kind.values())
    mtbf_s = math.inf if per_hour == 0 else SECONDS_PER_HOUR / per_hour

    total_bytes = checkpoint_bytes_total(ctx)
    weights, optimizer = state_bytes_per_gpu(ctx, strategy)
    fully = storage.fully_parallel_save
    per_gpu_written = written_bytes_per_gpu(weights, optimizer, strategy, fully)
    node_written = per_gpu_written * writers_per_node(strategy, gpn, fully)
    write_s = transfer_s(
        total_bytes, node_written, storage.write_gbps_per_node, storage.aggregate_write_gbps
    )

    per_gpu_state = weights + optimizer
    if mode == "in-memory":
        read_s = per_gpu_state / (peer_gbps(ctx, profile) * GB)
    else:
        read_total = total_bytes if fully else per_gpu_state * gpus
        read_node = (total_bytes / nodes) if fully else per_gpu_state * min(gpn, gpus)
        read_s = transfer_s(
            read_total, read_node, storage.read_gbps_per_node, storage.aggregate_read_gbps
        )
    restart_s = profile.restart.fixed_s + read_s

    if mode == "sync":
        delta_s, latency_s = write_s, 0.0
    else:
        delta_s = per_gpu_written / (host_link_gbps(ctx, profile) * GB)
        latency_s = write_s if mode == "async" else 0.0

    tau = interval_s(delta_s, mtbf_s, formula)
    if mode == "async":
        tau = max(tau, write_s)
    if math.isinf(tau):
        steps = 0
    else:
        steps = max(1, round(tau / step_time_s))
        tau = steps * step_time_s
        if mode == "async" and tau < write_s:
            steps = math.ceil(write_s / step_time_s)
            tau = steps * step_time_s

    _check_finite_times(profile, write_s=write_s, read_s=read_s, stall_s=delta_s)
    planned_per_s = profile.failures.planned_per_day / SECONDS_PER_DAY
    terms = waste_terms(tau, delta_s, mtbf_s, restart_s, latency_s, planned_per_s)
    goodput = goodput_first_order(terms)
    exact = goodput_exponential(tau, delta_s, mtbf_s, restart_s, latency_s, planned_per_s)

    tokens = train_tokens if train_tokens is not None else ctx.job.train_tokens
    ideal_days = effective_days = gpu_hours = expected = None
    if tokens is not None:
        tokens_per_step = ctx.job.global_batch * ctx.seq_len
        ideal_s = tokens / tokens_per_step * step_time_s
        ideal_days = ideal_s / SECONDS_PER_DAY
        effective_s = ideal_s / goodput if goodput > 0 else math.inf
        if math.isfinite(effective_s):  # a goodput of 1e-300 never trains either
            effective_days = effective_s / SECONDS_PER_DAY
            gpu_hours = gpus * effective_s / SECONDS_PER_HOUR
            expected = effective_s / mtbf_s if not math.isinf(mtbf_s) else 0.0

    return GoodputEstimate(
        profile=profile.name,
        checkpoint_mode=mode,
        interval_formula=formula,
        gpus=gpus,
        nodes=nodes,
        failures_per_day=per_hour * 24.0,
        failures_per_day_by_kind={k: v * 24.0 for k, v in by_kind.items()},
        planned_interruptions_per_day=profile.failures.planned_per_day,
        job_mtbf_h=_finite(mtbf_s / SECONDS_PER_HOUR),
        checkpoint_gib_total=total_bytes / BYTES_PER_GIB,
        checkpoint_gib_per_gpu=per_gpu_written / BYTES_PER_GIB,
        checkpoint_write_s=write_s,
        checkpoint_stall_s=delta_s,
        checkpoint_read_s=read_s,
        restart_s=restart_s,
        interval_s=_finite(tau),
        interval_steps=steps,
        waste=terms,
        goodput=goodput,
        goodput_exponential=exact,
        train_tokens=tokens,
        ideal_days=ideal_days,
        effective_days=effective_days,
        gpu_hours=gpu_hours,
        expected_failures=expected,
    )
