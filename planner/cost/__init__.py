"""The analytical cost model (DESIGN.md §4): step time and memory of a strategy.

Every function is vectorised: knobs are numpy arrays (or scalars) that broadcast together, so
the same code evaluates one strategy, tabulates a cost term over a grid of the few knobs it
depends on (for the CP-SAT model), or evaluates thousands of whole strategies (the brute-force
oracle). Each term's docstring names the knobs it depends on.
"""

from planner.cost.knobs import Knobs
from planner.cost.step import StepTerms, evaluate_terms

__all__ = ["Knobs", "StepTerms", "evaluate_terms"]
