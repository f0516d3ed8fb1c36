"""planner: provably optimal execution plans and minimum hardware for LLM training.

The names below load on first use (PEP 562), so that ``import planner.<module>`` (the CLI's
``planner catalog``, say) does not pay for the cost model it does not need."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.cost.estimate import Estimate
    from planner.errors import InputError
    from planner.queries.evaluate import evaluate
    from planner.queries.min_hardware import min_hardware
    from planner.queries.plan import plan
    from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

_EXPORTS = {
    "Estimate": "planner.cost.estimate",
    "InputError": "planner.errors",
    "JobSpec": "planner.specs",
    "ModelSpec": "planner.specs",
    "Strategy": "planner.specs",
    "SystemSpec": "planner.specs",
    "evaluate": "planner.queries.evaluate",
    "min_hardware": "planner.queries.min_hardware",
    "plan": "planner.queries.plan",
}
__all__ = [
    "Estimate",
    "InputError",
    "JobSpec",
    "ModelSpec",
    "Strategy",
    "SystemSpec",
    "evaluate",
    "min_hardware",
    "plan",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
