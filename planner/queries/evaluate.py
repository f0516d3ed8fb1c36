"""The Python API: the same operations as the CLI, on names, spec files or spec objects.

from planner import evaluate, JobSpec, Strategy
estimate = evaluate("gpt3-175b", "dgx-a100-80g", JobSpec(global_batch=1536),
                    Strategy(tp=8, pp=16, dp=8, recompute="selective"))
"""

from __future__ import annotations

import hardware_catalog
from planner.cost.context import CostContext
from planner.cost.estimate import Estimate, build_estimate
from planner.cost.knobs import Knobs
from planner.cost.step import evaluate_terms
from planner.space.rules import check_strategy, strategy_warnings
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec


def as_model(model: ModelSpec | str) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else hardware_catalog.load_model(model)


def as_system(system: SystemSpec | str) -> SystemSpec:
    return system if isinstance(system, SystemSpec) else hardware_catalog.load_system(system)


def evaluate(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    strategy: Strategy,
) -> Estimate:
    """Predict step time, memory and efficiency of one strategy. Raises InputError when the
    strategy breaks a rule (e.g. tp does not divide the heads)."""
    model_spec, system_spec = as_model(model), as_system(system)
    check_strategy(model_spec, system_spec, job, strategy)
    ctx = CostContext(model_spec, system_spec, job)
    terms = evaluate_terms(ctx, Knobs.from_strategy(strategy))
    warnings = strategy_warnings(system_spec, strategy, ctx.stack)
    return build_estimate(ctx, terms, strategy.gpus, warnings, strategy)
