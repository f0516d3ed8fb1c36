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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import hardware_catalog
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.knobs import Knobs
from planner.cost.step import evaluate_terms
from planner.errors import InputError
from planner.space.rules import strategy_violations
from planner.specs import JobSpec, ModelSpec, StackProfile, Strategy, SystemSpec
from planner.specs import limits as lim

BUNDLED_DATASET = hardware_catalog.CATALOG / "calibration" / "published_runs.yaml"


class MeasuredRun(BaseModel):
    """One measured run. Unknown provenance fields are kept, not checked."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    id: str
    """The run's name, unique in its dataset: not empty, not only blanks."""
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
    measured_memory_gib: float | None = Field(default=None, gt=0, le=lim.MAX_CAPACITY_GIB)
    """The peak GPU memory the run reached, GiB, as PyTorch's caching allocator reports it
    (``max_memory_reserved``: the CUDA context and NCCL's own buffers left out), where the
    source states it."""

    @field_validator("id")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("allowed: a name with at least one visible character")
        return value


class Dataset(BaseModel):
    """Measured runs, each with its own non-empty id (results, calibration and
    cross-validation are keyed by it: a repeated id counted one run twice)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    runs: tuple[MeasuredRun, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _ids_unique(self) -> Dataset:
        seen: dict[str, int] = {}
        for index, run in enumerate(self.runs):
            if run.id in seen:
                raise ValueError(
                    f"runs.{index}.id = {run.id!r}: already the id of runs.{seen[run.id]}; "
                    "allowed: an id no other run has"
                )
            seen[run.id] = index
        return self


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
    measured_memory_gib: float | None = None
    predicted_memory_gib: float | None = None
    """The model's HBM per GPU on the most loaded stage less its fixed reserve (the reserve
    stands for the CUDA context and NCCL's buffers, which the measured peak leaves out), where
    the run states a measured peak."""
    memory_error: float | None = None
    """predicted / measured memory − 1."""


class GroupSummary(BaseModel):
    group: str
    runs: int
    mean_abs_error: float
    worst_abs_error: float
    memory_runs: int = 0
    """Runs with a measured peak memory."""
    memory_mean_abs_error: float | None = None
    memory_median_error: float | None = None
    """Signed: negative where the model holds less than the run did."""


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


def predict_step_s(run: MeasuredRun, stack: StackProfile | None = None) -> float:
    model, system = resolve(run)
    ctx = CostContext(model, system, run.job, stack)
    return float(evaluate_terms(ctx, Knobs.from_strategy(run.strategy)).step_time_s)


def source_of(run: MeasuredRun) -> str:
    return run.source_key or run.group


def validate(dataset: Dataset, stacks: dict[str, StackProfile] | None = None) -> Validation:
    """Every run predicted with the cost model; errors per run, per group and overall.
    ``stacks`` replaces named stack profiles (e.g. with calibrated versions)."""
    results = [predict_run(run, stacks or {}) for run in dataset.runs]
    groups = [
        summarize(g, [r for r in results if r.group == g])
        for g in dict.fromkeys(r.group for r in results)
    ]
    return Validation(runs=results, groups=groups, overall=summarize("all", results))


def predict_run(run: MeasuredRun, stacks: dict[str, StackProfile]) -> RunResult:
    model, system = resolve(run)
    stack = hardware_catalog.load_stack(run.job.stack)
    ctx = CostContext(model, system, run.job, stacks.get(stack.name, stack))
    terms = evaluate_terms(ctx, Knobs.from_strategy(run.strategy))
    predicted = float(terms.step_time_s)
    memory = None
    if run.measured_memory_gib is not None:
        held = float(terms.hbm_bytes) - float(ctx.hbm_reserve_bytes)
        memory = held / BYTES_PER_GIB
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
        measured_memory_gib=run.measured_memory_gib,
        predicted_memory_gib=memory,
        memory_error=None if memory is None else memory / run.measured_memory_gib - 1,
    )


def summarize(group: str, results: list[RunResult]) -> GroupSummary:
    errors = [abs(r.error) for r in results]
    memory = [r.memory_error for r in results if r.memory_error is not None]
    return GroupSummary(
        group=group,
        runs=len(results),
        mean_abs_error=statistics.fmean(errors),
        worst_abs_error=max(errors),
        memory_runs=len(memory),
        memory_mean_abs_error=statistics.fmean(abs(e) for e in memory) if memory else None,
        memory_median_error=statistics.median(memory) if memory else None,
    )
