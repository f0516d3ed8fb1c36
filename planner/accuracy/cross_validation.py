"""Leave-one-source-out cross-validation of the cost model: each source's runs predicted by stack
profiles calibrated (planner.accuracy.calibration) on the other sources only, beside the
catalog profiles' in-sample error (planner.accuracy.validation)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pydantic import BaseModel

import hardware_catalog
from planner.accuracy.calibration import fit, prior_profile, run_stack, transferred_gemm_efficiency
from planner.accuracy.validation import (
    Dataset,
    GroupSummary,
    MeasuredRun,
    RunResult,
    predict_run,
    resolve,
    source_of,
    summarize,
    validate,
)
from planner.errors import InputError
from planner.specs import StackProfile


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


def cross_validate(
    dataset: Dataset, jobs: int = 1, progress: Callable[[str], None] | None = None
) -> CrossValidation:
    """Leave one source out and predict its runs from profiles that never saw it: every stack
    starts from planner.accuracy.calibration.PRIORS (the catalog's values were fitted on every run);
    a stack with runs in the other sources is fitted on those; a stack whose runs were all left
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
        overall=summarize("all", predicted),
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
    held = [run for run in dataset.runs if source_of(run) == source]
    rest = [run for run in dataset.runs if source_of(run) != source]
    report = (lambda line: progress(f"fold {source}: {line}")) if progress else None
    stacks, trained_on = _fold_profiles(list(dict.fromkeys(map(run_stack, held))), rest, report)
    results = [predict_run(run, stacks) for run in held]
    fold = Fold(source=source, calibrated_on=trained_on, summary=summarize(source, results))
    return fold, results


def _fold_profiles(
    names: list[str], rest: list[MeasuredRun], progress: Callable[[str], None] | None = None
) -> tuple[dict[str, StackProfile], dict[str, str]]:
    """The profiles of the stacks ``names`` for a fold whose other sources hold ``rest``, and
    what each was fitted on (cross_validate)."""
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
