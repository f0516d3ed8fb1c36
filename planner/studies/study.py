"""A study file: the axes of a co-design study and the scenarios they expand to (``planner sweep``).

A study file names the axes — models, systems, GPU counts, the global batch, job fields,
model-shape and hardware overrides — and the query. A list is an axis; every combination is one
scenario with a stable id. Scenarios run in worker processes; each finished one is appended as a
JSON line to ``rows.jsonl`` (flushed at once, so an interrupted sweep loses nothing it finished)
and ``rows.csv`` is rewritten from it at the end. Running the same study into the same folder
again skips the scenarios already there.

Study file (YAML or JSON)::

    name: offload-bandwidth
    query: plan                  # or min-hardware (then `minimize`, optional `goal`)
    models: [mt-1t, mt-11t]
    systems: [h100-offload-512g]
    gpus: [4096, 16384]
    global_batch: 4096           # or [4096, 16384]: an axis; or a rule:
                                 #   {per_gpu: 0.25}: batch ∝ GPUs, a quarter sequence per GPU
                                 #   {tokens: 16777216}: 16M tokens per batch at any sequence
    job:                         # optional JobSpec fields (not global_batch)
      seq_len: [2048, 8192]
      grad_dtype: [fp32, bf16]
      stack: megatron-core
    model_overrides:             # optional ModelSpec shape fields
      heads: [160, 320]
    hardware:                    # optional planner.specs.hardware overrides
      hbm_gib: [80, 120]
      offload_gib: 512
      offload_gbps: [25, 50, 100, 200]
      scale_out_gbps: [50]       # also scale_up_gbps, scale_up_domain, power_cap_w
    goal: {min_mfu: 0.5}         # optional: max_step_s, min_mfu
    diagnose: false              # true: an infeasible row names its conflicting constraints
                                 # (one more solve per such row; `planner sweep --diagnose`)
    exclude:                     # optional: combinations left out of the product
      - {system: h100-offload-512g, stack: calculon}
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import hardware_catalog
from planner.errors import InputError, describe_validation_error
from planner.specs import MODEL_NAMING_FIELDS, JobSpec, ModelSpec
from planner.specs import limits as lim
from planner.specs.hardware import HardwareOverrides
from planner.specs.quantities import QUANTITIES

HARDWARE_AXES = tuple(HardwareOverrides.model_fields)
"""The hardware quantities a study may vary (planner.specs.hardware)."""


STUDY_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


AxisValue = bool | int | float | str
"""One value of an axis (pydantic's smart union keeps the type written in the file)."""


Axis = AxisValue | tuple[AxisValue, ...]
"""A value, or a list of values: one more axis."""


JOB_AXES = tuple(name for name in JobSpec.model_fields if name != "global_batch")
"""The job fields a study may set or vary (the global batch has its own key and rules)."""


MODEL_AXES = tuple(n for n in ModelSpec.model_fields if n not in MODEL_NAMING_FIELDS)
"""The model fields a study may override (the shape, the default sequence, the experts)."""


class BatchRule(BaseModel):
    """The global batch as a rule: ``per_gpu`` sequences per GPU (batch ∝ GPUs, rounded up), or
    ``tokens`` per batch whatever the sequence (batch = tokens / sequence, rounded up)."""

    model_config = STUDY_CONFIG
    per_gpu: float | None = Field(default=None, gt=0, le=lim.MAX_GLOBAL_BATCH)
    tokens: float | None = Field(default=None, gt=0, le=lim.MAX_GLOBAL_BATCH * lim.MAX_SEQ_LEN)

    @model_validator(mode="after")
    def _one_rule(self) -> BatchRule:
        if (self.per_gpu is None) == (self.tokens is None):
            raise ValueError("global_batch rule: give exactly one of per_gpu, tokens")
        return self

    def batch(self, gpus: int, seq_len: int) -> int:
        per = self.per_gpu * gpus if self.per_gpu is not None else self.tokens / seq_len
        return max(1, math.ceil(per))


class Goal(BaseModel):
    model_config = STUDY_CONFIG
    max_step_s: float | None = Field(default=None, gt=0, le=lim.MAX_STEP_TIME_S)
    min_mfu: float | None = Field(default=None, gt=0, le=1)


def _as_axis(value: Axis) -> tuple[AxisValue, ...]:
    return value if isinstance(value, tuple) else (value,)


def _check_axes(
    section: str,
    value: dict[str, Axis],
    allowed: tuple[str, ...],
    check: Callable[[str, Any], Any],
) -> dict[str, Axis]:
    """Every key of ``section`` is allowed and every value passes ``check`` (which raises
    ValidationError, else returns the value as validated); one line naming the first that does
    not. A value written as text that ``check`` reads as another type (YAML reads ``5e-324``,
    without a dot, as a string) becomes that type, so rows carry numbers, not strings."""
    checked: dict[str, Axis] = {}
    for key, values in value.items():
        if key not in allowed:
            raise ValueError(f"unknown {section} axis {key!r}; allowed: {', '.join(allowed)}")
        if not _as_axis(values):
            raise ValueError(f"{section}.{key} needs at least one value")
        kept = []
        for v in _as_axis(values):
            try:
                validated = check(key, v)
            except ValidationError as error:
                reason = error.errors()[0]["msg"]
                raise ValueError(f"{section}.{key} = {v!r}: {reason}") from None
            kept.append(validated if isinstance(v, str) and validated is not None else v)
        checked[key] = tuple(kept) if isinstance(values, tuple) else kept[0]
    return checked


def _check_unique(key: str, values: tuple[AxisValue | BatchRule, ...]) -> None:
    """Each value of an axis once: a row's id is made of its values, so a repeated value would
    give two rows one id (8 and 8.0 are one value)."""
    seen: set[str] = set()
    for value in values:
        text = _text(value) if isinstance(value, AxisValue) else repr(value)
        if text in seen:
            raise ValueError(f"{key} lists {text} more than once; give each value once")
        seen.add(text)


class Study(BaseModel):
    model_config = STUDY_CONFIG

    name: str = "study"
    query: Literal["plan", "min-hardware"] = "plan"
    minimize: str | None = None
    models: tuple[str, ...] = Field(min_length=1)
    systems: tuple[str, ...] = Field(min_length=1)
    gpus: tuple[int, ...] = Field(min_length=1)
    global_batch: int | tuple[int, ...] | BatchRule = Field(union_mode="left_to_right")
    job: dict[str, Axis] = Field(default_factory=dict)
    model_overrides: dict[str, Axis] = Field(default_factory=dict)
    hardware: dict[str, Axis] = Field(default_factory=dict)
    goal: Goal = Goal()
    diagnose: bool = False
    exclude: tuple[dict[str, AxisValue], ...] = ()
    """Combinations left out of the product: a scenario is skipped when it matches every
    ``key: value`` of one entry (keys: model, system, gpus, global_batch, or an axis's row key
    such as ``stack`` or ``model_heads``), as a CI matrix's ``exclude``."""

    @field_validator("hardware")
    @classmethod
    def _hardware_axes(cls, value: dict[str, Axis]) -> dict[str, Axis]:
        return _check_axes(
            "hardware", value, HARDWARE_AXES, lambda k, v: getattr(HardwareOverrides(**{k: v}), k)
        )

    @field_validator("job")
    @classmethod
    def _job_axes(cls, value: dict[str, Axis]) -> dict[str, Axis]:
        return _check_axes(
            "job", value, JOB_AXES, lambda k, v: getattr(JobSpec(global_batch=1, **{k: v}), k)
        )

    @field_validator("model_overrides")
    @classmethod
    def _model_axes(cls, value: dict[str, Axis]) -> dict[str, Axis]:
        return _check_axes("model_overrides", value, MODEL_AXES, lambda k, v: None)

    @field_validator("gpus")
    @classmethod
    def _gpu_counts(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for gpus in value:
            lim.check_range("gpus", gpus, 1, lim.MAX_GPUS)
        return value

    @field_validator("global_batch", mode="before")
    @classmethod
    def _rule(cls, value: object) -> object:
        """A mapping is a rule: its own errors (not the number's) when it is not one."""
        if isinstance(value, dict):
            try:
                return BatchRule.model_validate(value)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                reason = first["msg"].removeprefix("Value error, ")
                raise ValueError(f"{where}: {reason}" if where else reason) from None
        return value

    @field_validator("global_batch")
    @classmethod
    def _batch(cls, value: int | tuple[int, ...] | BatchRule) -> int | tuple[int, ...] | BatchRule:
        for batch in () if isinstance(value, BatchRule) else _as_axis(value):
            lim.check_range("global_batch", batch, 1, lim.MAX_GLOBAL_BATCH)
        if value == ():
            raise ValueError("global_batch needs at least one value")
        return value

    @model_validator(mode="after")
    def _unique(self) -> Study:
        for key in ("models", "systems", "gpus"):
            _check_unique(key, getattr(self, key))
        _check_unique("global_batch", self.batches)
        for section in ("job", "model_overrides", "hardware"):
            for key, values in getattr(self, section).items():
                _check_unique(f"{section}.{key}", _as_axis(values))
        return self

    @model_validator(mode="after")
    def _size(self) -> Study:
        count = self.scenario_count
        if count > lim.MAX_SCENARIOS:
            raise ValueError(f"{count:,} scenarios; at most {lim.MAX_SCENARIOS:,} per study")
        return self

    @property
    def scenario_count(self) -> int:
        """Scenarios of the study: the product of its axes' lengths."""
        count = len(self.models) * len(self.systems) * len(self.gpus) * len(self.batches)
        for section in (self.job, self.model_overrides, self.hardware):
            for values in section.values():
                count *= len(_as_axis(values))
        return count

    @model_validator(mode="after")
    def _excluded_keys(self) -> Study:
        known = {"model", "system", "gpus", "global_batch", *self.axes()}
        for number, entry in enumerate(self.exclude):
            if not entry:
                raise ValueError(f"exclude[{number}]: empty; give the key: value pairs to skip")
            unknown = sorted(set(entry) - known)
            if unknown:
                raise ValueError(
                    f"exclude[{number}]: {', '.join(unknown)} is not an axis of this study; "
                    f"allowed: {', '.join(sorted(known))}"
                )
        return self

    def excluded(self, scenario: dict[str, Any]) -> bool:
        """Whether ``scenario`` matches an ``exclude`` entry."""
        return any(
            all(scenario.get(key) == value for key, value in entry.items())
            for entry in self.exclude
        )

    @property
    def batches(self) -> tuple[int | BatchRule, ...]:
        """The global-batch axis: numbers, or the one rule."""
        if isinstance(self.global_batch, BatchRule):
            return (self.global_batch,)
        return _as_axis(self.global_batch)

    def axes(self) -> dict[str, tuple[AxisValue, ...]]:
        """Every job, model and hardware axis by its row key (model fields as ``model_*``)."""
        named = {k: _as_axis(v) for k, v in self.job.items()}
        named |= {f"model_{k}": _as_axis(v) for k, v in self.model_overrides.items()}
        named |= {k: _as_axis(v) for k, v in self.hardware.items()}
        return named


def load_study(path: str | Path) -> Study:
    """A study file, every problem one line naming the key (names resolved here too; every
    model with every shape override checked, and every global batch a rule gives). A relative
    path to a spec file is looked up next to the study file first, then in the working
    directory; the row keeps the path as written."""
    study = hardware_catalog.read_spec_file(Path(path), Study, "study")
    _preload_beside(study, Path(path).parent)
    for name in study.systems:
        hardware_catalog.load_system(name)
    for name in _as_axis(study.job.get("stack", ())):
        hardware_catalog.load_stack(str(name))
    if study.query == "min-hardware" and study.minimize not in QUANTITIES:
        raise InputError(f"study.minimize = {study.minimize!r}: allowed: {', '.join(QUANTITIES)}")
    for scenario in _model_scenarios(study):
        model = scenario_model(scenario)
        for seq_len in _as_axis(study.job.get("seq_len", model.seq_len)):
            for gpus in study.gpus:
                for batch in study.batches:
                    what = f"global batch of {model.name} at {gpus} GPUs, sequence {seq_len}"
                    value = _batch_value(batch, gpus, int(seq_len))
                    if value > lim.MAX_GLOBAL_BATCH:
                        raise InputError(
                            f"study: {what} = {value}: at most {lim.MAX_GLOBAL_BATCH:,}"
                        )
    return study


def _model_scenarios(study: Study) -> Iterator[dict[str, Any]]:
    keys = sorted(study.model_overrides)
    values = [_as_axis(study.model_overrides[k]) for k in keys]
    for model in study.models:
        for combination in itertools.product(*values):
            yield {"model": model} | {
                f"model_{k}": v for k, v in zip(keys, combination, strict=True)
            }


def scenario_model(scenario: dict[str, Any]) -> ModelSpec:
    """The scenario's catalog model with its ``model_*`` overrides, re-validated; its name says
    what changed."""
    model = hardware_catalog.load_model(scenario["model"])
    changes = {k.removeprefix("model_"): v for k, v in scenario.items() if k.startswith("model_")}
    if not changes:
        return model
    shown = ", ".join(f"{k}={_text(v)}" for k, v in changes.items())
    data = model.model_dump() | changes | {"name": f"{model.name} ({shown})"}
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as error:
        raise InputError(
            describe_validation_error(error, f"model_overrides of {model.name}")
        ) from None


def model_params(row: dict[str, Any]) -> float:
    """Parameters of the row's model with its ``model_*`` overrides (scenario_model), built once
    per distinct model and overrides: a chart asks for every row, and 2,000 rows rebuilt their
    models 8 million times (issue 51)."""
    key = {k: v for k, v in row.items() if k == "model" or k.startswith("model_")}
    return _params_of(json.dumps(key, sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _params_of(scenario_json: str) -> float:
    return float(scenario_model(json.loads(scenario_json)).params)


def _batch_value(batch: int | BatchRule, gpus: int, seq_len: int) -> int:
    return batch if isinstance(batch, int) else batch.batch(gpus, seq_len)


def _text(value: AxisValue) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def scenarios(study: Study) -> Iterator[dict[str, Any]]:
    """Every combination of the study's axes, with a stable id: model, system, GPUs, the
    global batch where it is an axis, then ``key=value`` for each other axis in key order."""
    axes = study.axes()
    keys = sorted(axes)
    default_seq: dict[tuple, int] = {}  # per model and shape: not one validation per scenario
    for model, system, gpus, batch, *values in itertools.product(
        study.models, study.systems, study.gpus, study.batches, *(axes[k] for k in keys)
    ):
        chosen = dict(zip(keys, values, strict=True))
        parts = [model, system, str(gpus)]
        if len(study.batches) > 1:
            parts.append(f"B={batch}")
        parts += [f"{k}={_text(v)}" for k, v in chosen.items()]
        scenario = {"id": "|".join(parts), "model": model, "system": system, "gpus": gpus}
        scenario |= chosen
        seq_len = 0
        if isinstance(batch, BatchRule) and batch.tokens is not None:
            shape = tuple(
                (k, v) for k, v in scenario.items() if k == "model" or k.startswith("model_")
            )
            if shape not in default_seq:
                default_seq[shape] = scenario_model(scenario).seq_len
            seq_len = int(chosen.get("seq_len") or default_seq[shape])
        scenario["global_batch"] = _batch_value(batch, gpus, seq_len)
        if not study.excluded(scenario):
            yield scenario


SpecFiles = list[tuple[str, str, BaseModel]]
"""The user's spec files of a study: (kind, path as written, spec)."""


LOADERS: dict[str, Callable[[str], BaseModel]] = {
    "systems": hardware_catalog.load_system,
    "models": hardware_catalog.load_model,
    "stacks": hardware_catalog.load_stack,
}


def _named_files(study: Study) -> list[tuple[str, str]]:
    """(kind, name) of every system, model and stack the study gives as a path."""
    named = [("systems", n) for n in study.systems] + [("models", n) for n in study.models]
    named += [("stacks", str(n)) for n in _as_axis(study.job.get("stack", ()))]
    return [(kind, n) for kind, n in named if hardware_catalog.is_spec_path(n)]


def _preload_beside(study: Study, folder: Path) -> None:
    """Answer each relative spec path that names a file next to the study with that file; any
    other path is read as written (forgetting what an earlier study in this process preloaded
    under the same name)."""
    for kind, name in _named_files(study):
        beside = folder / name
        if not Path(name).is_absolute() and beside.is_file():
            hardware_catalog.preload(kind, name, LOADERS[kind](str(beside)))
        else:
            hardware_catalog.preload(kind, name, None)


def spec_files(study: Study) -> SpecFiles:
    """The user's spec files a study names, read here, for workers that may not have them (or
    not at the path as written)."""
    return [(kind, n, LOADERS[kind](n)) for kind, n in _named_files(study)]


def preload_files(files: SpecFiles) -> None:
    """In a worker: answer the study's spec paths with the specs the sweep's process read."""
    for kind, name, spec in files:
        hardware_catalog.preload(kind, name, spec)
