"""What the oracle tests allow for the solver's memory rounding. The solver's tables hold memory
in units rounded up (constraints/tables.py; constraints.scales.memory_unit_bytes: 1 KiB on every
test problem), so it never accepts a plan the evaluation says overflows, and it may reject one
that fits by less than its rounding. A test therefore bounds the proven optimum between the raw
oracle's optimum over every plan that fits (the solver cannot beat it) and the oracle's optimum
over the plans that fit with ``rounding_margin_bytes`` to spare (the solver cannot miss them)."""

from __future__ import annotations

from planner.cost.context import CostContext
from planner.space.oracle import enumerate_strategies
from planner.space.search_space import SearchSpace

KIB = 1024.0


def rounding_margin_bytes(ctx: CostContext, space: SearchSpace) -> float:
    """An upper bound on the rounding one memory inequality of constraints/memory.py carries:
    one unit per table entry, an entry counted as often as the inequality multiplies it (the
    micro-batches in flight, at most pp; a stage's blocks, at most the layers, for its stored
    and saved activations) plus the state, rebuilt, partial, logits and working entries."""
    max_pp = max(space.domains["pp"])
    return KIB * (2 * ctx.model.layers + max_pp + 16)


def assert_proves_oracle_optimum(result, ctx: CostContext, space: SearchSpace, rel: float) -> None:
    """The solver's status and step time against the raw oracle, allowing for its rounding."""
    exact = enumerate_strategies(ctx, space)
    strict = enumerate_strategies(ctx, space, margin_bytes=rounding_margin_bytes(ctx, space))
    if not exact:
        assert result.status == "infeasible"
        return
    if result.status == "infeasible":  # only plans within the rounding of a capacity fit
        assert not strict, (exact[0].strategy, strict[0].strategy)
        return
    assert result.status == "optimal", result.solver
    assert result.estimate is not None and result.estimate.fits
    step = result.estimate.step_time_s
    assert step >= exact[0].step_time_s * (1 - rel), (result.strategy, exact[0].strategy)
    if strict:
        assert step <= strict[0].step_time_s * (1 + rel), (result.strategy, strict[0].strategy)
