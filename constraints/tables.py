"""Cost-term tables: the cost model evaluated over the grid of the few knobs each term depends
on, in the same functions ``planner.cost`` uses to evaluate one strategy.

Times are integers in units of ``unit_s`` (rounded to nearest); memory in KiB (rounded up, so
the solver never accepts a plan the evaluation says overflows). Values are clipped at a ceiling
that keeps every product in the model inside 64 bits; a clipped entry is one no optimal or
feasible plan can use (DESIGN.md §5: resolution chosen per problem).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
UNITS_PER_IDEAL_STEP = 1e6
"""Time resolution: the ideal step (model FLOPs at peak on every GPU) is 10^6 units, so the
objective's rounding error stays orders of magnitude below the 0.1 % the planner promises."""
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
    axes = np.meshgrid(
        *(np.asarray(variables.domains[k]) for k in knobs), indexing="ij", sparse=False
    )
    return Grid(knobs=knobs, arrays=dict(zip(knobs, axes, strict=True)))


class TableBuilder:
    """Builds the integer table variables of one problem."""

    def __init__(self, ctx: CostContext, variables: Variables, memory_cap_bytes: float) -> None:
        self.ctx = ctx
        self.variables = variables
        gpus = variables.space.gpus
        ideal_step_s = model_flops_per_step(ctx) / (gpus * ctx.peak_flops)
        self.unit_s = ideal_step_s / UNITS_PER_IDEAL_STEP
        self.time_ceiling = int(UNITS_PER_IDEAL_STEP * TIME_CEILING_IDEAL_STEPS)
        self.memory_ceiling = int(np.ceil(memory_cap_bytes / KIB)) + 1

    # -- conversion -------------------------------------------------------------------------
    def time(self, name: str, grid: Grid, seconds: np.ndarray):
        units = np.rint(
            np.clip(np.broadcast_to(seconds, grid[grid.knobs[0]].shape), 0, None) / self.unit_s
        )
        return self.variables.table(name, grid.knobs, np.minimum(units, self.time_ceiling))

    def memory(self, name: str, grid: Grid, nbytes: np.ndarray):
        kib = np.ceil(np.clip(np.broadcast_to(nbytes, grid[grid.knobs[0]].shape), 0, None) / KIB)
        return self.variables.table(name, grid.knobs, np.minimum(kib, self.memory_ceiling))

    def micro_batch_share(self, grid: Grid) -> np.ndarray:
        """φ = B·t/(N·b): micro-batches per step divided by pp (n = p·φ)."""
        job, gpus = self.ctx.job, self.variables.space.gpus
        return job.global_batch * grid["tp"] / (gpus * grid["micro_batch"])

    def data_parallel(self, grid: Grid) -> np.ndarray:
        return self.variables.space.gpus / (grid["tp"] * grid["pp"])

    # -- the tables -------------------------------------------------------------------------
    def block_compute(self):
        """Per block per micro-batch: (fwd+bwd+recompute, forward) unscaled and ×L·φ."""
        ctx, layers = self.ctx, self.ctx.model.layers
        g = make_grid(self.variables, ("tp", "micro_batch", "recompute", "sequence_parallel"))
        times = block_times(ctx, g["tp"], g["micro_batch"], g["recompute"], g["sequence_parallel"])
        compute = times.forward_s + times.backward_s + times.recompute_s
        scale = layers * self.micro_batch_share(g)
        return (
            self.time("compute", g, compute),
            self.time("forward", g, times.forward_s),
            self.time("compute_per_step", g, scale * compute),
            self.time("forward_per_step", g, scale * times.forward_s),
        )

    def tp_exposed(self):
        ctx, layers = self.ctx, self.ctx.model.layers
        g = make_grid(self.variables, ("tp", "micro_batch", "recompute", "tp_overlap"))
        exposed = block_pieces(
            ctx, g["tp"], g["micro_batch"], g["recompute"], 0, g["tp_overlap"], 0, 0
        ).tp_exposed_s
        scale = layers * self.micro_batch_share(g)
        return self.time("tp_exposed", g, exposed), self.time("tp_per_step", g, scale * exposed)

    def offload_exposed(self):
        """(forward, backward) exposed offload per block per micro-batch, unscaled and ×L·φ."""
        ctx, layers = self.ctx, self.ctx.model.layers
        g = make_grid(
            self.variables,
            (
                "tp",
                "micro_batch",
                "recompute",
                "sequence_parallel",
                "offload_weights",
                "offload_activations",
            ),
        )
        piece = block_pieces(
            ctx,
            g["tp"],
            g["micro_batch"],
            g["recompute"],
            g["sequence_parallel"],
            0,
            g["offload_weights"],
            g["offload_activations"],
        )
        scale = layers * self.micro_batch_share(g)
        return (
            self.time("offload_forward", g, piece.offload_forward_s),
            self.time("offload_backward", g, piece.offload_backward_s),
            self.time("offload_forward_per_step", g, scale * piece.offload_forward_s),
            self.time("offload_backward_per_step", g, scale * piece.offload_backward_s),
        )

    def head_and_message(self):
        """LM head and one PP message per micro-batch, unscaled and ×φ."""
        ctx = self.ctx
        g = make_grid(self.variables, ("tp", "micro_batch"))
        head = lm_head_time_s(ctx, g["tp"], g["micro_batch"])
        message = pp_message_s(ctx, g["tp"], g["micro_batch"], self.variables.space.gpus)
        share = self.micro_batch_share(g)
        return (
            self.time("head", g, head),
            self.time("pp_message", g, message),
            self.time("head_per_step", g, share * head),
            self.time("pp_message_per_step", g, share * message),
        )

    def dp_comm(self):
        g = make_grid(self.variables, ("tp", "pp", "zero_stage", "recompute"))
        after, before, per_mb = dp_comm_times_s(
            self.ctx, g["tp"], g["pp"], self.data_parallel(g), g["zero_stage"], g["recompute"]
        )
        return (
            self.time("dp_after_backward", g, after),
            self.time("dp_before_forward", g, before),
            self.time("dp_per_micro_batch", g, per_mb),
        )

    def optimizer(self):
        g = make_grid(self.variables, ("tp", "pp", "zero_stage", "offload_optimizer"))
        seconds = optimizer_time_s(
            self.ctx,
            g["tp"],
            g["pp"],
            self.data_parallel(g),
            g["zero_stage"],
            g["offload_optimizer"],
        )
        return self.time("optimizer", g, seconds)

    def state(self, last: bool):
        """(HBM bytes of model state, [offloaded bytes per offload tier]) of a stage."""
        g = make_grid(
            self.variables, ("tp", "pp", "zero_stage", "offload_weights", "offload_optimizer")
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

    def logits(self):
        g = make_grid(self.variables, ("tp", "micro_batch"))
        return self.memory("logits", g, logits_bytes(self.ctx, g["tp"], g["micro_batch"]))
