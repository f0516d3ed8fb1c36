"""Predicted against measured step times of real training runs (``planner validate``).

A dataset is a YAML/JSON file with a ``runs`` list; each run names its model (a catalog name or
an inline model spec), its system (catalog name, path or inline spec), GPU count, job, strategy
and the measured step time, plus free-form provenance. The bundled dataset
(hardware_catalog/calibration/published_runs.yaml) holds the published A100 and H100 runs whose
strategy is fully stated.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import hardware_catalog
from planner.cost.context import CostContext
from planner.cost.step import Knobs, evaluate_terms
from planner.errors import InputError
from planner.rules import strategy_violations
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

BUNDLED_DATASET = hardware_catalog.CATALOG / "calibration" / "published_runs.yaml"


class MeasuredRun(BaseModel):
    """One measured run. Unknown provenance fields are kept, not checked."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    group: str = "user"
    model: ModelSpec | str
    system: SystemSpec | str
    gpus: int = Field(gt=0)
    job: JobSpec
    strategy: Strategy
    measured_step_time_s: float = Field(gt=0)


class Dataset(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    runs: tuple[MeasuredRun, ...] = Field(min_length=1)


class RunResult(BaseModel):
    id: str
    group: str
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


def predict_step_s(run: MeasuredRun, system: SystemSpec | None = None) -> float:
    model, system = resolve(run, system)
    ctx = CostContext(model, system, run.job)
    return float(evaluate_terms(ctx, Knobs.from_strategy(run.strategy)).step_time_s)


def validate(dataset: Dataset, systems: dict[str, SystemSpec] | None = None) -> Validation:
    """Every run predicted with the cost model; errors per run, per group and overall.
    ``systems`` replaces named systems (e.g. with calibrated versions)."""
    results = []
    for run in dataset.runs:
        name = run.system if isinstance(run.system, str) else run.system.name
        model, system = resolve(run, (systems or {}).get(name))
        ctx = CostContext(model, system, run.job)
        terms = evaluate_terms(ctx, Knobs.from_strategy(run.strategy))
        predicted = float(terms.step_time_s)
        measured_mfu = float(terms.mfu) * predicted / run.measured_step_time_s
        results.append(
            RunResult(
                id=run.id,
                group=run.group,
                model=model.name,
                system=system.name,
                gpus=run.gpus,
                strategy=run.strategy.describe(),
                measured_step_time_s=run.measured_step_time_s,
                predicted_step_time_s=predicted,
                error=predicted / run.measured_step_time_s - 1,
                predicted_mfu=float(terms.mfu),
                measured_mfu=measured_mfu,
            )
        )
    groups = [
        _summary(g, [r for r in results if r.group == g])
        for g in dict.fromkeys(r.group for r in results)
    ]
    return Validation(runs=results, groups=groups, overall=_summary("all", results))


def _summary(group: str, results: list[RunResult]) -> GroupSummary:
    errors = [abs(r.error) for r in results]
    return GroupSummary(
        group=group,
        runs=len(results),
        mean_abs_error=statistics.fmean(errors),
        worst_abs_error=max(errors),
    )
