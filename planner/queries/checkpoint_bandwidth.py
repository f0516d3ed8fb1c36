"""The least checkpoint bandwidth (min-hardware's ``checkpoint-bandwidth``): the least aggregate
write bandwidth of the file system at which the plan on ``--gpus`` GPUs keeps its goodput at
``--min-goodput`` (planner/cost/goodput_bounds.py).

The strategy is plan's (the fastest that meets the query's other goals at that count); the
bandwidth is then one number of the goodput model, which is monotone in it (a faster file
system shortens the write, hence the sync stall or the async drain, and nothing else), so a
bisection on log W finds the least one to 0.1 %. Minimal over every strategy when it agrees,
within that tolerance, with the least W at which the goodput's strategy-free upper bound
g⁺(N; W) reaches the target (no strategy can do with less); otherwise the answer is the least
for plan's strategy and is not called proven.
"""

from __future__ import annotations

from planner.cost.goodput import estimate_goodput
from planner.cost.goodput_bounds import (
    BANDWIDTH_TOLERANCE,
    least_write_bandwidth,
    least_write_bandwidth_bound,
    with_aggregate_write,
)
from planner.errors import InputError
from planner.queries.hardware_query import HardwareQuery, Minimum, Unreachable


class LeastCheckpointBandwidth(HardwareQuery):
    """The least aggregate checkpoint write bandwidth for a goodput target."""

    def domain(self) -> str:
        return "aggregate checkpoint write bandwidths from 0.001 GB/s up (bisection to 0.1 %)"

    def run(self) -> tuple:
        if self.min_goodput is None:
            raise InputError("--minimize checkpoint-bandwidth needs --min-goodput (e.g. 0.9)")
        result = self.plan_at()
        if result.strategy is None or result.estimate is None:
            if result.status == "infeasible":
                return ("infeasible", None, result.diagnosis)
            return ("unknown", None, result.diagnosis)
        strategy, estimate = result.strategy, result.estimate
        profile = self.ctx.reliability
        gbps, goodput = least_write_bandwidth(
            self.ctx, strategy, estimate.step_time_s, self.min_goodput, profile
        )
        if gbps is None:
            self.unreachable = Unreachable(
                goal=self.goal(),
                at=f"an unbounded file system ({goodput.goodput:.1%} goodput: the node links, "
                "the restarts and the failure rate alone waste more)",
                best_step_time_s=estimate.step_time_s,
                best_mfu=estimate.mfu,
                strategy=strategy,
            )
            return ("infeasible", None, None)
        below_value = gbps / (1 + BANDWIDTH_TOLERANCE)
        below = estimate_goodput(
            self.ctx, strategy, estimate.step_time_s, with_aggregate_write(profile, below_value)
        )
        bound = least_write_bandwidth_bound(self.ctx, strategy.gpus, self.min_goodput, profile)
        proven = bound is not None and gbps <= bound * (1 + BANDWIDTH_TOLERANCE) ** 2
        training = estimate.training
        if training is not None and goodput.gpu_hours is not None:
            price = self.system.gpu_hour_usd
            training = training.model_copy(
                update={
                    "goodput": goodput.goodput,
                    "effective_days": goodput.effective_days,
                    "effective_gpu_hours": goodput.gpu_hours,
                    "effective_cost_usd": goodput.gpu_hours * price if price else None,
                }
            )
        minimum = Minimum(
            quantity=self.quantity,
            value=gbps,
            unit="GB/s",
            proven=proven,
            strategy=strategy,
            estimate=estimate.model_copy(update={"goodput": goodput, "training": training}),
            below_value=below_value,
            below_status=f"goodput {below.goodput:.3%} < {self.min_goodput:.3%}",
            below_diagnosis=None,
            evidence=(
                f"goodput {goodput.goodput:.3%} at {gbps:,.4g} GB/s, {below.goodput:.3%} at "
                f"{below_value:,.4g} GB/s (plan's strategy on {strategy.gpus:,} GPUs); no "
                "strategy there needs less than "
                + (f"{bound:,.4g} GB/s (the goodput's upper bound)" if bound else "(none)")
            ),
        )
        return ("optimal" if proven else "feasible", minimum, None)
