"""Fit a training stack's efficiency parameters to measured runs (``planner calibrate``), and
measure how well they generalise (``planner validate --cross-validate``).

The hardware is not fitted: a system holds raw kernel measurements (GEMM curve, attention
kernels, HBM and NCCL bandwidth fractions, each with its source). What is fitted is what the
software stack reaches of them, one parameter set per stack profile for all its runs on every
GPU (no per-run, per-model or per-GPU factors):

- ``gemm_efficiency``: the share of the raw GEMM curve the stack's weight GEMMs reach;
- ``attention_efficiency``: the attention core relative to its kernel's benchmark;
- ``memory_bound_efficiency``: memory-bound kernels relative to the achievable HBM bandwidth;
- ``layer_overhead_us``: fixed time per block per micro-batch (launches, framework work);
- ``tp_overlap_contention``: the share of hidden TP communication that still shows (only where
  the runs overlap TP communication);
- ``dp_overlap_contention``: the same for hidden DP communication (only where the runs overlap
  DP communication);
- ``message_overhead_us``: the fixed time each collective and point-to-point message costs the
  stack beyond NCCL's latency (only where enough runs send TP or PP traffic across nodes,
  where such messages sit on the critical path: crossing_runs).

A fit warns (FitWarning) where a parameter lands on a bound of its physical range — the runs
ask for more than the model's physics allows, so the parameter stands in for a term the model
lacks — where the two starts end on nearly the same loss with a parameter far apart (the runs
do not pin it down), and where no run crosses a node although the plans will (the network and
per-message terms are then not informed: predictions across nodes extrapolate).

The fit minimises the mean absolute log error of the predicted step times plus a quarter of the
worst one (so no run is sacrificed for the mean), by coordinate search on a shrinking grid inside
physical bounds, started from the profile's current values and from the middle of the bounds
(the better of the two wins). Parameters not set free keep the profile's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import hardware_catalog
from planner.accuracy.validation import Dataset, MeasuredRun, resolve
from planner.cost.context import CostContext
from planner.cost.knobs import Knobs
from planner.cost.parallel_comm import group_spans
from planner.cost.step import evaluate_terms
from planner.errors import InputError
from planner.specs import PLACEMENT_CODES, JobSpec, ModelSpec, StackProfile, SystemSpec
from planner.specs.quantities import CALIBRATED_PARAMETERS as PARAMETERS

Progress = Callable[[str], None]
"""Hears one line at a time of a long computation's progress."""

BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.3, 1.0),
    "attention_efficiency": (0.1, 1.0),
    "memory_bound_efficiency": (0.2, 1.0),
    "layer_overhead_us": (0.0, 400.0),
    "tp_overlap_contention": (0.0, 1.0),
    "dp_overlap_contention": (0.0, 1.0),
    "message_overhead_us": (0.0, 500.0),
}


def run_stack(run: MeasuredRun) -> str:
    """The canonical name of the stack a run states (its job's)."""
    return hardware_catalog.load_stack(run.job.stack).name


CALIBRATED_SUFFIX = "-calibrated"
"""What a calibrated profile's name adds to its stack's (``megatron-core-calibrated``), so that a
report (the estimate's ``stack``) tells it from the built-in profile it was fitted from."""


def base_name(name: str) -> str:
    """The stack a profile was calibrated from (its own name if it was not)."""
    return name.removesuffix(CALIBRATED_SUFFIX)


def calibrated_name(stack: StackProfile) -> str:
    """The name of ``stack``'s calibrated profile (calibrating it again keeps the name)."""
    return base_name(stack.name) + CALIBRATED_SUFFIX


def current_params(stack: StackProfile) -> dict[str, float]:
    return {name: float(getattr(stack, name)) for name in PARAMETERS}


def apply_params(stack: StackProfile, params: dict[str, float], note: str = "") -> StackProfile:
    """The profile with these parameters (and ``note`` as their source)."""
    sources = dict(stack.sources)
    if note:
        sources = {k: v for k, v in sources.items() if not set(k.split(", ")) & set(params)}
        sources[", ".join(params)] = note
    return stack.model_copy(update={**params, "sources": sources})


Group = tuple[ModelSpec, SystemSpec, JobSpec, Knobs, list[int]]
"""Runs of one problem: its model, system and job, their strategies stacked, their indices."""


class _Problem:
    """Runs resolved once and grouped by their problem (model, system, job): a group's
    strategies are evaluated as arrays in one call of the cost model (which is vectorised over
    strategies). Each parameter set is scored once (the coordinate search comes back to points
    it has scored: every move is followed by a try of the point it left). With ``jobs`` > 1
    the groups are split over that many worker processes (``with`` the problem: they stop at
    its end); each group is evaluated as in one process, so the losses are the same."""

    def __init__(self, runs: Sequence[MeasuredRun], stack: StackProfile, jobs: int = 1) -> None:
        self.stack = stack
        self.measured_s = np.array([run.measured_step_time_s for run in runs])
        groups: dict[str, list[int]] = {}
        resolved = [resolve(run) for run in runs]
        for index, (run, (model, system)) in enumerate(zip(runs, resolved, strict=True)):
            key = model.model_dump_json() + system.model_dump_json() + run.job.model_dump_json()
            groups.setdefault(key, []).append(index)
        self.groups: list[Group] = [
            (*resolved[members[0]], runs[members[0]].job, _stacked(runs, members), members)
            for members in groups.values()
        ]
        self.scored: dict[tuple[tuple[str, float], ...], float] = {}
        self.workers = min(jobs, len(self.groups))
        self.pool: Any = None

    def __enter__(self) -> _Problem:
        if self.workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            shares = [self.groups[i :: self.workers] for i in range(self.workers)]
            self.pool = ProcessPoolExecutor(
                self.workers, initializer=_hold, initargs=(self.stack, shares)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None

    def errors(self, params: dict[str, float]) -> np.ndarray:
        """(predicted − measured) / measured of every run, in the runs' order."""
        predicted = np.empty(len(self.measured_s))
        if self.pool is None:
            answers = [_step_times(self.stack, self.groups, params)]
        else:
            futures = [self.pool.submit(_held_step_times, i, params) for i in range(self.workers)]
            answers = [future.result() for future in futures]
        for answer in answers:
            for members, step_times_s in answer:
                predicted[members] = step_times_s
        return predicted / self.measured_s - 1

    def loss(self, params: dict[str, float]) -> float:
        key = tuple(sorted(params.items()))
        if key not in self.scored:
            log_errors = np.abs(np.log1p(self.errors(params)))
            self.scored[key] = float(log_errors.mean() + 0.25 * log_errors.max())
        return self.scored[key]


def _step_times(
    stack: StackProfile, groups: list[Group], params: dict[str, float]
) -> list[tuple[list[int], np.ndarray]]:
    """(run indices, predicted step times) of each group under ``stack`` with ``params``."""
    trial = stack.model_copy(update=params)
    return [
        (members, evaluate_terms(CostContext(model, system, job, trial), knobs).step_time_s)
        for model, system, job, knobs, members in groups
    ]


_HELD: list[Any] = []
"""In a worker process of _Problem: the stack and every worker's share of the groups."""


def _hold(stack: StackProfile, shares: list[list[Group]]) -> None:
    _HELD[:] = [stack, shares]


def _held_step_times(share: int, params: dict[str, float]) -> list[tuple[list[int], np.ndarray]]:
    stack, shares = _HELD
    return _step_times(stack, shares[share], params)


def _stacked(runs: Sequence[MeasuredRun], members: list[int]) -> Knobs:
    """The strategies of ``runs[members]`` as one Knobs of arrays, in that order."""
    each = [Knobs.from_strategy(runs[i].strategy).as_dict() for i in members]
    return Knobs.of(**{name: np.array([knobs[name] for knobs in each]) for name in each[0]})


RUNS_PER_PARAMETER = 4
"""A fit sets at most one parameter free per this many runs (in PARAMETERS' order, the GEMM
efficiency first): one run cannot tell a GEMM from a launch overhead."""

PRIORS: dict[str, float] = {
    "gemm_efficiency": 0.65,
    "attention_efficiency": 1.0,
    "memory_bound_efficiency": 1.0,
    "layer_overhead_us": 0.0,
    "tp_overlap_contention": 0.5,
    "dp_overlap_contention": 0.5,
    "message_overhead_us": 0.0,
}
"""A stack's calibrated parameters before any of its runs informs them (the cross-validation's
profiles start here, not from the catalog values, which were fitted on every run, the left-out
source's included): the attention kernel as benchmarked on the accelerator (materialised
attention: the matmul curve), memory-bound kernels at the system's achievable HBM bandwidth, no
fixed per-block work, and, for lack of evidence, half of the TP communication an overlap hides
still showing (the middle of its bounds). The GEMM share's prior is only where its fit starts
(the middle of its bounds): it is always fitted, or, for a stack without runs, taken from what
the other stacks reach on theirs (transferred_gemm_efficiency)."""


def prior_profile(stack: StackProfile) -> StackProfile:
    """The stack with its calibrated parameters at PRIORS."""
    return stack.model_copy(update=PRIORS)


def transferred_gemm_efficiency(fits: dict[str, tuple[int, dict[str, float]]]) -> float:
    """The GEMM share of a stack none of whose runs are known: the run-weighted mean of the
    shares other stacks reach on their own runs (``fits``: stack → (runs, fitted parameters)).
    Only the GEMM share carries over: it is mostly the accelerator's (sustained clocks, the
    library's kernels on real shapes); attention, memory-bound kernels, per-block overheads and
    overlap are each stack's own implementation (llm-foundry's unfused kernels and Triton
    attention say nothing of Megatron-Core's fused ones)."""
    runs = sum(count for count, _ in fits.values())
    if not runs:
        raise ValueError("no stack's fit to take the GEMM share from")
    return sum(count * params["gemm_efficiency"] for count, params in fits.values()) / runs


def crossing_runs(runs: Sequence[MeasuredRun]) -> dict[str, int]:
    """How many runs send each kind of traffic across a scale-up domain (a node): {"tp": ...,
    "pp": ..., "dp": ...}, by the rank order's group spans (parallel_comm.group_spans)."""
    counts = {"tp": 0, "pp": 0, "dp": 0}
    for run in runs:
        _, system = resolve(run)
        domain = system.network_tiers[0].domain_gpus or run.gpus
        s = run.strategy
        spans = group_spans(s.tp, s.cp, s.pp, s.dp, PLACEMENT_CODES[s.placement])
        dp_span, pp_span = (int(span) for span in spans)
        counts["tp"] += s.tp > domain
        counts["pp"] += s.pp > 1 and pp_span > domain
        counts["dp"] += s.dp * s.cp > 1 and dp_span > domain
    return counts


def default_free(runs: Sequence[MeasuredRun], stack: StackProfile) -> list[str]:
    """What the runs can inform: TP- and DP-overlap contention only where a run overlaps TP
    or DP communication; the per-message overhead only where RUNS_PER_PARAMETER runs or more
    send TP or PP traffic across nodes; at most one parameter per RUNS_PER_PARAMETER runs."""
    crossing = crossing_runs(runs)
    uses = {
        "tp_overlap_contention": stack.tp_overlap
        and any(r.strategy.tp_overlap and r.strategy.tp > 1 for r in runs),
        "dp_overlap_contention": stack.dp_overlap
        and any(r.strategy.dp_overlap and r.strategy.dp * r.strategy.cp > 1 for r in runs),
        "message_overhead_us": crossing["tp"] + crossing["pp"] >= RUNS_PER_PARAMETER,
    }
    free = [p for p in PARAMETERS if uses.get(p, True)]
    return free[: max(1, len(runs) // RUNS_PER_PARAMETER)]


def fit(
    runs: Sequence[MeasuredRun],
    stack: StackProfile,
    free: Sequence[str] | None = None,
    rounds: int = 6,
    progress: Progress | None = None,
    jobs: int = 1,
) -> tuple[dict[str, float], float]:
    """Fit the ``free`` parameters of ``stack`` to ``runs`` (evaluated under it, whatever stack
    they name), the runs' problems split over ``jobs`` processes (the same answer). Returns
    the fitted parameters and the loss; ``progress`` hears a line before each pass of the
    coordinate search over the free parameters."""
    free = list(free) if free is not None else default_free(runs, stack)
    unknown = set(free) - set(PARAMETERS)
    if unknown:
        raise InputError(
            f"calibrate: unknown parameters {sorted(unknown)}; allowed: {', '.join(PARAMETERS)}"
        )
    if not runs:
        raise InputError(f"calibrate: the dataset has no run on stack {stack.name!r}")
    return min(fit_starts(runs, stack, free, rounds, progress, jobs), key=lambda r: r[1])


def fit_starts(
    runs: Sequence[MeasuredRun],
    stack: StackProfile,
    free: Sequence[str],
    rounds: int = 6,
    progress: Progress | None = None,
    jobs: int = 1,
) -> list[tuple[dict[str, float], float]]:
    """(parameters, loss) of the fit from each start: the profile's values, and the middle of
    the free parameters' bounds where that differs (fit takes the better)."""
    start = current_params(stack)
    middle = {name: (_mid(name) if name in free else value) for name, value in start.items()}
    starts = [start] if middle == start else [start, middle]
    results = []
    with _Problem(runs, stack, jobs) as problem:
        for number, values in enumerate(starts, 1):
            where = f"fitting {stack.name} to {len(runs):,} runs, start {number} of {len(starts)}"
            report = (lambda line, where=where: progress(f"{where}, {line}")) if progress else None
            results.append(_descend(problem, values, free, rounds, report))
    return results


AT_BOUND = 1e-3
"""A fitted parameter within this share of its range from a bound is 'on' it."""

SAME_LOSS = 0.1
"""Two starts whose losses differ by less than this share 'end on nearly the same loss'."""

FAR_APART = 0.15
"""Two fits whose values of a parameter differ by more than this share of its range disagree."""


def fit_warnings(
    runs: Sequence[MeasuredRun],
    free: Sequence[str],
    starts: list[tuple[dict[str, float], float]],
) -> list[str]:
    """What a user should hear about a fit (module docstring): parameters on a bound, starts
    that disagree at the same loss, and runs that cross no node."""
    best, loss = min(starts, key=lambda r: r[1])
    warnings = []
    for name in free:
        low, high = BOUNDS[name]
        value = best[name]
        if min(value - low, high - value) <= AT_BOUND * (high - low):
            side = "lower" if value - low <= high - value else "upper"
            warnings.append(
                f"{name} landed on its {side} bound ({value:.4g} of {low:g}-{high:g}): the runs "
                "ask for more than the model allows, so it stands in for a term the model lacks"
            )
    for other, other_loss in starts:
        if other is best or abs(other_loss - loss) > SAME_LOSS * max(loss, 1e-12):
            continue
        for name in free:
            low, high = BOUNDS[name]
            if abs(other[name] - best[name]) > FAR_APART * (high - low):
                warnings.append(
                    f"two fits of the same runs disagree on {name} ({best[name]:.4g} and "
                    f"{other[name]:.4g}, losses {loss:.4f} and {other_loss:.4f}): the runs do "
                    "not pin it down"
                )
    crossing = crossing_runs(runs)
    if not any(crossing.values()):
        warnings.append(
            "no run sends traffic across a node: the network and per-message terms are not "
            "informed, and plans across nodes extrapolate (measure runs whose TP, PP and DP "
            "groups cross nodes as the plans' will)"
        )
    return warnings


def runs_of_stack(dataset: Dataset, stack: StackProfile) -> list[MeasuredRun]:
    """The runs that name ``stack``, or the stack it was calibrated from."""
    return [run for run in dataset.runs if base_name(run_stack(run)) == base_name(stack.name)]


def _mid(name: str) -> float:
    low, high = BOUNDS[name]
    return (low + high) / 2


def _descend(
    problem: _Problem,
    values: dict[str, float],
    free: Sequence[str],
    rounds: int,
    progress: Progress | None = None,
) -> tuple[dict[str, float], float]:
    """Coordinate search: try ± a step on each free parameter, keep improvements, halve the
    step when none helps. ``progress`` hears a line before each pass over the parameters."""
    best = problem.loss(values)
    step = 0.25
    for number in range(1, rounds + 1):
        improved = True
        while improved:
            if progress:
                line = f"step size {number} of {rounds}: loss {best:.4f}"
                progress(f"{line}, {len(problem.scored):,} parameter sets scored")
            improved = False
            for name in free:
                for candidate in _neighbours(name, values[name], step):
                    trial = {**values, name: candidate}
                    loss = problem.loss(trial)
                    if loss < best - 1e-12:
                        best, values, improved = loss, trial, True
        step /= 2
    return values, best


def _neighbours(name: str, value: float, step: float) -> list[float]:
    low, high = BOUNDS[name]
    candidates = [value + sign * step * (high - low) / 2 for sign in (-1, 1)]
    clipped = (min(high, max(low, c)) for c in candidates)
    return [c for c in clipped if c != value]
