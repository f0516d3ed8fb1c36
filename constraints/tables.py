"""Cost-term tables: the cost model evaluated over the grid of the few knobs each term depends
on, in the same functions ``planner.cost`` uses to evaluate one strategy.

Times are integers in units of ``unit_s`` (rounded to nearest); memory in KiB (rounded up, so
the solver never accepts a plan the evaluation says overflows). Values are clipped at a ceiling
that keeps every product in the model inside 64 bits; a clipped entry is one no optimal or
feasible plan can use (DESIGN.md §5: resolution chosen per problem).

A step runs n = B/(d·b) micro-batches. For a fixed GPU count N, n = p·φ with φ = B·t/(N·b), so a
per-step term n·X is p × (a table of φ·X over X's own knobs); for a free GPU count the table of
n·X takes dp as one more knob. Either way no product of variables is needed, and the terms that
depend on dp (DP communication, model state, the optimizer) are tabulated over (tp, pp) with
dp = N/(tp·pp), or over (tp, pp, dp).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from constraints.variables import Variables
from planner.cost.compute import block_times, lm_head_time_s
from planner.cost.context import CostContext
from planner.cost.flops import model_flops_per_step
from planner.cost.memory import (
    block_activation_bytes,
    logits_bytes,
    model_state,
    rebuilt_activation_bytes,
)
from planner.cost.step import block_pieces, dp_comm_times_s, optimizer_time_s, pp_message_s

KIB = 1024.0
MEMORY_CEILING_BYTES = 2.0 * (1 << 40)
"""Memory table entries are clipped just above the largest capacity when every fit family is
on, else at 2 TiB per GPU (or twice the largest tier, if larger): a clipped entry never fits."""
UNITS_PER_IDEAL_STEP = 1e6
"""Time resolution: the ideal step (model FLOPs at peak on the largest GPU count considered) is
10^6 units, so the objective's rounding error stays orders of magnitude below the 0.1 % the
planner promises."""
TIME_CEILING_IDEAL_STEPS = 1e5
"""Time table entries are clipped at 10^5 ideal steps (an MFU below 10^-5: never a plan)."""


@dataclass(frozen=True)
class Grid:
    """Knob values broadcast over the product of the named knobs' domains."""

    knobs: tuple[str, ...]
    arrays: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def make_grid(variables: Variables, knobs: tuple[str, ...]) -> Grid:
    axes = np.meshgrid(*(np.asarray(variables.domains[k]) for k in knobs), indexing="ij")
    return Grid(knobs=knobs, arrays=dict(zip(knobs, axes, strict=True)))


@dataclass(frozen=True)
class PerBlock:
    """A per-block per-micro-batch cost X and its per-step multiple n·X = pp^pp_power × the
    ``per_step`` table variable."""

    once: cp_model.IntVar
    per_step: cp_model.IntVar
    pp_power: int


class TableBuilder:
    """Builds the integer table variables of one problem."""

    def __init__(
        self,
        ctx: CostContext,
        variables: Variables,
        memory_cap_bytes: float,
        memory_fixed: bool = True,
    ) -> None:
        self.ctx = ctx
        self.variables = variables
        largest = (
            max(variables.domains["dp"])
            * max(variables.domains["tp"])
            * max(variables.domains["pp"])
        )
        gpus = variables.space.gpus or min(largest, variables.space.max_gpus)
        ideal_step_s = model_flops_per_step(ctx) / (gpus * ctx.peak_flops)
        self.unit_s = ideal_step_s / UNITS_PER_IDEAL_STEP
        self.time_ceiling = int(UNITS_PER_IDEAL_STEP * TIME_CEILING_IDEAL_STEPS)
        floor = 0.0 if memory_fixed else MEMORY_CEILING_BYTES
        self.memory_ceiling = int(np.ceil(max(memory_cap_bytes, floor) / KIB)) + 1

    # -- conversion -------------------------------------------------------------------------
    def time(self, name: str, grid: Grid, seconds: np.ndarray) -> cp_model.IntVar:
        shape = grid[grid.knobs[0]].shape
        units = np.rint(np.clip(np.broadcast_to(seconds, shape), 0, None) / self.unit_s)
        return self.variables.table(name, grid.knobs, np.minimum(units, self.time_ceiling))

    def memory(self, name: str, grid: Grid, nbytes: np.ndarray) -> cp_model.IntVar:
        shape = grid[grid.knobs[0]].shape
        kib = np.ceil(np.clip(np.broadcast_to(nbytes, shape), 0, None) / KIB)
        return self.variables.table(name, grid.knobs, np.minimum(kib, self.memory_ceiling))

    @property
    def free_gpus(self) -> bool:
        return self.variables.space.gpus is None

    @property
    def dp_axes(self) -> tuple[str, ...]:
        """The knobs dp-dependent tables add: dp itself when the GPU count is free."""
        return ("dp",) if self.free_gpus else ()

    def data_parallel(self, grid: Grid) -> np.ndarray:
        if self.free_gpus:
            return grid["dp"]
        return self.variables.space.gpus / (grid["tp"] * grid["pp"])

    def step_scale(self, grid: Grid) -> np.ndarray:
        """n/p^power: φ = B·t/(N·b) for a fixed GPU count, n = B/(d·b) for a free one."""
        job = self.ctx.job
        if self.free_gpus:
            return job.global_batch / (grid["dp"] * grid["micro_batch"])
        return job.global_batch * grid["tp"] / (self.variables.space.gpus * grid["micro_batch"])

    def per_block(self, name: str, knobs: tuple[str, ...], cost) -> PerBlock:
        """``cost(grid)`` in seconds tabulated over ``knobs``, and its per-step multiple."""
        grid = make_grid(self.variables, knobs)
        scaled = make_grid(self.variables, (*knobs, *self.dp_axes))
        return PerBlock(
            once=self.time(name, grid, cost(grid)),
            per_step=self.time(f"{name}_per_step", scaled, self.step_scale(scaled) * cost(scaled)),
            pp_power=0 if self.free_gpus else 1,
        )

    # -- the tables -------------------------------------------------------------------------
    def block_compute(self) -> tuple[PerBlock, PerBlock]:
        """(forward + backward + recompute, forward) per block per micro-batch."""
        ctx = self.ctx
        knobs = ("tp", "micro_batch", "recompute", "sequence_parallel")

        def times(g: Grid):
            return block_times(
                ctx, g["tp"], g["micro_batch"], g["recompute"], g["sequence_parallel"]
            )

        def compute(g: Grid) -> np.ndarray:
            t = times(g)
            return t.forward_s + t.backward_s + t.recompute_s

        return (
            self.per_block("compute", knobs, compute),
            self.per_block("forward", knobs, lambda g: times(g).forward_s),
        )

    def tp_exposed(self) -> PerBlock:
        ctx = self.ctx
        return self.per_block(
            "tp_exposed",
            ("tp", "micro_batch", "recompute", "tp_overlap"),
            lambda g: (
                block_pieces(
                    ctx, g["tp"], g["micro_batch"], g["recompute"], 0, g["tp_overlap"], 0, 0
                ).tp_exposed_s
            ),
        )

    def offload_exposed(self) -> tuple[PerBlock, PerBlock]:
        """(forward, backward) exposed offload traffic per block per micro-batch."""
        ctx = self.ctx
        knobs = (
            "tp",
            "micro_batch",
            "recompute",
            "sequence_parallel",
            "offload_weights",
            "offload_activations",
        )

        def pieces(g: Grid):
            return block_pieces(
                ctx,
                g["tp"],
                g["micro_batch"],
                g["recompute"],
                g["sequence_parallel"],
                0,
                g["offload_weights"],
                g["offload_activations"],
            )

        return (
            self.per_block("offload_forward", knobs, lambda g: pieces(g).offload_forward_s),
            self.per_block("offload_backward", knobs, lambda g: pieces(g).offload_backward_s),
        )

    def head(self) -> PerBlock:
        ctx = self.ctx
        return self.per_block(
            "head", ("tp", "micro_batch"), lambda g: lm_head_time_s(ctx, g["tp"], g["micro_batch"])
        )

    def pp_message(self) -> PerBlock:
        """One stage-to-stage message per micro-batch; its tier follows the job's span t·p·d
        (the fixed GPU count, or a table over pp and dp when it is free)."""
        ctx = self.ctx
        if not self.free_gpus:
            gpus = self.variables.space.gpus
            return self.per_block(
                "pp_message",
                ("tp", "micro_batch"),
                lambda g: pp_message_s(ctx, g["tp"], g["micro_batch"], gpus),
            )
        grid = make_grid(self.variables, ("tp", "micro_batch", "pp", "dp"))
        message = pp_message_s(
            ctx, grid["tp"], grid["micro_batch"], grid["tp"] * grid["pp"] * grid["dp"]
        )
        return PerBlock(
            once=self.time("pp_message", grid, message),
            per_step=self.time("pp_message_per_step", grid, self.step_scale(grid) * message),
            pp_power=0,
        )

    def dp_comm(self) -> tuple[cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]:
        g = make_grid(self.variables, ("tp", "pp", *self.dp_axes, "zero_stage", "recompute"))
        after, before, per_mb = dp_comm_times_s(
            self.ctx, g["tp"], g["pp"], self.data_parallel(g), g["zero_stage"], g["recompute"]
        )
        return (
            self.time("dp_after_backward", g, after),
            self.time("dp_before_forward", g, before),
            self.time("dp_per_micro_batch", g, per_mb),
        )

    def optimizer(self) -> cp_model.IntVar:
        g = make_grid(
            self.variables, ("tp", "pp", *self.dp_axes, "zero_stage", "offload_optimizer")
        )
        seconds = optimizer_time_s(
            self.ctx,
            g["tp"],
            g["pp"],
            self.data_parallel(g),
            g["zero_stage"],
            g["offload_optimizer"],
        )
        return self.time("optimizer", g, seconds)

    def state(self, last: bool) -> tuple[cp_model.IntVar, list[cp_model.IntVar]]:
        """(HBM bytes of model state, [offloaded bytes per offload tier]) of a stage."""
        g = make_grid(
            self.variables,
            ("tp", "pp", *self.dp_axes, "zero_stage", "offload_weights", "offload_optimizer"),
        )
        state = model_state(
            self.ctx,
            g["tp"],
            g["pp"],
            self.data_parallel(g),
            g["zero_stage"],
            g["offload_weights"],
            g["offload_optimizer"],
            last,
        )
        stage = "last" if last else "first"
        offloaded = [
            self.memory(f"state_{stage}_tier{tier}", g, sum(items.values()))
            for tier, items in enumerate(state.offloaded, start=1)
        ]
        return self.memory(f"state_{stage}", g, state.hbm), offloaded

    def activations(self):
        """Per block per micro-batch activation bytes split by where they live: (in HBM for
        the whole pipeline flush, in HBM as the offload working set, [per offload tier]), and
        the block rebuilt by full recompute."""
        ctx = self.ctx
        g = make_grid(
            self.variables,
            ("tp", "micro_batch", "recompute", "sequence_parallel", "offload_activations"),
        )
        per_block = block_activation_bytes(
            ctx, g["tp"], g["micro_batch"], g["recompute"], g["sequence_parallel"]
        )
        tier = g["offload_activations"]
        stored = self.memory("activations_stored", g, np.where(tier == 0, per_block, 0.0))
        working = self.memory("activations_working", g, np.where(tier > 0, per_block, 0.0))
        offloaded = [
            self.memory(f"activations_tier{k}", g, np.where(tier == k, per_block, 0.0))
            for k in range(1, len(ctx.system.memory_tiers))
        ]
        r = make_grid(self.variables, ("tp", "micro_batch", "recompute", "sequence_parallel"))
        rebuilt = self.memory(
            "activations_rebuilt",
            r,
            rebuilt_activation_bytes(
                ctx, r["tp"], r["micro_batch"], r["recompute"], r["sequence_parallel"]
            ),
        )
        return stored, working, offloaded, rebuilt

    def logits(self) -> cp_model.IntVar:
        g = make_grid(self.variables, ("tp", "micro_batch"))
        return self.memory("logits", g, logits_bytes(self.ctx, g["tp"], g["micro_batch"]))
