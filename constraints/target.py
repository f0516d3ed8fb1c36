"""The performance-target family: the step time at most a bound, or the MFU at least one.

MFU = model FLOPs / (step · GPUs · peak) ≥ m  ⇔  step · GPUs ≤ model FLOPs / (peak · m): linear
for a fixed GPU count, one AddMultiplicationEquality when the count is free. A token budget by a
deadline is a step-time bound: step ≤ deadline · global batch · sequence / tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from constraints.objective import StepVariables
from constraints.variables import LOG_SCALE, Variables
from planner.errors import InputError
from planner.specs import limits as lim


@dataclass(frozen=True)
class PerformanceTarget:
    """A goal on a plan: its step time at most ``max_step_s`` (in [limits.MIN_STEP_TIME_S,
    MAX_STEP_TIME_S]), its MFU at least ``min_mfu`` (in [limits.MIN_MFU, 1]); None: no bound."""

    max_step_s: float | None = None
    min_mfu: float | None = None

    def __post_init__(self) -> None:
        bounds = {
            "max_step_s": ("--max-step-time", lim.MIN_STEP_TIME_S, lim.MAX_STEP_TIME_S),
            "min_mfu": ("--min-mfu", lim.MIN_MFU, 1.0),
        }
        for name, (flag, low, high) in bounds.items():
            value = getattr(self, name)
            if value is None:
                continue
            try:
                lim.check_range(flag, value, low, high)
            except (ValueError, TypeError) as error:
                raise InputError(str(error)) from None

    def describe(self) -> str:
        parts = []
        if self.max_step_s is not None:
            parts.append(f"step ≤ {self.max_step_s:.4g} s")
        if self.min_mfu is not None:
            parts.append(f"MFU ≥ {self.min_mfu:.1%}")
        return "performance target (" + ", ".join(parts) + ")"


def add_target(
    variables: Variables,
    steps: StepVariables,
    target: PerformanceTarget,
    unit_s: float,
    model_flops: float,
    peak_flops: float,
) -> None:
    literal = variables.family("target", target.describe())
    m = variables.model
    if target.max_step_s is not None:
        # A bound above the step variable's own upper bound is vacuous: clamp it there, so
        # that no bound, however large, leaves CP-SAT's 64-bit range.
        bound = min(math.floor(target.max_step_s / unit_s), variables.ub(steps.step))
        m.Add(steps.step <= bound).OnlyEnforceIf(literal)
        if variables.space.gpus is None:
            # Implied (MFU ≤ 1): GPUs ≥ model FLOPs / (peak · step bound). Stated for the
            # solver, whose tables hide it, in the log form of the GPU count.
            fewest = model_flops / (peak_flops * target.max_step_s)
            if fewest > 1:
                cut = round(LOG_SCALE * math.log(fewest)) - 2
                m.Add(variables.log_gpu_count() >= cut).OnlyEnforceIf(literal)
    if target.min_mfu is not None:
        budget = math.floor(model_flops / (peak_flops * target.min_mfu) / unit_s)
        gpus = variables.space.gpus
        if gpus is not None:
            bound = min(budget // gpus, variables.ub(steps.step))
            m.Add(steps.step <= bound).OnlyEnforceIf(literal)
        else:
            count = variables.gpu_count()
            product = variables.new_int(
                "step_times_gpus", variables.ub(steps.step) * variables.ub(count)
            )
            m.AddMultiplicationEquality(product, [steps.step, count])
            m.Add(product <= min(budget, variables.ub(product))).OnlyEnforceIf(literal)
