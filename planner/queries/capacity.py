"""The least memory capacity per GPU that meets a goal (``LeastCapacity``: min-hardware's
``hbm`` and ``offload-capacity``): the memory a strategy needs, a variable bounded by the fit
family, which the query drops and minimises instead, then settled by plan on a 0.1 GiB (HBM) /
1 GiB (offload) grid.
"""

from __future__ import annotations

import math

from ortools.sat.python import cp_model

from constraints import build_plan_model
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.queries.hardware_query import HardwareQuery
from planner.queries.plan import Plan
from planner.queries.solving import SOLVED, solve_within
from planner.space.search_space import build_search_space
from planner.specs import SystemSpec
from planner.specs import limits as lim
from planner.specs.hardware import with_tier_capacity

HBM_STEP_GIB = 0.1
OFFLOAD_STEP_GIB = 1.0


class LeastCapacity(HardwareQuery):
    """The least HBM or offload capacity per GPU at the query's GPU count."""

    def domain(self) -> str:
        step = HBM_STEP_GIB if self.quantity == "hbm" else OFFLOAD_STEP_GIB
        return f"capacities in steps of {step:g} GiB, up to 64 TiB per GPU"

    def run(self) -> tuple:
        family, step = (
            ("hbm", HBM_STEP_GIB) if self.quantity == "hbm" else ("offload1", OFFLOAD_STEP_GIB)
        )
        system = self.system
        if family == "offload1":  # room to find the least, however large
            system = with_tier_capacity(system, 1, 64 * 1024.0)
        ctx = CostContext(self.model, system, self.job)
        space = build_search_space(
            self.model, system, self.job, self.gpus, self.pins, **self.limits
        )
        built = build_plan_model(
            ctx, space, dropped=frozenset({family}), target=self.target, exact_exposure=False
        )
        need = built.needs.hbm if family == "hbm" else built.needs.offload[0]
        built.model.Minimize(need)
        solved = solve_within(built, self.budget, lp_fallback=False)
        solver, status = solved.solver, solved.status
        if status not in SOLVED:
            if status == cp_model.INFEASIBLE:  # diagnosed with the tier at the domain's top
                tier, what = (0, "HBM") if family == "hbm" else (1, "offload capacity")
                return self.infeasible(
                    f"{lim.MAX_CAPACITY_GIB:g} GiB of {what} per GPU",
                    system=with_tier_capacity(system, tier, lim.MAX_CAPACITY_GIB),
                )
            return ("unknown", None, None)
        gib = solver.Value(need) * built.needs.unit_bytes / BYTES_PER_GIB
        if family == "hbm":
            gib /= self.ctx.hbm_usable_fraction
        tier = 0 if family == "hbm" else 1
        steps, result, below = self.settle_capacity(
            system, tier, step, math.ceil(gib / step - 1e-9)
        )
        proven = below.status == "infeasible" if below else status == cp_model.OPTIMAL
        return self.answer(
            _on_grid(steps, step),
            proven,
            result,
            _on_grid(steps - 1, step) if below else None,
            below,
        )

    def settle_capacity(
        self, system: SystemSpec, tier: int, step: float, steps: int
    ) -> tuple[int, Plan, Plan | None]:
        """(grid steps, the plan there, the plan one step below) of the least capacity plan
        itself fits at; no plan below the grid's lowest value (0.1 GiB of HBM, 0 GiB of offload).
        The query's need is an upper bound of plan's, not always equal: a need of up to 64 TiB
        takes a coarser memory unit than plan's at the answer (entries round up to 64 KiB
        instead of 1 KiB for 1,000 layers on 1,000 GPUs), so plan can fit one step below it.
        Then the answer steps down, until plan does not fit below."""
        lowest = 1 if tier == 0 else 0
        result = self.plan_at(system=with_tier_capacity(system, tier, _on_grid(steps, step)))
        while steps > lowest:
            below_system = with_tier_capacity(system, tier, _on_grid(steps - 1, step))
            below = self.plan_at(system=below_system, diagnose="conflict")
            if below.strategy is None:
                return steps, result, below
            steps, result = steps - 1, below
        return steps, result, None


def _on_grid(steps: int, step: float) -> float:
    """``steps`` grid steps of ``step`` GiB, without binary-fraction noise (0.30000000000000004)."""
    return round(steps * step, 6)
