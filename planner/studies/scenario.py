"""One scenario of a study, solved: a plan or a minimum-hardware query on the scenario's model,
system and job, flattened into one row (inputs, status, strategy, step time, memory per tier); a
scenario's bad input or a bug becomes its row's error, not the sweep's."""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError

import hardware_catalog
from planner.errors import InputError, describe_validation_error
from planner.specs import JobSpec
from planner.specs.hardware import override_system
from planner.specs.quantities import QUANTITIES
from planner.studies.study import JOB_AXES, Study, scenario_model


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
    except Exception as error:  # a bug met by one scenario: its row says so, the rest still run
        first_line = (str(error).splitlines() or [""])[0]
        message = f"internal error: {type(error).__name__}: {first_line} (a bug in planner)"
    row = dict(scenario)  # without what the failed solve had written
    row.update(status="error", error=message, solve_time_s=_elapsed_s(started))
    return row


def _elapsed_s(started: float) -> float:
    return round(time.perf_counter() - started, 4)


def _solve_scenario(
    study: Study, scenario: dict[str, Any], row: dict[str, Any], started: float
) -> dict[str, Any]:
    from constraints.target import PerformanceTarget
    from planner.queries.min_hardware import min_hardware
    from planner.queries.plan import plan

    model = scenario_model(scenario)
    system = override_system(hardware_catalog.load_system(scenario["system"]), scenario)
    job_fields = {k: v for k, v in scenario.items() if k in JOB_AXES}
    job = JobSpec(global_batch=scenario["global_batch"], **job_fields)
    target = PerformanceTarget(max_step_s=study.goal.max_step_s, min_mfu=study.goal.min_mfu)
    if study.query == "plan":
        diagnose = "conflict" if study.diagnose else False
        result = plan(model, system, job, scenario["gpus"], target=target, diagnose=diagnose)
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
        row["minimize"] = study.minimize
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
        row.update(_training_columns(estimate))
        for tier, items in estimate.memory_gib.items():
            row[f"memory_{tier}_gib"] = items["total"]
            row[f"memory_{tier}_capacity_gib"] = items["capacity"]
            for item in ("weights", "gradients", "optimizer", "activations"):
                if item in items:
                    row[f"memory_{tier}_{item}_gib"] = items[item]
    if diagnosis is not None:
        row["conflict"] = "; ".join(c.label for c in diagnosis.conflicts)
    return row


def _training_columns(estimate) -> dict[str, Any]:
    """With a token budget: days and GPU-hours to train it, ideal and with failures, and the
    goodput with what sets it (failures per day, checkpoint, interval, restart)."""
    training, goodput = estimate.training, estimate.goodput
    if training is None:
        return {}
    columns: dict[str, Any] = {"days": training.days, "gpu_hours": training.gpu_hours}
    if goodput is not None:
        columns.update(
            goodput=goodput.goodput,
            effective_days=goodput.effective_days,
            effective_gpu_hours=goodput.gpu_hours,
            failures_per_day=goodput.failures_per_day,
            job_mtbf_h=goodput.job_mtbf_h,
            checkpoint_gib=goodput.checkpoint_gib_total,
            checkpoint_stall_s=goodput.checkpoint_stall_s,
            checkpoint_interval_s=goodput.interval_s,
            restart_s=goodput.restart_s,
        )
    return columns
