"""Cost-term tables: the cost model evaluated over the grid of the few knobs each term depends
on, in the same functions ``planner.cost`` uses to evaluate one strategy.

Times are integers in units of ``unit_s`` (rounded to nearest); memory in units of
``memory_unit_bytes`` (1 KiB unless the problem's scale needs coarser; rounded up, so the solver
never accepts a plan the evaluation says overflows). Values are clipped at a ceiling
that keeps every product in the model inside 64 bits; a clipped entry is one no optimal or
feasible plan can use (DESIGN.md §5: resolution chosen per problem).

A step runs n = B/(d·b) micro-batches. For a fixed GPU count N, n = p·φ with
φ = B·t·c/(N·b), so a per-step term n·X is p × (a table of φ·X over X's own knobs, which
always include tp and cp); for a free GPU count the table of n·X takes dp as one more knob.
Either way no product of variables is needed, and the terms that depend on dp (DP
communication, model state, the optimizer) are tabulated over (tp, cp, layout) with
dp = N/(tp·cp·pp), or over (tp, cp, layout, dp); a layout fixes pp and the blocks per stage.

Over 500 lines by design: one class (TableBuilder) builds every table of a problem over the same
cached grids, units and hardware levels, one method per cost term (time terms, then memory);
the integer scales (constraints.scales) and the grids (constraints.grid) live apart.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
from ortools.sat.python import cp_model

from constraints.grid import (
    AXONN_KNOBS,
    BLOCK_TIME_KNOBS,
    DpCommVariables,
    Grid,
    PerBlock,
    grid_block_times,
    make_grid,
)
from constraints.scales import (
    HARDWARE_KNOBS,
    NEED_CAP_BYTES,
    TIME_CEILING_IDEAL_STEPS,
    UNITS_PER_IDEAL_STEP,
    memory_unit_bytes,
)
from constraints.variables import Variables
from planner.cost import calculon
from planner.cost.compute import block_times, lm_head_time_s
from planner.cost.context import CostContext
from planner.cost.experts import expert_dp_size
from planner.cost.flops import model_flops_per_step
from planner.cost.interleave import chunk_overhead_s
from planner.cost.memory import (
    StageParams,
    block_activation_bytes,
    block_params_per_rank,
    gathered_weight_bytes,
    logits_bytes,
    model_state,
    rebuilt_activation_bytes,
    stage_params,
)
from planner.cost.offload import activation_link_s, offloaded_share, weight_link_s
from planner.cost.parallel_comm import (
    dp_comm_times_s,
    group_spans,
    pp_message_s,
    regathers_under_recompute,
)
from planner.cost.step import block_pieces, optimizer_time_s
from planner.specs import RECOMPUTE_CODES
from planner.specs.hardware import with_quantity


class TableBuilder:
    """Builds the integer table variables of one problem."""

    def __init__(
        self,
        ctx: CostContext,
        variables: Variables,
        memory_cap_bytes: float,
        memory_fixed: bool = True,
        scale: int = 1,
    ) -> None:
        """``scale``: time_scale's refinement of the time unit."""
        self.ctx = ctx
        self.variables = variables
        largest = math.prod(max(variables.domains[k]) for k in ("tp", "cp", "pp", "dp"))
        gpus = variables.space.gpus or min(largest, variables.space.max_gpus)
        ideal_step_s = model_flops_per_step(ctx) / (gpus * ctx.peak_flops)
        self.unit_s = ideal_step_s / (UNITS_PER_IDEAL_STEP * scale)
        self.time_ceiling = int(UNITS_PER_IDEAL_STEP * scale * TIME_CEILING_IDEAL_STEPS)
        ceiling_bytes = memory_cap_bytes if memory_fixed else NEED_CAP_BYTES
        self.memory_unit_bytes = memory_unit_bytes(
            ceiling_bytes, ctx.model.layers, max(variables.domains["pp"])
        )
        self.memory_ceiling = int(np.ceil(ceiling_bytes / self.memory_unit_bytes)) + 1

    # -- conversion -------------------------------------------------------------------------
    def time(self, name: str, grid: Grid, seconds: np.ndarray) -> cp_model.IntVar:
        shape = grid[grid.knobs[0]].shape
        units = np.rint(np.clip(np.broadcast_to(seconds, shape), 0, None) / self.unit_s)
        return self.variables.table(name, grid.knobs, np.minimum(units, self.time_ceiling))

    def memory(self, name: str, grid: Grid, nbytes: np.ndarray) -> cp_model.IntVar:
        shape = grid[grid.knobs[0]].shape
        units = np.ceil(np.clip(np.broadcast_to(nbytes, shape), 0, None) / self.memory_unit_bytes)
        return self.variables.table(name, grid.knobs, np.minimum(units, self.memory_ceiling))

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
        return self.variables.space.gpus / (grid["tp"] * grid["cp"] * grid["pp"])

    def step_scale(self, grid: Grid) -> np.ndarray:
        """n/p^power: φ = B·t·c/(N·b) for a fixed GPU count, n = B/(d·b) for a free one."""
        job = self.ctx.job
        if self.free_gpus:
            return job.global_batch / (grid["dp"] * grid["micro_batch"])
        tokens_split = grid["tp"] * grid["cp"]
        return job.global_batch * tokens_split / (self.variables.space.gpus * grid["micro_batch"])

    # -- hardware levels ---------------------------------------------------------------------
    def level_contexts(self, knob: str) -> list[CostContext]:
        """One cost context per level of a hardware knob (a bandwidth made a decision)."""
        ctx = self.ctx
        contexts = []
        for value in self.variables.space.hardware[knob]:
            system = with_quantity(ctx.system, HARDWARE_KNOBS[knob], value)
            contexts.append(CostContext(ctx.model, system, ctx.job))
        return contexts

    def evaluate(
        self, knobs: tuple[str, ...], cost, affected: tuple[str, ...] = ()
    ) -> tuple[Grid, np.ndarray]:
        """``cost(ctx, grid)`` over the knobs' grid; when a hardware knob in ``affected`` is a
        decision of this model, once per level, stacked as one more (last) axis."""
        levels = [k for k in affected if k in self.variables.space.hardware]
        if not levels:
            grid = make_grid(self.variables, knobs)
            return grid, np.broadcast_to(cost(self.ctx, grid), grid[knobs[0]].shape)
        knob = levels[0]
        stacked = make_grid(self.variables, (*knobs, knob))  # the table's entries, counted once
        base = make_grid(self.variables, knobs, reserve=False)
        shape = base[knobs[0]].shape
        values = np.stack(
            [np.broadcast_to(cost(ctx, base), shape) for ctx in self.level_contexts(knob)], axis=-1
        )
        return stacked, values

    def per_block(
        self, name: str, knobs: tuple[str, ...], cost, affected: tuple[str, ...] = ()
    ) -> PerBlock:
        """``cost(ctx, grid)`` in seconds tabulated over ``knobs``, and its per-step multiple."""
        grid, once = self.evaluate(knobs, cost, affected)
        scaled, per_mb = self.evaluate((*knobs, *self.dp_axes), cost, affected)
        return PerBlock(
            once=self.time(name, grid, once),
            per_step=self.time(f"{name}_per_step", scaled, self.step_scale(scaled) * per_mb),
            pp_power=0 if self.free_gpus else 1,
        )

    # -- the tables -------------------------------------------------------------------------
    def block_compute(self) -> tuple[PerBlock, PerBlock]:
        """(forward + backward + recompute, forward) per block per micro-batch."""
        knobs = BLOCK_TIME_KNOBS

        def compute(ctx: CostContext, g: Grid) -> np.ndarray:
            t = grid_block_times(ctx, g)
            return t.forward_s + t.backward_s + t.recompute_s

        return (
            self.per_block("compute", knobs, compute),
            self.per_block("forward", knobs, lambda ctx, g: grid_block_times(ctx, g).forward_s),
        )

    def exposed_comm_s(self, ctx: CostContext, g: Grid, recompute: np.ndarray | int):
        """Exposed TP, CP and expert traffic per block per micro-batch over ``g`` (which has
        the comm_exposed knobs). Sequence parallelism only changes the expert traffic's
        overlap window, and an MoE model has it exactly when tp > 1 (planner.space.rules)."""
        sp = g["tp"] > 1 if ctx.model.is_moe else 0
        if self.comm_sp:  # TP collectives or their windows differ with sequence parallelism
            sp = g["sequence_parallel"]
        pieces = block_pieces(
            ctx,
            g["tp"],
            g["micro_batch"],
            recompute,
            sp,
            g["tp_overlap"],
            0,
            0,
            g["cp"],
            g["ep"],
            g["expert_tp"],
            0.0,
            g["tp_column"],
            g["tp_depth"],
        )
        return pieces.tp_exposed_s + pieces.cp_exposed_s + pieces.ep_exposed_s

    COMM_KNOBS = ("tp", "cp", "micro_batch", "tp_overlap", *AXONN_KNOBS, "ep", "expert_tp")

    @property
    def comm_sp(self) -> bool:
        """Whether the exposed TP traffic depends on sequence parallelism: Calculon's TP
        collectives differ with it (rs_ag); AxoNN's overlap windows are the block's passes,
        whose memory-bound part it changes (planner/cost/axonn_comm.py); a stack that gathers
        on the sequence dimension copies around its SP collectives only with SP on
        (StackProfile.sp_layout_copies, parallel_comm.sp_layout_copy_s)."""
        stack = self.ctx.stack
        return self.ctx.calculon or stack.tp_form == "axonn" or stack.sp_layout_copies

    @property
    def comm_knobs(self) -> tuple[str, ...]:
        """COMM_KNOBS, and sequence parallelism where the traffic depends on it (comm_sp)."""
        return (*self.COMM_KNOBS, "sequence_parallel") if self.comm_sp else self.COMM_KNOBS

    def comm_exposed(self) -> PerBlock:
        """Exposed TP, CP and expert traffic per block per micro-batch."""
        return self.per_block(
            "comm_exposed",
            (*self.comm_knobs, "recompute"),
            lambda ctx, g: self.exposed_comm_s(ctx, g, g["recompute"]),
            affected=("scale_out_bw",),
        )

    def partial_recompute(self) -> tuple[PerBlock, PerBlock]:
        """What r fully recomputed blocks per stage add to a stage that otherwise recomputes
        nothing, per micro-batch: r·(X(full) − X(none)) for X the block compute and the exposed
        TP and CP traffic (partial recompute excludes offloading, so the offload terms stay
        those of recompute none)."""
        full, none = RECOMPUTE_CODES["full"], RECOMPUTE_CODES["none"]

        def compute(ctx: CostContext, g: Grid) -> np.ndarray:
            def total(code: int) -> np.ndarray:
                t = block_times(
                    ctx,
                    g["tp"],
                    g["micro_batch"],
                    code,
                    g["sequence_parallel"],
                    g["cp"],
                    g["ep"],
                    g["tp_column"],
                    g["tp_depth"],
                )
                return t.forward_s + t.backward_s + t.recompute_s

            return total(full) - total(none)

        def comm(ctx: CostContext, g: Grid) -> np.ndarray:
            return self.exposed_comm_s(ctx, g, full) - self.exposed_comm_s(ctx, g, none)

        return (
            self.per_block(
                "partial_compute",
                ("tp", "cp", "micro_batch", "sequence_parallel", *AXONN_KNOBS, "ep"),
                compute,
            ),
            self.per_block("partial_comm", self.comm_knobs, comm, affected=("scale_out_bw",)),
        )

    def calculon_dp_window(self) -> PerBlock:
        """Under Calculon's arithmetic, a block's backward flop time with its recompute per
        micro-batch (compute.BlockTimes.offload_backward_window): what DP traffic hides under,
        with the backward's offload stalls (step.BlockPieces.calculon_window_s)."""
        return self.per_block(
            "calculon_dp_window",
            BLOCK_TIME_KNOBS,
            lambda ctx, g: grid_block_times(ctx, g).offload_backward_window,
        )

    def offload_exposed(self) -> tuple[PerBlock, PerBlock]:
        """(forward, backward) exposed offload traffic per block per micro-batch, from its
        pieces (planner/cost/offload.py): max(0, W_f − C_f, A − C_f) and max(0, W_b + A − C_b)
        over the tiers, each piece a table over its own few knobs, the max an
        AddMaxEquality."""
        ctx = self.ctx
        axes = BLOCK_TIME_KNOBS
        a_axes = axes[:-1]  # activations do not depend on ep
        w_axes = ("tp", "cp", "micro_batch", "offload_weights", "ep", "expert_tp")

        def activations(ctx: CostContext, g: Grid, tier: int) -> np.ndarray:
            local_mb = g["micro_batch"] / g["cp"]
            a_block = block_activation_bytes(
                ctx,
                g["tp"],
                local_mb,
                g["recompute"],
                g["sequence_parallel"],
                g["tp_column"],
                g["tp_depth"],
            )
            return activation_link_s(ctx, g["offload_activations"], a_block, tier)

        def weights(ctx: CostContext, g: Grid, tier: int, index: int) -> np.ndarray:
            params = block_params_per_rank(ctx, g["tp"], g["ep"], g["expert_tp"])
            return weight_link_s(ctx, g["offload_weights"], params, tier)[index]

        def backward_s(ctx: CostContext, g: Grid) -> np.ndarray:
            return grid_block_times(ctx, g).offload_backward_window

        def forward_s(ctx: CostContext, g: Grid) -> np.ndarray:
            return grid_block_times(ctx, g).offload_forward_window

        c_f = self.per_block("offload_cf", axes, forward_s)
        c_b = self.per_block("offload_cb", axes, backward_s)
        forward: list[tuple[PerBlock, ...]] = []
        backward: list[tuple[PerBlock, ...]] = []
        for tier in range(1, len(ctx.system.memory_tiers)):
            affected = ("offload_bw",) if tier == 1 else ()
            a = self.per_block(
                f"offload_a{tier}",
                (*a_axes, "offload_activations"),
                lambda ctx, g, t=tier: activations(ctx, g, t),
                affected,
            )
            w_f, w_b = (
                self.per_block(
                    f"offload_w{tier}_{pass_}",
                    w_axes,
                    lambda ctx, g, t=tier, i=i: weights(ctx, g, t, i),
                    affected,
                )
                for i, pass_ in enumerate(("f", "b"))
            )
            forward += [(w_f,), (a,)]
            backward.append((w_b, a, *self.optimizer_stream(tier)))
        return (
            self._exposed("offload_forward", forward, c_f),
            self._exposed("offload_backward", backward, c_b),
        )

    def optimizer_stream(self, tier: int) -> tuple[PerBlock, ...]:
        """Under Calculon's arithmetic, the block's offloaded optimizer state streamed in each
        backward on tier 1's link (calculon.optimizer_stream_s), a table over (tp, cp,
        micro_batch, layout, zero_stage, offload_optimizer): dp follows from the layout;
        otherwise nothing."""
        if not self.ctx.calculon or tier != 1:
            return ()

        def seconds(ctx: CostContext, g: Grid) -> np.ndarray:
            ranks = self.data_parallel(g) * g["cp"]
            return calculon.optimizer_stream_s(
                ctx, g["tp"], ranks, g["zero_stage"], g["offload_optimizer"], offloaded_share
            )

        knobs = ("tp", "cp", "micro_batch", "layout", "zero_stage", "offload_optimizer")
        if not self.free_gpus:
            return (self.per_block("offload_o1_b", knobs, seconds, ("offload_bw",)),)
        grid, once = self.evaluate((*knobs, "dp"), seconds, ("offload_bw",))
        return (
            PerBlock(
                once=self.time("offload_o1_b", grid, once),
                per_step=self.time("offload_o1_b_per_step", grid, self.step_scale(grid) * once),
                pp_power=0,
            ),
        )

    def _exposed(
        self,
        name: str,
        links: list[tuple[PerBlock, ...]],
        compute: PerBlock,
    ) -> PerBlock:
        """max(0, max over ``links`` of their sum − compute), once and per step: an exposed
        stall, exactly, from the pieces' tables."""
        m, v = self.variables.model, self.variables

        def exposed(suffix: str, part) -> cp_model.IntVar:
            terms = [sum(part(x) for x in link) - part(compute) for link in links]
            bound = max(sum(v.ub(part(x)) for x in link) for link in links)
            target = v.new_int(f"{name}{suffix}", bound)
            m.AddMaxEquality(target, [0, *terms])
            return target

        return PerBlock(
            once=exposed("", lambda x: x.once),
            per_step=exposed("_per_step", lambda x: x.per_step),
            pp_power=compute.pp_power,
        )

    def head(self) -> PerBlock:
        return self.per_block(
            "head",
            ("tp", "cp", "micro_batch"),
            lambda ctx, g: lm_head_time_s(ctx, g["tp"], g["micro_batch"], g["cp"]),
        )

    @property
    def placement_axes(self) -> tuple[str, ...]:
        """The placement knob, where the space offers more than the default rank order."""
        return ("placement",) if len(self.variables.domains["placement"]) > 1 else ()

    def placement(self, g: Grid) -> np.ndarray | int:
        return g["placement"] if self.placement_axes else self.variables.domains["placement"][0]

    def chunk_overhead(self) -> PerBlock | None:
        """The interleaved schedule's chunk steps per micro-batch on a rank, 2·(v − 1)·o
        (planner/cost/interleave.chunk_overhead_s), over the interleave; None where the stack
        states no per-chunk time or the space has no interleaving."""
        interleaves = self.variables.domains["interleave"]
        if not self.ctx.stack.pp_chunk_overhead_us or max(interleaves) == 1:
            return None
        return self.per_block(
            "chunk_overhead",
            ("tp", "cp", "micro_batch", "interleave"),  # the per-step multiple needs the first 3
            lambda ctx, g: chunk_overhead_s(ctx, 2, g["interleave"]),
        )

    def pp_message(self) -> PerBlock:
        """One stage-to-stage transfer per micro-batch; its tier follows the pipeline's span
        (step.group_spans: t·c·p·d, the fixed GPU count, in the default rank order), a table
        over pp and dp when the GPU count is free or the placement is searched or fixed at
        TP, PP, DP (the axonn stack's); over sequence parallelism too where the stack does not
        scatter the activations over TP (parallel_comm.pp_message_s)."""
        default_order = self.variables.domains["placement"] == (0,)
        sp_axes = () if self.ctx.stack.pp_scatter_gather else ("sequence_parallel",)

        def sp(g: Grid) -> np.ndarray | bool:
            return g["sequence_parallel"] if sp_axes else True

        if not self.free_gpus and default_order:
            gpus = self.variables.space.gpus
            return self.per_block(
                "pp_message",
                ("tp", "cp", "micro_batch", *sp_axes),
                lambda ctx, g: pp_message_s(ctx, g["tp"], g["micro_batch"], gpus, g["cp"], sp(g)),
                affected=("scale_out_bw",),
            )

        def message(ctx: CostContext, g: Grid) -> np.ndarray:
            dp = self.data_parallel(g)
            span = group_spans(g["tp"], g["cp"], g["pp"], dp, self.placement(g))[1]
            return pp_message_s(ctx, g["tp"], g["micro_batch"], span, g["cp"], sp(g))

        if not self.free_gpus:
            return self.per_block(
                "pp_message",
                ("tp", "cp", "micro_batch", *sp_axes, "pp", *self.placement_axes),
                message,
                affected=("scale_out_bw",),
            )
        knobs = ("tp", "cp", "micro_batch", *sp_axes, "pp", "dp", *self.placement_axes)
        grid, once = self.evaluate(knobs, message, ("scale_out_bw",))
        return PerBlock(
            once=self.time("pp_message", grid, once),
            per_step=self.time("pp_message_per_step", grid, self.step_scale(grid) * once),
            pp_power=0,
        )

    EXPERT_AXES = ("ep", "expert_tp")

    def layout_params(self, g: Grid, stage: str) -> StageParams:
        """Parameters per rank of the layout's ``stage`` ("first", "middle" or "last")."""
        return stage_params(self.ctx, g["tp"], g["pp"], g[stage], stage, g["ep"], g["expert_tp"])

    def expert_dp(self, g: Grid) -> np.ndarray:
        return expert_dp_size(g["tp"], g["cp"], self.data_parallel(g), g["ep"], g["expert_tp"])

    def dp_comm(self, stage: str) -> DpCommVariables:
        """A stage's DP communication (step.DpCommTimes): the transfers after the backward,
        before the forward and per micro-batch, and the ring latencies per step and per
        micro-batch. The latencies do not depend on the bandwidth (the DP collectives run
        NCCL's Simple protocol: parallel_comm.SIMPLE), so a scale-out bandwidth query
        tabulates only the transfers over its levels (gpt3-175b on 1,024 H100s over 81 levels
        needed more than planner's 10^6 table entries with the latencies too)."""
        # recompute moves DP traffic only where full recompute gathers ZeRO-3's weights again
        regather = not self.ctx.calculon and regathers_under_recompute(self.ctx.stack)
        recompute = ("recompute",) if regather else ()
        knobs = ("tp", "cp", "layout", *self.dp_axes, "zero_stage", *recompute)
        knobs += (*self.placement_axes, *self.EXPERT_AXES)
        # Calculon's DP parts split by chunk (calculon.dp_parts_s)
        knobs += ("interleave",) if self.ctx.calculon else ()

        def part(name: str) -> cp_model.IntVar:
            def cost(ctx: CostContext, g: Grid) -> np.ndarray:
                dp = self.data_parallel(g)
                span = group_spans(g["tp"], g["cp"], g["pp"], dp, self.placement(g))[0]
                times = dp_comm_times_s(
                    ctx,
                    self.layout_params(g, stage),
                    g[stage],
                    span,
                    dp,
                    g["zero_stage"],
                    g["recompute"] if recompute else 0,
                    g["cp"],
                    self.expert_dp(g),
                    g["interleave"] if self.ctx.calculon else 1,
                    g["pp"],
                )
                # a middle stage only where there is one (step.stage_present: p > 2)
                return getattr(times, name) * (g["pp"] > 2 if stage == "middle" else 1)

            bandwidths = () if name.startswith("latency") else ("scale_out_bw",)
            return self.time(f"dp_{name}_{stage}", *self.evaluate(knobs, cost, bandwidths))

        return DpCommVariables(**{f.name: part(f.name) for f in fields(DpCommVariables)})

    def optimizer(self) -> cp_model.IntVar:
        """The optimizer step of the stage (first, middle where p > 2, or last) with the most
        state per rank (step.evaluate_terms)."""
        knobs = ("tp", "cp", "layout", *self.dp_axes, "zero_stage", "offload_optimizer")

        def seconds(ctx: CostContext, g: Grid, stage: str) -> np.ndarray:
            params = self.layout_params(g, stage)
            return optimizer_time_s(
                ctx,
                params.total,
                self.data_parallel(g),
                g["zero_stage"],
                g["offload_optimizer"],
                g["cp"],
                params.experts,
                self.expert_dp(g),
                g["tp"],
                g[stage],
            )

        grid, slowest = self.evaluate(
            (*knobs, *self.EXPERT_AXES),
            lambda ctx, g: np.maximum.reduce(
                [
                    seconds(ctx, g, "first"),
                    np.where(g["pp"] > 2, seconds(ctx, g, "middle"), 0.0),
                    seconds(ctx, g, "last"),
                ]
            ),
            ("offload_bw",),
        )
        return self.time("optimizer", grid, slowest)

    def state(self, stage: str) -> tuple[cp_model.LinearExpr, list[cp_model.LinearExpr]]:
        """(HBM bytes of model state, [offloaded bytes per offload tier]) of a stage ("first",
        "middle" or "last"): weights with gradients (a table over the weights' offload code)
        plus the optimizer state (over the optimizer's). Weights are replicated over cp, so the
        state shards over dp·cp ranks (the routed experts over their edp)."""
        knobs = ("tp", "cp", "layout", *self.dp_axes, "zero_stage", *self.EXPERT_AXES)
        parts = []
        # Under Calculon's arithmetic the gradients follow the optimizer's offload, not the
        # weights' (calculon.model_state).
        groups = (
            (("offload_weights", ("weights",)), ("offload_optimizer", ("gradients", "optimizer")))
            if self.ctx.calculon
            else (
                ("offload_weights", ("weights", "gradients")),
                ("offload_optimizer", ("optimizer",)),
            )
        )
        for offloaded, items in groups:
            g = make_grid(self.variables, (*knobs, offloaded))
            state = model_state(
                self.ctx,
                g["tp"],
                g["pp"],
                g[stage],
                self.data_parallel(g) * g["cp"],
                g["zero_stage"],
                g["offload_weights"] if offloaded == "offload_weights" else 0,
                g["offload_optimizer"] if offloaded == "offload_optimizer" else 0,
                stage,
                g["ep"],
                g["expert_tp"],
                self.expert_dp(g),
            )
            hbm = sum(getattr(state, item) for item in items)
            tiers = [sum(tier[item] for item in items) for tier in state.offloaded]
            label = items[0]
            parts.append(
                (
                    self.memory(f"state_{stage}_{label}", g, hbm),
                    [
                        self.memory(f"state_{stage}_{label}_tier{k}", g, nbytes)
                        for k, nbytes in enumerate(tiers, start=1)
                    ],
                )
            )
        (w_hbm, w_tiers), (o_hbm, o_tiers) = parts
        return w_hbm + o_hbm, [w + o for w, o in zip(w_tiers, o_tiers, strict=True)]

    def activations(self):
        """Per block per micro-batch activation bytes split by where they live: (in HBM for
        the whole pipeline flush: 1 − q of them for an offloaded share q; in HBM as the offload
        working set: q; [per offload tier: q where the share goes]), and
        the block rebuilt by full recompute; each rank holds b/cp of a micro-batch."""
        ctx = self.ctx
        g = make_grid(
            self.variables,
            (
                "tp",
                "cp",
                "micro_batch",
                "recompute",
                "sequence_parallel",
                *AXONN_KNOBS,
                "offload_activations",
            ),
        )
        per_block = block_activation_bytes(
            ctx,
            g["tp"],
            g["micro_batch"] / g["cp"],
            g["recompute"],
            g["sequence_parallel"],
            g["tp_column"],
            g["tp_depth"],
        )
        code = g["offload_activations"]
        share = offloaded_share(code)
        stored = self.memory("activations_stored", g, (1 - share) * per_block)
        working = self.memory("activations_working", g, share * per_block)
        offloaded = [
            self.memory(f"activations_tier{k}", g, offloaded_share(code, k) * per_block)
            for k in range(1, len(ctx.system.memory_tiers))
        ]
        r_knobs = ("tp", "cp", "micro_batch", "recompute", "sequence_parallel", *AXONN_KNOBS)
        # Calculon's resident activations depend on their offload (calculon.
        # resident_activation_bytes).
        r_knobs += ("offload_activations",) if ctx.calculon else ()
        r = make_grid(self.variables, r_knobs)
        rebuilt = self.memory(
            "activations_rebuilt",
            r,
            rebuilt_activation_bytes(
                ctx,
                r["tp"],
                r["micro_batch"] / r["cp"],
                r["recompute"],
                r["sequence_parallel"],
                r["offload_activations"] if ctx.calculon else 0,
                r["tp_column"],
                r["tp_depth"],
            )
            # AxoNN's gathered weight blocks: a per-stage transient like the rebuilt block
            + gathered_weight_bytes(ctx, r["tp"], r["tp_column"], r["tp_depth"]),
        )
        return stored, working, offloaded, rebuilt

    def partial_activations(self) -> tuple[cp_model.IntVar, cp_model.IntVar]:
        """(activation bytes per micro-batch that r fully recomputed blocks save against
        storing all of theirs, r·(A(none) − A(full)); the block rebuilt during a backward, the
        full-recompute one) for partial recompute."""
        ctx = self.ctx
        knobs = ("tp", "cp", "micro_batch", "sequence_parallel", *AXONN_KNOBS)
        g = make_grid(self.variables, knobs)
        local_mb = g["micro_batch"] / g["cp"]

        def stored(code: int) -> np.ndarray:
            return block_activation_bytes(
                ctx,
                g["tp"],
                local_mb,
                code,
                g["sequence_parallel"],
                g["tp_column"],
                g["tp_depth"],
            )

        # Rounded down, so that the saving never exceeds the evaluation's.
        full, none = RECOMPUTE_CODES["full"], RECOMPUTE_CODES["none"]
        saved = stored(none) - stored(full)
        saved_units = np.floor(np.clip(saved, 0, None) / self.memory_unit_bytes)
        saving = self.variables.table(
            "activations_partial_saved", g.knobs, np.minimum(saved_units, self.memory_ceiling)
        )
        r = make_grid(self.variables, knobs)
        rebuilt = self.memory(
            "activations_partial_rebuilt",
            r,
            rebuilt_activation_bytes(
                ctx,
                r["tp"],
                r["micro_batch"] / r["cp"],
                full,
                r["sequence_parallel"],
                0,
                r["tp_column"],
                r["tp_depth"],
            ),
        )
        return saving, rebuilt

    def logits(self) -> cp_model.IntVar:
        g = make_grid(self.variables, ("tp", "cp", "micro_batch"))
        local_mb = g["micro_batch"] / g["cp"]
        return self.memory("logits", g, logits_bytes(self.ctx, g["tp"], local_mb))
