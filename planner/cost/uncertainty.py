"""How sure a prediction is: a step-time range around the cost model's figure.

The range has three parts, each from a measurement or a stated margin:

- **The stack's own error**: ±STACK_ERROR, the leave-one-source-out mean error over the 143
  calibration runs (README, 'Accuracy and calibration'), for a stack whose constants were fitted
  on its own runs (StackProfile.calibrated_gpus); twice that for a stack that borrows them.
- **Cross-domain messages**: the estimate again with every message that leaves a scale-up
  domain ROBUST_NETWORK_SCALE times slower, and again that much faster (CostContext
  .network_scale: scale-out bandwidths divided, latencies multiplied): the collective model's
  mean error on 1-64 MiB messages against published nccl-tests curves (planner/cost/context.py).
  Latency-bound traffic across nodes (TP beyond a node, pipeline sends, small buckets) widens
  the range most; a job inside one node has none of it.
- **Extrapolation**: beyond the largest GPU count the stack was calibrated at, the upper end
  grows by EXTRAPOLATION_PER_DOUBLING per doubling — a stated margin, not a measured error: the
  hidden sweep of issue 48 found the model's error growing with scale where nothing was
  calibrated.

    low  = step(network / s) · (1 − e)
    high = step(network · s) · (1 + e) · (1 + x · max(0, log2(N / N_cal)))

`plan --robust` (JobSpec.robust) minimises the step with the network at s, the upper end's
network part, so that it picks what is fastest when the network is as slow as measured.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from planner.cost.context import ROBUST_NETWORK_SCALE, CostContext
from planner.cost.knobs import Knobs
from planner.cost.step import evaluate_terms

STACK_ERROR = 0.06
"""The cross-validated mean step-time error over the 143 runs of the three calibration files
(`planner validate --cross-validate` on their union: 5.97 % before issue 48, README)."""

EXTRAPOLATION_PER_DOUBLING = 0.05
"""The upper end's margin per doubling of the GPU count beyond the stack's calibration: stated,
not fitted."""


class StepRange(BaseModel):
    """A step-time range: where the prediction can be, and why."""

    model_config = ConfigDict(frozen=True)

    low_s: float
    high_s: float
    nominal_s: float
    """The step with the network at the model's own figures (network_scale 1)."""
    network_share: float
    """(step at the slow network − nominal) / nominal: how much cross-domain messages weigh."""
    reasons: list[str]


def step_range(ctx: CostContext, knobs: Knobs, gpus: int, step_s: float) -> StepRange:
    """The range of the module docstring for one strategy (``knobs``) on ``gpus`` GPUs, whose
    step under ``ctx`` (its own network_scale) is ``step_s``: that step is not evaluated
    again."""

    def step_at(scale: float) -> float:
        if scale == ctx.network_scale:
            return step_s
        return float(evaluate_terms(replace(ctx, network_scale=scale), knobs).step_time_s)

    nominal = step_at(1.0)
    slow = step_at(ROBUST_NETWORK_SCALE)
    fast = step_at(1 / ROBUST_NETWORK_SCALE)
    calibrated = ctx.stack.calibrated_gpus
    error = STACK_ERROR if calibrated else 2 * STACK_ERROR
    reasons = [
        f"±{error:.0%}: the stack's cross-validated error"
        + ("" if calibrated else " (doubled: its constants are borrowed, not fitted to its runs)")
    ]
    share = slow / nominal - 1
    if share > 0.005:
        reasons.append(
            f"+{share:.0%} / −{1 - fast / nominal:.0%}: messages across scale-up domains "
            f"{ROBUST_NETWORK_SCALE:g}× slower or faster (the collective model's measured error)"
        )
    extrapolation = 0.0
    if calibrated and gpus > calibrated:
        extrapolation = EXTRAPOLATION_PER_DOUBLING * math.log2(gpus / calibrated)
        reasons.append(
            f"+{extrapolation:.0%}: {gpus:,} GPUs, beyond the {calibrated:,} the stack was "
            "calibrated at (a stated margin per doubling)"
        )
    return StepRange(
        low_s=fast * (1 - error),
        high_s=slow * (1 + error) * (1 + extrapolation),
        nominal_s=nominal,
        network_share=share,
        reasons=reasons,
    )
