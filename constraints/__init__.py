"""The CP-SAT encoding of the planning problem (DESIGN.md §5): one module per constraint family
plus the objective. ``build_plan_model`` assembles them for one problem."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.memory import add_memory_fit
from constraints.objective import StepVariables, add_step_time
from constraints.structure import (
    add_batch,
    add_canonical,
    add_divisibility,
    add_factorization,
    add_pins,
    add_placement,
)
from constraints.tables import TableBuilder
from constraints.variables import Variables
from planner.cost.context import CostContext
from planner.search_space import SearchSpace

OFFLOAD_KNOBS = ("offload_weights", "offload_activations", "offload_optimizer")


@dataclass
class PlanModel:
    """A built CP-SAT model for one problem."""

    model: cp_model.CpModel
    variables: Variables
    steps: StepVariables
    unit_s: float
    tie_break_weight: int
    """The objective is step·weight + simplicity, simplicity < weight: among plans of equal step
    time (to the model's resolution) it prefers smaller tp, then smaller pp, then fewer
    offloads."""

    def step_s(self, step_units: float) -> float:
        return step_units * self.unit_s


def build_plan_model(ctx: CostContext, space: SearchSpace, assumptions: bool = False) -> PlanModel:
    """The CP-SAT model of one problem. Every constraint family hangs on a literal; with
    ``assumptions`` the literals are solver assumptions (for infeasibility cores, which CP-SAT
    computes on one worker), otherwise they are fixed true (and the full parallel portfolio
    and presolve apply)."""
    model = cp_model.CpModel()
    variables = Variables.create(model, space, ctx.job.global_batch)
    add_factorization(variables)
    add_batch(variables, ctx.job)
    add_divisibility(variables, ctx.model)
    add_placement(variables, ctx.system)
    add_pins(variables)
    add_canonical(variables)
    capacities = [tier.capacity_gib for tier in ctx.system.memory_tiers]
    tables = TableBuilder(ctx, variables, memory_cap_bytes=max(capacities) * (1 << 30))
    add_memory_fit(variables, tables)
    steps = add_step_time(variables, tables)
    pp_slots = 4 * len(variables.domains["pp"])
    simplicity = (
        pp_slots * variables.index("tp")
        + 4 * variables.index("pp")
        + sum(1 - variables.onehot[k][0] for k in OFFLOAD_KNOBS)
    )
    weight = pp_slots * len(variables.domains["tp"])
    model.Minimize(weight * steps.step + simplicity)
    literals = [family.literal for family in variables.families.values()]
    if assumptions:
        model.AddAssumptions(literals)
    else:
        for literal in literals:
            model.Add(literal == 1)
    return PlanModel(
        model=model,
        variables=variables,
        steps=steps,
        unit_s=tables.unit_s,
        tie_break_weight=weight,
    )
