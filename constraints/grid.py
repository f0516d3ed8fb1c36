"""The grids cost terms are tabulated over (Grid: every combination of the few knobs a term depends
on, as element indices for CP-SAT) and the bundles of table variables the TableBuilder returns
(per-block costs with their per-step multiples, a stage's DP communication)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from constraints.variables import Variables
from planner.cost.compute import block_times
from planner.cost.context import CostContext


@dataclass(frozen=True)
class DpCommVariables:
    """A stage's DP communication tables, one per field of step.DpCommTimes (same names)."""

    after_backward_s: cp_model.IntVar
    before_forward_s: cp_model.IntVar
    per_micro_batch_s: cp_model.IntVar
    latency_per_step_s: cp_model.IntVar
    latency_per_micro_batch_s: cp_model.IntVar


@dataclass(frozen=True)
class Grid:
    """Knob values broadcast over the product of the named knobs' domains."""

    knobs: tuple[str, ...]
    arrays: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def make_grid(variables: Variables, knobs: tuple[str, ...], reserve: bool = True) -> Grid:
    """The knobs' values over the product of their domains; a ``layout`` axis also gives the
    layout's ``pp`` and its ``first``, ``middle`` and ``last`` stage blocks. ``reserve``: count
    the grid against the model's table entries (Variables.reserve_entries)."""
    if reserve:
        variables.reserve_entries(knobs)
    axes = np.meshgrid(*(np.asarray(variables.domains[k]) for k in knobs), indexing="ij")
    arrays = dict(zip(knobs, axes, strict=True))
    if "layout" in arrays:
        layouts = variables.space.layouts
        index = arrays["layout"]
        arrays["pp"] = np.array([x.pp for x in layouts])[index]
        arrays["first"] = np.array([x.first for x in layouts], dtype=float)[index]
        arrays["middle"] = np.array([x.blocks for x in layouts], dtype=float)[index]
        arrays["last"] = np.array([x.last for x in layouts], dtype=float)[index]
    return Grid(knobs=knobs, arrays=arrays)


AXONN_KNOBS = ("tp_column", "tp_depth")
"""AxoNN's grid knobs (X, Z; a single value, 1, unless the stack runs AxoNN's TP): tables
over them drop the axis where it does not vary (Variables.table)."""

BLOCK_TIME_KNOBS = ("tp", "cp", "micro_batch", "recompute", "sequence_parallel", *AXONN_KNOBS, "ep")
"""The knobs compute.block_times depends on (ep last)."""


def grid_block_times(ctx: CostContext, g: Grid):
    """compute.block_times over a grid holding BLOCK_TIME_KNOBS."""
    return block_times(
        ctx,
        g["tp"],
        g["micro_batch"],
        g["recompute"],
        g["sequence_parallel"],
        g["cp"],
        g["ep"],
        g["tp_column"],
        g["tp_depth"],
    )


@dataclass(frozen=True)
class PerBlock:
    """A per-block per-micro-batch cost X and its per-step multiple n·X = pp^pp_power × the
    ``per_step`` table variable."""

    once: cp_model.IntVar
    per_step: cp_model.IntVar
    pp_power: int
