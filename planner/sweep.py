"""Co-design studies: many plans (or minimum-hardware queries) at once (``planner sweep``).

A study file names the axes — models, systems, GPU counts, hardware overrides — and the query.
Every combination is one scenario with a stable id. Scenarios run in worker processes; each
finished one is appended as a JSON line to ``rows.jsonl`` (flushed at once, so an interrupted
sweep loses nothing it finished) and ``rows.csv`` is rewritten from it at the end. Running the
same study into the same folder again skips the scenarios already there.

Study file (YAML or JSON)::

    name: offload-bandwidth
    query: plan                  # or min-hardware (then `minimize`, optional `goal`)
    models: [mt-1t, mt-11t]
    systems: [h100-offload-512g]
    gpus: [4096, 16384]
    global_batch: 4096           # or {per_gpu: 0.25}: a quarter of a sequence per GPU
    hardware:                    # optional overrides; each list is one more axis
      hbm_gib: [80, 120]
      offload_gib: [512]
      offload_gbps: [25, 50, 100, 200]
      scale_out_gbps: [50]       # also scale_up_gbps, scale_up_domain (planner.hardware)
    goal: {min_mfu: 0.5}         # optional: max_step_s, min_mfu
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import hardware_catalog
from planner import limits as lim
from planner.errors import InputError, describe_validation_error
from planner.hardware import HardwareOverrides, override_system
from planner.quantities import QUANTITIES
from planner.specs import JobSpec

HARDWARE_AXES = tuple(HardwareOverrides.model_fields)
"""The hardware quantities a study may vary (planner.hardware)."""

MAX_SCENARIOS = 1_000_000
"""Scenarios in one study (the product of its axes): past this, split the study."""
STUDY_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BatchRule(BaseModel):
    model_config = STUDY_CONFIG
    per_gpu: float = Field(gt=0, le=lim.MAX_GLOBAL_BATCH)


class Goal(BaseModel):
    model_config = STUDY_CONFIG
    max_step_s: float | None = Field(default=None, gt=0, le=lim.MAX_STEP_TIME_S)
    min_mfu: float | None = Field(default=None, gt=0, le=1)


class Study(BaseModel):
    model_config = STUDY_CONFIG

    name: str = "study"
    query: Literal["plan", "min-hardware"] = "plan"
    minimize: str | None = None
    models: tuple[str, ...] = Field(min_length=1)
    systems: tuple[str, ...] = Field(min_length=1)
    gpus: tuple[int, ...] = Field(min_length=1)
    global_batch: int | BatchRule = Field(union_mode="left_to_right")
    hardware: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    goal: Goal = Goal()

    @field_validator("hardware")
    @classmethod
    def _known_axes(cls, value: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
        for key, values in value.items():
            if key not in HARDWARE_AXES:
                raise ValueError(
                    f"unknown hardware axis {key!r}; allowed: {', '.join(HARDWARE_AXES)}"
                )
            if not values:
                raise ValueError(f"hardware.{key} needs at least one value")
            for v in values:
                try:
                    HardwareOverrides(**{key: v})
                except ValidationError as error:
                    raise ValueError(
                        f"hardware.{key} = {v!r}: {error.errors()[0]['msg']}"
                    ) from None
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_counts(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for gpus in value:
            lim.check_range("gpus", gpus, 1, lim.MAX_GPUS)
        return value

    @field_validator("global_batch")
    @classmethod
    def _batch(cls, value: int | BatchRule) -> int | BatchRule:
        if isinstance(value, int):
            lim.check_range("global_batch", value, 1, lim.MAX_GLOBAL_BATCH)
        return value

    @model_validator(mode="after")
    def _size(self) -> Study:
        count = len(self.models) * len(self.systems) * len(self.gpus)
        for values in self.hardware.values():
            count *= len(values)
        if count > MAX_SCENARIOS:
            raise ValueError(f"{count:,} scenarios; at most {MAX_SCENARIOS:,} per study")
        for gpus in self.gpus:
            lim.check_range(
                f"global batch at {gpus} GPUs", self.batch_for(gpus), 1, lim.MAX_GLOBAL_BATCH
            )
        return self

    def batch_for(self, gpus: int) -> int:
        if isinstance(self.global_batch, int):
            return self.global_batch
        return max(1, math.ceil(self.global_batch.per_gpu * gpus))


def load_study(path: str | Path) -> Study:
    """A study file, every problem one line naming the key (names resolved here too)."""
    study = hardware_catalog.read_spec_file(Path(path), Study, "study")
    for name in study.models:
        hardware_catalog.load_model(name)
    for name in study.systems:
        hardware_catalog.load_system(name)
    if study.query == "min-hardware" and study.minimize not in QUANTITIES:
        raise InputError(f"study.minimize = {study.minimize!r}: allowed: {', '.join(QUANTITIES)}")
    return study


def scenarios(study: Study) -> Iterator[dict[str, Any]]:
    """Every combination of the study's axes, with a stable id."""
    axes = sorted(study.hardware)
    for model, system, gpus, *values in itertools.product(
        study.models, study.systems, study.gpus, *(study.hardware[a] for a in axes)
    ):
        overrides = dict(zip(axes, values, strict=True))
        parts = [model, system, str(gpus), *(f"{a}={v:g}" for a, v in overrides.items())]
        yield {
            "id": "|".join(parts),
            "model": model,
            "system": system,
            "gpus": gpus,
            "global_batch": study.batch_for(gpus),
            **overrides,
        }


def run_scenario(study: Study, scenario: dict[str, Any]) -> dict[str, Any]:
    """One row: the scenario's inputs, then status, strategy, step time, MFU, memory per tier,
    solve time and, when nothing fits, the conflicting constraints."""
    started = time.perf_counter()
    row = dict(scenario)
    try:
        return _solve_scenario(study, scenario, row, started)
    except (InputError, ValidationError) as error:  # this scenario's inputs, not the sweep's
        message = (
            describe_validation_error(error, "scenario")
            if isinstance(error, ValidationError)
            else str(error)
        )
        row.update(status="error", error=message, solve_time_s=_elapsed_s(started))
        return row


def _elapsed_s(started: float) -> float:
    return round(time.perf_counter() - started, 4)


def _solve_scenario(
    study: Study, scenario: dict[str, Any], row: dict[str, Any], started: float
) -> dict[str, Any]:
    from constraints.target import PerformanceTarget
    from planner.min_hardware import min_hardware
    from planner.plan import plan

    model = hardware_catalog.load_model(scenario["model"])
    system = override_system(hardware_catalog.load_system(scenario["system"]), scenario)
    job = JobSpec(global_batch=scenario["global_batch"])
    target = PerformanceTarget(max_step_s=study.goal.max_step_s, min_mfu=study.goal.min_mfu)
    if study.query == "plan":
        result = plan(model, system, job, scenario["gpus"], target=target, diagnose="conflict")
        strategy, estimate, status = result.strategy, result.estimate, result.status
        diagnosis = result.diagnosis
    else:
        found = min_hardware(
            model, system, job, study.minimize, gpus=scenario["gpus"], target=target
        )
        minimum = found.minimum
        strategy = minimum.strategy if minimum else None
        estimate = minimum.estimate if minimum else None
        status, diagnosis = found.status, found.diagnosis
        row["minimum"] = minimum.value if minimum else None
        row["minimum_unit"] = QUANTITIES[study.minimize]
    row.update(status=status, solve_time_s=_elapsed_s(started))
    if strategy is not None and estimate is not None:
        row["strategy"] = strategy.describe()
        row.update({f"knob_{k}": v for k, v in strategy.model_dump(mode="json").items()})
        row.update(
            step_time_s=estimate.step_time_s, mfu=estimate.mfu, tokens_per_s=estimate.tokens_per_s
        )
        row.update({f"time_{k}_s": v for k, v in estimate.breakdown_s.items()})
        for tier, items in estimate.memory_gib.items():
            row[f"memory_{tier}_gib"] = items["total"]
            for item in ("weights", "gradients", "optimizer", "activations"):
                if item in items:
                    row[f"memory_{tier}_{item}_gib"] = items[item]
    if diagnosis is not None:
        row["conflict"] = "; ".join(c.label for c in diagnosis.conflicts)
    return row


def run_study(
    study: Study,
    out: Path,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    stop_after: int | None = None,
) -> list[dict[str, Any]]:
    """Run every scenario not yet in ``out/rows.jsonl``; return all rows (old and new).
    ``stop_after`` stops after that many new rows (to test interruption).

    Kill-safe: each row is appended by one ``write`` system call on an O_APPEND descriptor, so
    a process killed at any moment (even SIGKILL) leaves whole lines; a line cut short anyway
    (a full disk, a crash of the machine) is dropped when the sweep resumes, by rewriting the
    file atomically (a temporary file, then ``os.replace``). rows.csv is replaced the same way."""
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    done = {row["id"]: row for row in _repair_rows(rows_path)}
    todo = [s for s in scenarios(study) if s["id"] not in done]
    total = len(done) + len(todo)
    if progress:
        progress(len(done), total)
    if stop_after is not None:
        todo = todo[:stop_after]
    sink = os.open(rows_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:

        def record(row: dict[str, Any]) -> None:
            os.write(sink, (json.dumps(row) + "\n").encode("utf-8"))
            done[row["id"]] = row
            if progress:
                progress(len(done), total)

        if jobs <= 1:
            for scenario in todo:
                record(run_scenario(study, scenario))
        else:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(run_scenario, study, s) for s in todo]
                for future in as_completed(futures):
                    record(future.result())
    finally:
        os.close(sink)
    ordered = [done[s["id"]] for s in scenarios(study) if s["id"] in done]
    write_csv(out / "rows.csv", ordered)
    return ordered


def read_rows(out: Path) -> list[dict[str, Any]]:
    """Rows already written, one per scenario id (lines that are not whole rows are skipped)."""
    return list(_parse_rows(out / "rows.jsonl")[0].values())


def _parse_rows(path: Path) -> tuple[dict[str, dict[str, Any]], bool]:
    """(rows by id, whether the file holds anything else: a torn line, a repeated id)."""
    if not path.exists():
        return {}, False
    rows: dict[str, dict[str, Any]] = {}
    lines = path.read_bytes().split(b"\n")
    whole = lines[:-1]  # the last piece is empty when the file ends a line, else torn
    dirty = lines[-1] != b""
    for line in whole:
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            dirty = True
            continue
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or row["id"] in rows:
            dirty = True
            continue
        rows[row["id"]] = row
    return rows, dirty


def _repair_rows(path: Path) -> list[dict[str, Any]]:
    """The whole rows of ``path``; rewritten atomically first if it holds anything else."""
    rows, dirty = _parse_rows(path)
    if dirty:
        _replace_atomically(path, "".join(json.dumps(row) + "\n" for row in rows.values()))
    return list(rows.values())


def _replace_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    _replace_atomically(path, buffer.getvalue())
