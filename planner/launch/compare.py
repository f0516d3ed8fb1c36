"""``evaluate --compare``: your strategy against the best one planner finds for the same model,
system, job and GPU count, and the knob changes between them.

The CP-SAT planner (and OR-Tools) load here, inside ``compare`` only: ``evaluate`` without
``--compare`` stays free of them (tests/test_startup.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.cost.estimate import Estimate
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

LABELS = {"micro_batch": "micro-batch", "sequence_parallel": "sequence-parallel"}
"""How a knob is named in the one-line summary (the others by their field name)."""


class KnobChange(BaseModel):
    """One knob that differs: your value and the best strategy's."""

    model_config = ConfigDict(frozen=True)

    knob: str
    yours: int | str | bool
    best: int | str | bool


class Comparison(BaseModel):
    """Yours vs best: step time and MFU of each, the best strategy and the knob changes.
    ``status`` is the plan's (``optimal``, ``feasible``, ``infeasible``, ``unknown``)."""

    model_config = ConfigDict(frozen=True)

    status: str
    yours_step_time_s: float
    yours_mfu: float
    yours_fits: bool
    best_step_time_s: float | None = None
    best_mfu: float | None = None
    best_strategy: Strategy | None = None
    speedup: float | None = None
    changes: list[KnobChange] = []


def compare(
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    strategy: Strategy,
    estimate: Estimate,
    time_limit_s: float | None = None,
) -> Comparison:
    """Plan the same job on ``strategy.gpus`` GPUs and compare it with ``strategy``, within
    plan's default work limit (and ``time_limit_s`` wall-clock seconds, if set)."""
    from planner.queries.plan import plan

    result = plan(model, system, job, strategy.gpus, time_limit_s=time_limit_s, diagnose=False)
    yours = {
        "status": result.status,
        "yours_step_time_s": estimate.step_time_s,
        "yours_mfu": estimate.mfu,
        "yours_fits": estimate.fits,
    }
    if result.strategy is None or result.estimate is None:
        return Comparison(**yours)
    best = result.strategy
    changes = [
        KnobChange(knob=knob, yours=getattr(strategy, knob), best=getattr(best, knob))
        for knob in Strategy.model_fields
        if getattr(strategy, knob) != getattr(best, knob)
    ]
    return Comparison(
        **yours,
        best_step_time_s=result.estimate.step_time_s,
        best_mfu=result.estimate.mfu,
        best_strategy=best,
        speedup=estimate.step_time_s / result.estimate.step_time_s,
        changes=changes,
    )


def summary(comparison: Comparison) -> str:
    """One line: ``your configuration: 14.9 s/step, 41 % MFU; best: 12.1 s, 50 % MFU; change tp
    8→4, pp 4→8, micro-batch 1→2``."""
    c = comparison
    fits = "" if c.yours_fits else " (does not fit)"
    yours = f"your configuration: {c.yours_step_time_s:.3g} s/step, {c.yours_mfu:.0%} MFU{fits}"
    yours = yours.replace("%", " %")
    if c.best_step_time_s is None or c.best_mfu is None:
        return f"{yours}; best: none found ({c.status})"
    best = f"best: {c.best_step_time_s:.3g} s, {c.best_mfu * 100:.0f} % MFU"
    if not c.changes:
        return f"{yours}; {best}; yours is the best strategy"
    changes = ", ".join(
        f"{LABELS.get(change.knob, change.knob)} {_value(change.yours)}→{_value(change.best)}"
        for change in c.changes
    )
    return f"{yours}; {best}; change {changes}"


def _value(value: int | str | bool) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
