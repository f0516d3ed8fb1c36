"""Predicted against measured step times of real training runs (``planner validate``).

A dataset is a YAML/JSON file with a ``runs`` list; each run names its model (a catalog name or
an inline model spec), its system (catalog name, path or inline spec), GPU count, job, strategy
and the measured step time, plus free-form provenance. The bundled dataset
(hardware_catalog/calibration/published_runs.yaml) holds the published A100 and H100 runs whose
strategy is fully stated.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import hardware_catalog
from planner import limits as lim
from planner.cost.context import CostContext
from planner.cost.step import Knobs, evaluate_terms
from planner.errors import InputError
from planner.rules import strategy_violations
from planner.specs import JobSpec, ModelSpec, StackProfile, Strategy, SystemSpec

BUNDLED_DATASET = hardware_catalog.CATALOG / "calibration" / "published_runs.yaml"


class MeasuredRun(BaseModel):
    """One measured run. Unknown provenance fields are kept, not checked."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    id: str
    group: str = "user"
    source_key: str = ""
    """The publication or benchmark table the run comes from: cross-validation leaves one
    source out at a time (default: the group)."""
    model: ModelSpec | str
    system: SystemSpec | str
    gpus: int = Field(gt=0)
    job: JobSpec
    strategy: Strategy
    measured_step_time_s: float = Field(ge=lim.MIN_STEP_TIME_S, le=lim.MAX_STEP_TIME_S)


class Dataset(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    runs: tuple[MeasuredRun, ...] = Field(min_length=1)


class RunResult(BaseModel):
    id: str
    group: str
    source: str
    stack: str
    model: str
    system: str
    gpus: int
    strategy: str
    measured_step_time_s: float
    predicted_step_time_s: float
    error: float
    """(predicted − measured) / measured."""
    predicted_mfu: float
    measured_mfu: float


class GroupSummary(BaseModel):
    group: str
    runs: int
    mean_abs_error: float
    worst_abs_error: float


class Validation(BaseModel):
    runs: list[RunResult]
    groups: list[GroupSummary]
    overall: GroupSummary


class Fold(BaseModel):
    """One source left out: the stacks calibrated without it, and its runs predicted."""

    source: str
    calibrated_on: dict[str, str]
    """stack → what its parameters were fitted on for this fold (its runs in the other sources,
    or, when the left-out source held all of them, its priors with a transferred GEMM share)."""
    summary: GroupSummary


class CrossValidation(BaseModel):
    folds: list[Fold]
    runs: list[RunResult]
    overall: GroupSummary
    in_sample: GroupSummary


def load_dataset(path: str | Path | None = None) -> Dataset:
    """The bundled dataset, or a user's file."""
    source = Path(path) if path else BUNDLED_DATASET
    return hardware_catalog.read_spec_file(source, Dataset, "dataset")


def resolve(run: MeasuredRun, system: SystemSpec | None = None) -> tuple[ModelSpec, SystemSpec]:
    """The run's model and system specs (``system`` overrides the run's)."""
    model = (
        run.model if isinstance(run.model, ModelSpec) else hardware_catalog.load_model(run.model)
    )
    if system is None:
        system = (
            run.system
            if isinstance(run.system, SystemSpec)
            else hardware_catalog.load_system(run.system)
        )
    problems = strategy_violations(model, system, run.job, run.strategy, run.gpus)
    if problems:
        raise InputError(f"run {run.id!r}: {problems[0]}")
    return model, system


def predict_step_s(run: MeasuredRun, stack: StackProfile | None = None) -> float:
    model, system = resolve(run)
    ctx = CostContext(model, system, run.job, stack)
    return float(evaluate_terms(ctx, Knobs.from_strategy(run.strategy)).step_time_s)


def source_of(run: MeasuredRun) -> str:
    return run.source_key or run.group


def validate(dataset: Dataset, stacks: dict[str, StackProfile] | None = None) -> Validation:
    """Every run predicted with the cost model; errors per run, per group and overall.
    ``stacks`` replaces named stack profiles (e.g. with calibrated versions)."""
    results = [_predict(run, stacks or {}) for run in dataset.runs]
    groups = [
        _summary(g, [r for r in results if r.group == g])
        for g in dict.fromkeys(r.group for r in results)
    ]
    return Validation(runs=results, groups=groups, overall=_summary("all", results))


def _predict(run: MeasuredRun, stacks: dict[str, StackProfile]) -> RunResult:
    model, system = resolve(run)
    stack = hardware_catalog.load_stack(run.job.stack)
    ctx = CostContext(model, system, run.job, stacks.get(stack.name, stack))
    terms = evaluate_terms(ctx, Knobs.from_strategy(run.strategy))
    predicted = float(terms.step_time_s)
    return RunResult(
        id=run.id,
        group=run.group,
        source=source_of(run),
        stack=stack.name,
        model=model.name,
        system=system.name,
        gpus=run.gpus,
        strategy=run.strategy.describe(),
        measured_step_time_s=run.measured_step_time_s,
        predicted_step_time_s=predicted,
        error=predicted / run.measured_step_time_s - 1,
        predicted_mfu=float(terms.mfu),
        measured_mfu=float(terms.mfu) * predicted / run.measured_step_time_s,
    )


def cross_validate(
    dataset: Dataset, jobs: int = 1, progress: Callable[[str], None] | None = None
) -> CrossValidation:
    """Leave one source out and predict its runs from profiles that never saw it: every stack
    starts from planner.calibration.PRIORS (the catalog's values were fitted on every run); a
    stack with runs in the other sources is fitted on those; a stack whose runs were all left
    out keeps its priors, with the GEMM share transferred from the other stacks' fits. Also the
    in-sample error of the catalog profiles, for comparison.

    The folds are independent: with ``jobs`` > 1 they run in that many processes (the same
    answer). ``progress`` hears a line as each fold ends (and, in one process, as its fits go)."""
    sources = list(dict.fromkeys(source_of(run) for run in dataset.runs))
    if len(sources) < 2:
        raise InputError(
            f"validate --cross-validate: the dataset has one source ({sources[0]!r}); leaving "
            "it out leaves nothing to calibrate on (give runs a source_key or group per source)"
        )
    for run in dataset.runs:  # a bad run is one error here, before any fold is fitted
        resolve(run)
    folds: list[tuple[Fold, list[RunResult]]] = []
    for fold, results in _folds(dataset, sources, jobs, progress):
        folds.append((fold, results))
        if progress:
            progress(f"cross-validation: {len(folds)} of {len(sources)} folds done")
    order = {source: i for i, source in enumerate(sources)}
    folds.sort(key=lambda pair: order[pair[0].source])
    predicted = [result for _, results in folds for result in results]
    return CrossValidation(
        folds=[fold for fold, _ in folds],
        runs=predicted,
        overall=_summary("all", predicted),
        in_sample=validate(dataset).overall,
    )


def _folds(
    dataset: Dataset, sources: list[str], jobs: int, progress: Callable[[str], None] | None
) -> Iterator[tuple[Fold, list[RunResult]]]:
    """Each source's fold as it ends: in this process, or in ``jobs`` worker processes."""
    if jobs <= 1 or len(sources) < 2:
        for source in sources:
            yield _fold(dataset, source, progress)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(jobs, len(sources))) as pool:
        futures = [pool.submit(_fold, dataset, source) for source in sources]
        for future in as_completed(futures):
            yield future.result()


def _fold(
    dataset: Dataset, source: str, progress: Callable[[str], None] | None = None
) -> tuple[Fold, list[RunResult]]:
    """The fold that leaves ``source`` out: its profiles' provenance and its runs predicted."""
    from planner.calibration import run_stack

    held = [run for run in dataset.runs if source_of(run) == source]
    rest = [run for run in dataset.runs if source_of(run) != source]
    report = (lambda line: progress(f"fold {source}: {line}")) if progress else None
    stacks, trained_on = _fold_profiles(list(dict.fromkeys(map(run_stack, held))), rest, report)
    results = [_predict(run, stacks) for run in held]
    fold = Fold(source=source, calibrated_on=trained_on, summary=_summary(source, results))
    return fold, results


def _fold_profiles(
    names: list[str], rest: list[MeasuredRun], progress: Callable[[str], None] | None = None
) -> tuple[dict[str, StackProfile], dict[str, str]]:
    """The profiles of the stacks ``names`` for a fold whose other sources hold ``rest``, and
    what each was fitted on (cross_validate)."""
    from planner.calibration import fit, prior_profile, run_stack, transferred_gemm_efficiency

    own: dict[str, list[MeasuredRun]] = {}
    for run in rest:
        own.setdefault(run_stack(run), []).append(run)
    fitted: dict[str, tuple[int, dict[str, float]]] = {}

    def own_fit(name: str) -> tuple[int, dict[str, float]]:
        """(runs, fitted parameters) of a stack on its runs in ``rest``, fitted once."""
        if name not in fitted:
            prior = prior_profile(hardware_catalog.load_stack(name))
            params, _ = fit(own[name], prior, progress=progress)
            fitted[name] = (len(own[name]), params)
        return fitted[name]

    stacks, trained_on = {}, {}
    for name in names:
        prior = prior_profile(hardware_catalog.load_stack(name))
        if name in own:
            stacks[name] = prior.model_copy(update=own_fit(name)[1])
            others = sorted({source_of(run) for run in own[name]})
            trained_on[name] = "its runs in " + ", ".join(others)
        else:
            gemm = transferred_gemm_efficiency({other: own_fit(other) for other in own})
            stacks[name] = prior.model_copy(update={"gemm_efficiency": gemm})
            shares = ", ".join(
                f"{other} {params['gemm_efficiency']:.3f} ({count} runs)"
                for other, (count, params) in sorted(fitted.items())
            )
            trained_on[name] = f"no runs: priors, GEMM share {gemm:.3f} from {shares}"
    return stacks, trained_on


def _summary(group: str, results: list[RunResult]) -> GroupSummary:
    errors = [abs(r.error) for r in results]
    return GroupSummary(
        group=group,
        runs=len(results),
        mean_abs_error=statistics.fmean(errors),
        worst_abs_error=max(errors),
    )
