"""Fit an accelerator's efficiency parameters to measured runs (``planner calibrate``).

One parameter set per system, for all its runs (no per-run or per-model factors):

- ``gemm_stack_efficiency``: the fraction of the accelerator's matmul curve (raw GEMM
  benchmarks, kept as it is) that the training stack's GEMMs achieve in a real step;
- ``attention_efficiency``: the attention core's efficiency relative to that curve;
- ``hbm_efficiency``: achievable fraction of HBM bandwidth for memory-bound kernels;
- ``scale_up_efficiency`` / ``scale_out_efficiency``: achievable fraction of the network tiers'
  bandwidth for collectives.

The fit minimises the mean absolute log error of the predicted step times plus a quarter of the
worst one (so no run is sacrificed for the mean), by coordinate search on a shrinking grid inside
physical bounds, started from the system's current values and from the middle of the bounds
(the better of the two wins). Parameters not set free keep the system's current values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from planner.cost.context import CostContext
from planner.cost.step import Knobs, evaluate_terms
from planner.errors import InputError
from planner.quantities import CALIBRATED_PARAMETERS
from planner.specs import SystemSpec
from planner.validation import Dataset, MeasuredRun, resolve

PARAMETERS = CALIBRATED_PARAMETERS
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_stack_efficiency": (0.3, 1.0),
    "attention_efficiency": (0.1, 1.0),
    "hbm_efficiency": (0.3, 1.0),
    "scale_up_efficiency": (0.2, 1.0),
    "scale_out_efficiency": (0.2, 1.0),
}


class EfficiencyParams(BaseModel):
    """The fitted quantities (see the module docstring)."""

    gemm_stack_efficiency: float = Field(gt=0, le=1)
    attention_efficiency: float = Field(gt=0, le=1)
    hbm_efficiency: float = Field(gt=0, le=1)
    scale_up_efficiency: float = Field(gt=0, le=1)
    scale_out_efficiency: float = Field(gt=0, le=1)


def current_params(system: SystemSpec) -> EfficiencyParams:
    """The parameters a system has now."""
    return EfficiencyParams(
        gemm_stack_efficiency=system.accelerator.gemm_stack_efficiency,
        attention_efficiency=system.accelerator.attention_efficiency,
        hbm_efficiency=system.hbm.efficiency,
        scale_up_efficiency=system.network_tiers[0].efficiency,
        scale_out_efficiency=system.network_tiers[-1].efficiency,
    )


def apply_params(system: SystemSpec, params: EfficiencyParams, note: str = "") -> SystemSpec:
    """The system with these efficiency parameters (and ``note`` as their source)."""
    accelerator = system.accelerator.model_copy(
        update={
            "gemm_stack_efficiency": params.gemm_stack_efficiency,
            "attention_efficiency": params.attention_efficiency,
        }
    )
    hbm = system.hbm.model_copy(update={"efficiency": params.hbm_efficiency})
    tiers = list(system.network_tiers)
    tiers[-1] = tiers[-1].model_copy(update={"efficiency": params.scale_out_efficiency})
    if len(tiers) > 1:
        tiers[0] = tiers[0].model_copy(update={"efficiency": params.scale_up_efficiency})
    sources = dict(system.sources)
    if note:
        for key in (
            "accelerator.matmul_efficiency",
            "accelerator.attention_efficiency",
            "memory_tiers[0].efficiency",
            "network_tiers[0].efficiency",
            f"network_tiers[{len(tiers) - 1}].efficiency",
        ):
            sources[key] = note
    return system.model_copy(
        update={
            "accelerator": accelerator,
            "memory_tiers": (hbm, *system.memory_tiers[1:]),
            "network_tiers": tuple(tiers),
            "sources": sources,
        }
    )


class _Problem:
    """The runs of one system, resolved once; evaluates the loss for parameter vectors."""

    def __init__(self, runs: Sequence[MeasuredRun], system: SystemSpec) -> None:
        self.system = system
        self.runs = [(run, resolve(run, system)[0]) for run in runs]

    def errors(self, params: EfficiencyParams) -> np.ndarray:
        system = apply_params(self.system, params)
        predicted = [
            float(
                evaluate_terms(
                    CostContext(model, system, run.job), Knobs.from_strategy(run.strategy)
                ).step_time_s
            )
            for run, model in self.runs
        ]
        measured = np.array([run.measured_step_time_s for run, _ in self.runs])
        return np.array(predicted) / measured - 1

    def loss(self, params: EfficiencyParams) -> float:
        log_errors = np.abs(np.log1p(self.errors(params)))
        return float(log_errors.mean() + 0.25 * log_errors.max())


def fit(
    dataset: Dataset,
    system: SystemSpec,
    free: Sequence[str] = PARAMETERS,
    rounds: int = 6,
) -> tuple[EfficiencyParams, float]:
    """Fit the ``free`` parameters of ``system`` to the dataset's runs on that system (by the
    system's name). Returns the parameters and the loss."""
    unknown = set(free) - set(PARAMETERS)
    if unknown:
        raise InputError(
            f"calibrate: unknown parameters {sorted(unknown)}; allowed: {', '.join(PARAMETERS)}"
        )
    runs = [
        r
        for r in dataset.runs
        if (r.system if isinstance(r.system, str) else r.system.name) == system.name
    ]
    if not runs:
        raise InputError(f"calibrate: the dataset has no run on system {system.name!r}")
    problem = _Problem(runs, system)
    start = current_params(system).model_dump()
    middle = {name: (_mid(name) if name in free else value) for name, value in start.items()}
    results = [_descend(problem, values, free, rounds) for values in (start, middle)]
    values, loss = min(results, key=lambda result: result[1])
    return EfficiencyParams(**values), loss


def _mid(name: str) -> float:
    low, high = BOUNDS[name]
    return (low + high) / 2


def _descend(
    problem: _Problem, values: dict[str, float], free: Sequence[str], rounds: int
) -> tuple[dict[str, float], float]:
    """Coordinate search: try ± a step on each free parameter, keep improvements, halve the
    step when none helps."""
    best = problem.loss(EfficiencyParams(**values))
    step = 0.25
    for _ in range(rounds):
        improved = True
        while improved:
            improved = False
            for name in free:
                for candidate in _neighbours(name, values[name], step):
                    trial = {**values, name: candidate}
                    loss = problem.loss(EfficiencyParams(**trial))
                    if loss < best - 1e-12:
                        best, values, improved = loss, trial, True
        step /= 2
    return values, best


def _neighbours(name: str, value: float, step: float) -> list[float]:
    low, high = BOUNDS[name]
    candidates = [value + sign * step * (high - low) / 2 for sign in (-1, 1)]
    clipped = (min(high, max(low, c)) for c in candidates)
    return [c for c in clipped if c != value]
