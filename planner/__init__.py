"""planner: provably optimal execution plans and minimum hardware for LLM training."""

from planner.api import evaluate
from planner.errors import InputError
from planner.estimate import Estimate
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

__all__ = ["Estimate", "InputError", "JobSpec", "ModelSpec", "Strategy", "SystemSpec", "evaluate"]
__version__ = "0.1.0"
