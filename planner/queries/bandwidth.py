"""The least bandwidth that meets a goal (``LeastBandwidth``: min-hardware's
``offload-bandwidth`` and ``scale-out-bandwidth``): a one-hot over a geometric grid of
bandwidths (``bandwidth_grid``; the offload, DP/PP and optimizer tables get one more axis,
``with_bandwidth_levels``), minimised by grid index, then settled by plan on the grid.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from ortools.sat.python import cp_model

from constraints import build_plan_model
from planner.errors import InputError
from planner.queries.hardware_query import HardwareQuery
from planner.queries.plan import Plan
from planner.queries.solving import SOLVED, solve_within
from planner.space.search_space import SearchSpace, build_search_space
from planner.specs import limits as lim
from planner.specs.hardware import with_quantity

BANDWIDTH_STEPS_PER_DOUBLING = 8
"""Bandwidth grids are geometric, 8 steps per doubling (9 % apart)."""


def bandwidth_grid(low_gbps: float, high_gbps: float) -> tuple[float, ...]:
    """Geometric grid from ``low`` to at least ``high``, BANDWIDTH_STEPS_PER_DOUBLING per 2×."""
    steps = math.ceil(math.log2(high_gbps / low_gbps) * BANDWIDTH_STEPS_PER_DOUBLING)
    return tuple(
        float(f"{low_gbps * 2 ** (i / BANDWIDTH_STEPS_PER_DOUBLING):.4g}") for i in range(steps + 1)
    )


def check_bandwidth_range(low_gbps: float, high_gbps: float) -> None:
    """Refuse a bandwidth grid's range unless limits.MIN_BANDWIDTH_GBPS ≤ LOW < HIGH ≤
    min(limits.MAX_BANDWIDTH_GBPS, LOW · limits.MAX_BANDWIDTH_SPAN), in one line."""
    high_allowed = min(lim.MAX_BANDWIDTH_GBPS, low_gbps * lim.MAX_BANDWIDTH_SPAN)
    if not (lim.MIN_BANDWIDTH_GBPS <= low_gbps < high_gbps <= high_allowed):
        raise InputError(
            f"--bandwidth-range = {low_gbps:g} {high_gbps:g}: allowed {lim.MIN_BANDWIDTH_GBPS:g} "
            f"≤ LOW < HIGH ≤ min({lim.MAX_BANDWIDTH_GBPS:g}, {lim.MAX_BANDWIDTH_SPAN:g} × LOW) GB/s"
        )


def with_bandwidth_levels(
    space: SearchSpace, knob: str, grid_gbps: tuple[float, ...]
) -> SearchSpace:
    """The space with bandwidth ``knob`` (offload_bw or scale_out_bw) a decision over the
    levels of ``grid_gbps``, its values the levels' positions."""
    domains = {**space.domains, knob: tuple(range(len(grid_gbps)))}
    return replace(space, domains=domains, hardware={knob: grid_gbps})


class LeastBandwidth(HardwareQuery):
    """The least offload or scale-out bandwidth at the query's GPU count."""

    def domain(self) -> str:
        return "a geometric bandwidth grid, 8 steps per doubling"

    def run(self) -> tuple:
        knob = "offload_bw" if self.quantity == "offload-bandwidth" else "scale_out_bw"
        current = (
            self.system.memory_tiers[1].bandwidth_gbps
            if knob == "offload_bw"
            else self.system.network_tiers[-1].bandwidth_gbps
        )
        low, high = self.bandwidth_range or (current / 64, current * 16)
        grid = bandwidth_grid(low, high)
        space = build_search_space(
            self.model, self.system, self.job, self.gpus, self.pins, **self.limits
        )
        built = build_plan_model(
            self.ctx,
            with_bandwidth_levels(space, knob, grid),
            target=self.target,
            exact_exposure=False,
        )
        built.model.Minimize(built.variables.index(knob))
        solved = solve_within(built, self.budget, lp_fallback=False)
        solver, status = solved.solver, solved.status
        if status not in SOLVED:
            top = with_quantity(self.system, self.quantity, grid[-1])
            if status == cp_model.INFEASIBLE:
                what = "offload" if knob == "offload_bw" else "scale-out"
                return self.infeasible(f"{grid[-1]:g} GB/s of {what} bandwidth", system=top)
            return ("unknown", None, None)
        level = int(np.argmax([solver.Value(b) for b in built.variables.onehot[knob]]))
        level, result, below = self.settle_bandwidth(grid, level)
        proven = below.status == "infeasible" if below else status == cp_model.OPTIMAL
        return self.answer(grid[level], proven, result, grid[level - 1] if level else None, below)

    def settle_bandwidth(
        self, grid: tuple[float, ...], level: int
    ) -> tuple[int, Plan, Plan | None]:
        """(grid level, the plan there, the plan one level below) of the least level plan
        itself meets the goal at, from the query's ``level`` down; no plan below level 0.
        More bandwidth never slows a strategy (every transfer is bytes / bandwidth), so plan
        proving the goal infeasible one level below proves it for every lower level."""
        result = self.plan_at(system=with_quantity(self.system, self.quantity, grid[level]))
        while level > 0:
            lower = with_quantity(self.system, self.quantity, grid[level - 1])
            below = self.plan_at(system=lower, diagnose="conflict")
            if below.strategy is None:
                return level, result, below
            level, result = level - 1, below
        return level, result, None
