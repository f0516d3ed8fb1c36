"""The CP-SAT encoding of the planning problem (DESIGN.md §5): one module per constraint family
plus the objective. ``build_plan_model`` assembles them for one problem."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.memory import MemoryNeeds, add_memory_fit
from constraints.objective import StepVariables, add_step_time
from constraints.scales import time_scale
from constraints.structure import (
    add_axonn,
    add_batch,
    add_calculon,
    add_canonical,
    add_divisibility,
    add_experts,
    add_factorization,
    add_partial_recompute,
    add_pins,
    add_placement,
    add_rank_order,
)
from constraints.tables import TableBuilder
from constraints.target import PerformanceTarget, add_target
from constraints.variables import Variables
from planner.cost.context import CostContext
from planner.cost.flops import model_flops_per_step
from planner.space.search_space import SearchSpace
from planner.specs import OFFLOAD_KINDS, offload_eighths
from planner.specs.quantities import OFFLOAD_STEPS

OFFLOAD_KNOBS = tuple(f"offload_{kind}" for kind in OFFLOAD_KINDS)
SIMPLICITY_RADIX = len(OFFLOAD_KNOBS) * OFFLOAD_STEPS + 2
"""The last tie-break digit: the eighths offloaded (of up to three classes) plus a non-default
rank order."""


@dataclass
class PlanModel:
    """A built CP-SAT model for one problem."""

    model: cp_model.CpModel
    variables: Variables
    steps: StepVariables
    needs: MemoryNeeds
    unit_s: float
    tie_break_weight: int
    """The step objective is step·weight + simplicity, simplicity < weight: among plans of equal
    step time (to the model's resolution) it prefers smaller tp, then smaller cp, then smaller
    pp, then less offloaded and the default rank order."""

    def step_s(self, step_units: float) -> float:
        return step_units * self.unit_s

    def family_literals(self, names: set[str] | None = None) -> list[cp_model.IntVar]:
        return [
            f.literal for n, f in self.variables.families.items() if names is None or n in names
        ]

    def objective(self) -> cp_model.LinearExpr:
        """The step objective: step·weight + simplicity."""
        return self.tie_break_weight * self.steps.step + self._simplicity()

    def minimize_step(self) -> None:
        self.model.Minimize(self.objective())

    def _simplicity(self) -> cp_model.LinearExpr:
        """A mixed-radix number below ``tie_break_weight``: digits (tp, cp, pp, eighths
        offloaded plus a non-default rank order)."""
        variables = self.variables
        pp_slots = SIMPLICITY_RADIX * len(variables.domains["pp"])
        cp_slots = pp_slots * len(variables.domains["cp"])
        return (
            cp_slots * variables.index("tp")
            + pp_slots * variables.index("cp")
            + SIMPLICITY_RADIX * variables.index("pp")
            + sum(
                int(offload_eighths(code)) * chosen
                for k in OFFLOAD_KNOBS
                for code, chosen in zip(variables.domains[k], variables.onehot[k], strict=True)
            )
            + variables.index("placement")
        )


SEARCH_ORDER = ("tp", "pp")
"""The knobs a guided search (planner.queries.solving) decides first, each from its largest
value down, before CP-SAT's own heuristics take over. Over the README's main job and the 43
dense scenarios of benchmarks/plan_latency.py --quick, the work each order needs to prove them
(benchmarks/search_order.py; deterministic units, up to 3), with the DP exposure an equality
(constraints.objective._exposed_once): tp then pp 6.5 in all, at most 0.34, none unproven;
pp then tp 7.0, at most 0.44; tp alone 10.4, one unproven. With the exposure bounded only from
below, pp then tp had been the better order (7.4, at most 0.53; tp then pp 9.9, one unproven);
pp alone then left 2 unproven, and a third knob (cp, micro-batch or ZeRO stage) 1–3."""


def add_search_order(variables: Variables) -> None:
    """The decision strategy of a guided search: SEARCH_ORDER's one-hot literals, the largest
    value's first, each set true in turn (CHOOSE_FIRST, SELECT_MAX_VALUE). Searches that are
    not guided ignore it."""
    literals = [literal for knob in SEARCH_ORDER for literal in reversed(variables.onehot[knob])]
    variables.model.AddDecisionStrategy(literals, cp_model.CHOOSE_FIRST, cp_model.SELECT_MAX_VALUE)


def build_plan_model(
    ctx: CostContext,
    space: SearchSpace,
    assumptions: bool = False,
    dropped: frozenset[str] = frozenset(),
    target: PerformanceTarget | None = None,
    exact_exposure: bool = True,
    scale: int | None = None,
) -> PlanModel:
    """The CP-SAT model of one problem, minimising the step time. Every constraint family hangs
    on a literal. With ``assumptions`` the literals are solver assumptions (for infeasibility
    cores; CP-SAT computes them on one worker); otherwise each is fixed true, except the
    families named in ``dropped``, which are left free (off) — a minimum-hardware query drops
    the family whose quantity it minimises. ``target`` adds the performance-target family.
    ``exact_exposure`` (constraints.objective._exposed_once): the DP exposure an equality, which
    the step's minimisation searches faster, or only bounded from below, which a query
    minimising something else searches faster. ``scale``: the time unit's refinement
    (tables.time_scale of the space's most micro-batches by default; where its larger numbers
    would make the model invalid, the plain unit)."""
    if scale is None:
        finer = time_scale(ctx.job.global_batch)  # n ≤ the global batch
        if finer > 1:
            built = build_plan_model(
                ctx, space, assumptions, dropped, target, exact_exposure, scale=finer
            )
            if not built.model.Validate():
                return built
        scale = 1
    model = cp_model.CpModel()
    relaxable = None if assumptions else dropped
    variables = Variables.create(model, space, ctx.job.global_batch, relaxable)
    add_factorization(variables)
    add_batch(variables, ctx.job)
    add_divisibility(variables, ctx.model, ctx.seq_len)
    add_placement(variables, ctx.system)
    if ctx.calculon:
        add_calculon(variables, ctx.model, ctx.seq_len)
    add_experts(variables, ctx.model)
    add_axonn(variables, ctx.model, ctx.stack.tp_form == "axonn")
    add_partial_recompute(variables)
    add_rank_order(variables)
    add_pins(variables)
    add_canonical(variables, ctx.model)
    capacities = [tier.capacity_gib for tier in ctx.system.memory_tiers]
    memory_families = {"hbm"} | {f"offload{k}" for k in range(1, len(capacities))}
    fixed_memory = all(variables.always_on(name) for name in memory_families)
    tables = TableBuilder(
        ctx,
        variables,
        memory_cap_bytes=max(capacities) * (1 << 30),
        memory_fixed=fixed_memory,
        scale=scale,
    )
    needs = add_memory_fit(variables, tables)
    steps = add_step_time(variables, tables, exact_exposure)
    variables.add_tables()
    if target is not None and (target.max_step_s is not None or target.min_mfu is not None):
        add_target(
            variables, steps, target, tables.unit_s, model_flops_per_step(ctx), ctx.peak_flops
        )
    weight = SIMPLICITY_RADIX * math.prod(len(variables.domains[k]) for k in ("pp", "cp", "tp"))
    built = PlanModel(
        model=model,
        variables=variables,
        steps=steps,
        needs=needs,
        unit_s=tables.unit_s,
        tie_break_weight=weight,
    )
    built.minimize_step()
    add_search_order(variables)
    if assumptions:
        model.AddAssumptions(built.family_literals())
    else:
        for name, family in variables.families.items():
            if name not in dropped:
                model.Add(family.literal == 1)
    return built
