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
      scale_out_gbps: [50]
    goal: {min_mfu: 0.5}         # optional: max_step_s, min_mfu
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

import hardware_catalog
from constraints.tables import with_bandwidth
from constraints.target import PerformanceTarget
from planner.min_hardware import QUANTITIES, min_hardware
from planner.plan import plan
from planner.specs import JobSpec, SystemSpec

HARDWARE_AXES = ("hbm_gib", "offload_gib", "offload_gbps", "scale_out_gbps")


class BatchRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    per_gpu: float = Field(gt=0)


class Goal(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_step_s: float | None = Field(default=None, gt=0)
    min_mfu: float | None = Field(default=None, gt=0, le=1)


class Study(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "study"
    query: Literal["plan", "min-hardware"] = "plan"
    minimize: str | None = None
    models: tuple[str, ...] = Field(min_length=1)
    systems: tuple[str, ...] = Field(min_length=1)
    gpus: tuple[int, ...] = Field(min_length=1)
    global_batch: int | BatchRule
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
            if not values or any(v <= 0 for v in values):
                raise ValueError(f"hardware.{key} needs positive values")
        return value

    @field_validator("gpus")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(g <= 0 for g in value):
            raise ValueError("gpus must be positive")
        return value

    def batch_for(self, gpus: int) -> int:
        if isinstance(self.global_batch, int):
            return self.global_batch
        return max(1, math.ceil(self.global_batch.per_gpu * gpus))


def load_study(path: str | Path) -> Study:
    """A study file, every problem one line naming the key (names resolved here too)."""
    from planner.errors import InputError

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


def system_variant(system: SystemSpec, scenario: dict[str, Any]) -> SystemSpec:
    """The system with the scenario's hardware overrides."""
    if "hbm_gib" in scenario:
        system = _capacity(system, 0, scenario["hbm_gib"])
    if "offload_gib" in scenario or "offload_gbps" in scenario:
        if not system.offload_tiers:
            from planner.specs import MemoryTierSpec

            tier = MemoryTierSpec(
                name="offload",
                capacity_gib=scenario.get("offload_gib", 512),
                bandwidth_gbps=scenario.get("offload_gbps", 100),
            )
            system = system.model_copy(update={"memory_tiers": (*system.memory_tiers, tier)})
        if "offload_gib" in scenario:
            system = _capacity(system, 1, scenario["offload_gib"])
        if "offload_gbps" in scenario:
            system = with_bandwidth(system, "offload_bw", scenario["offload_gbps"])
    if "scale_out_gbps" in scenario:
        system = with_bandwidth(system, "scale_out_bw", scenario["scale_out_gbps"])
    return system


def _capacity(system: SystemSpec, tier: int, gib: float) -> SystemSpec:
    tiers = tuple(
        t.model_copy(update={"capacity_gib": gib}) if i == tier else t
        for i, t in enumerate(system.memory_tiers)
    )
    return system.model_copy(update={"memory_tiers": tiers})


def run_scenario(study: Study, scenario: dict[str, Any]) -> dict[str, Any]:
    """One row: the scenario's inputs, then status, strategy, step time, MFU, memory per tier,
    solve time and, when nothing fits, the conflicting constraints."""
    started = time.perf_counter()
    model = hardware_catalog.load_model(scenario["model"])
    system = system_variant(hardware_catalog.load_system(scenario["system"]), scenario)
    job = JobSpec(global_batch=scenario["global_batch"])
    target = PerformanceTarget(max_step_s=study.goal.max_step_s, min_mfu=study.goal.min_mfu)
    row = dict(scenario)
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
    row.update(status=status, solve_time_s=round(time.perf_counter() - started, 4))
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
    ``stop_after`` stops after that many new rows (to test interruption)."""
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    done = {row["id"]: row for row in read_rows(out)}
    todo = [s for s in scenarios(study) if s["id"] not in done]
    total = len(done) + len(todo)
    if progress:
        progress(len(done), total)
    if stop_after is not None:
        todo = todo[:stop_after]
    if rows_path.exists() and rows_path.read_bytes()[-1:] not in (b"", b"\n"):
        with rows_path.open("a", encoding="utf-8") as sink:  # end a line torn by a hard kill
            sink.write("\n")
    with rows_path.open("a", encoding="utf-8") as sink:

        def record(row: dict[str, Any]) -> None:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done[row["id"]] = row
            if progress:
                progress(len(done), total)

        if jobs <= 1:
            for scenario in todo:
                record(run_scenario(study, scenario))
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(run_scenario, study, s) for s in todo]
                for future in as_completed(futures):
                    record(future.result())
    ordered = [done[s["id"]] for s in scenarios(study) if s["id"] in done]
    write_csv(out / "rows.csv", ordered)
    return ordered


def read_rows(out: Path) -> list[dict[str, Any]]:
    """Rows already written (a truncated last line from a hard kill is ignored)."""
    path = out / "rows.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
