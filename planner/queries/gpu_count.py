"""Minimum-hardware queries over the GPU count: the fewest GPUs (``FewestGpus``), searched
count by count, each planned by ``plan`` itself, from a lower bound that the cost model proves
(``gpu_floor``: memory and compute), with how every smaller count was ruled out
(``Refutations``); and the least cost (``LeastCost``), GPUs × step time in one CP-SAT model
with the GPU count free.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import numpy as np
from ortools.sat.python import cp_model

from constraints import build_plan_model
from constraints.scales import FLOOR_MARGIN
from constraints.target import PerformanceTarget
from planner.cost.compute import block_times, lm_head_time_s
from planner.cost.context import CostContext
from planner.cost.flops import model_flops_per_step
from planner.cost.memory import memory_floor_gpus
from planner.queries.hardware_query import HardwareQuery
from planner.queries.plan import Plan
from planner.queries.solving import SOLVED, decode, solve_within
from planner.space.layouts import searched_layouts, stage_layouts, with_slot_interleaves
from planner.space.search_space import SearchSpace, build_search_space
from planner.specs.quantities import DEFAULT_MAX_STAGE_SKEW

GPU_CANDIDATE_PLANS = 256
"""The most GPU counts a fewest-GPUs query plans (a count of plans: deterministic); past it the
answer is unknown. gpt3-175b at step ≤ 10 s plans 5 counts (the floor is 530 GPUs, the answer
704), llama3-405b at 15T tokens in 60 days 7 (floor 11,713, answer 20,480: 1,089 of the node
multiples between have no tp·cp·pp·dp)."""
GPU_COUNT_WORK_UNITS = 10.0
"""The most deterministic work one GPU count's plan may spend in a fewest-GPUs query: a count
it leaves unrefuted makes the answer unproven, but does not spend the whole query's budget
(the counts of benchmarks/min_hardware_latency.py need at most 0.1 units each)."""


def gpu_seconds_floor(ctx: CostContext, space: SearchSpace) -> float:
    """A lower bound of GPUs × step time over every strategy of ``space``'s domains, from the
    cost model's own block times (planner.cost.step):

        step ≥ n · T ≥ n · (L · (fwd + bwd) + head) / p,   n = B / (d · b)
        ⇒ N · step ≥ B · t · cp · (L · (fwd + bwd)(t, cp, b, sp, ep) + head(t, cp, b)) / b

    since T is the slowest stage's time per micro-batch, at least the mean over the p stages,
    and every other term of a stage (recompute, TP/CP/EP/offload exposure, PP messages, the
    bubble, DP exposure, the optimizer step) is non-negative. The minimum is taken over tp,
    cp, micro-batch, sequence parallelism, ep and AxoNN's grid (X·Z dividing tp): the product
    of at most a few thousand values."""
    domains = space.domains
    knobs = ("tp", "cp", "micro_batch", "sequence_parallel", "ep", "tp_column", "tp_depth")
    tp, cp, mb, sp, ep, x, z = np.meshgrid(
        *(np.asarray(domains.get(knob, (1,)), dtype=float) for knob in knobs),
        indexing="ij",
    )
    times = block_times(ctx, tp, mb, 0, sp, cp, ep, x, z)
    per_micro_batch_s = ctx.model.layers * (times.forward_s + times.backward_s)
    per_micro_batch_s = per_micro_batch_s + lm_head_time_s(ctx, tp, mb, cp)
    seconds = ctx.job.global_batch * tp * cp * per_micro_batch_s / mb
    return float(np.min(np.where(tp % (x * z) == 0, seconds, np.inf)))


def gpu_floor(ctx: CostContext, space: SearchSpace, target: PerformanceTarget) -> float | None:
    """The fewest GPUs the goal allows by memory (memory_floor_gpus) and by compute
    (gpu_seconds_floor), each lowered by FLOOR_MARGIN, or None where the MFU goal is above
    what compute alone reaches at any count: a step-time bound S needs N ≥ floor / S; an MFU
    bound m needs N · step ≤ model FLOPs / (peak · m), independent of N."""
    least_s = gpu_seconds_floor(ctx, space) * (1 - FLOOR_MARGIN)
    mfu = target.min_mfu
    if mfu is not None and least_s > model_flops_per_step(ctx) / (ctx.peak_flops * mfu):
        return None
    fewest = memory_floor_gpus(ctx) * (1 - FLOOR_MARGIN)
    if target.max_step_s is not None:
        fewest = max(fewest, least_s / target.max_step_s)
    return max(1.0, fewest)


@dataclass
class Refutations:
    """How a fewest-GPUs query ruled out the node multiples below its answer."""

    floor: float
    """The memory and compute floor (gpu_floor): no count below it meets the goal."""
    multiple: int
    unfactorable: int = 0
    """Counts no tp·cp·pp·dp of plan's space multiplies to."""
    plans: int = 0
    """Counts planned (the answer's included)."""
    unrefuted: list[int] = field(default_factory=list)
    """Counts whose plan ran out of budget without a strategy or a proof."""
    stopped_at: int | None = None
    """The first count not searched, when the plan budget or the time limit ran out."""
    short_of_deadline: list[int] = field(default_factory=list)
    """Counts (also in ``unrefuted``) whose plan met the deadline scaled by the goodput's upper
    bound g⁺(N) but not at its own goodput: a slower strategy with a higher goodput is not
    ruled out there."""

    def describe(self, answer: int) -> str:
        """The evidence for ``answer`` in words."""
        first = max(1, math.ceil(self.floor / self.multiple)) * self.multiple
        parts = [f"below {first:,} by the memory and compute floor ({self.floor:,.0f} GPUs)"]
        if self.unfactorable:
            parts.append(f"{self.unfactorable} with no tp·cp·pp·dp of that product")
        refuted = self.plans - 1 - len(self.unrefuted)
        parts.append(f"{refuted} by plan (infeasible under the goal)")
        if self.short_of_deadline:
            parts.append(
                f"{len(self.short_of_deadline)} unknown (met the deadline at the goodput's "
                "bound, not at the plan's own)"
            )
        if len(self.unrefuted) > len(self.short_of_deadline):
            out = len(self.unrefuted) - len(self.short_of_deadline)
            parts.append(f"{out} unknown (plan ran out of budget)")
        return f"multiples of {self.multiple} below {answer:,}: " + ", ".join(parts)


def with_every_pp(
    space: SearchSpace, layers: int, top: int, max_interleave: int | None, slots: bool
) -> SearchSpace:
    """A free-count space with pp over every value up to min(layers, ``top``) that has a stage
    layout, as plan's space at a fixed count has (its pp: the count's divisors up to the
    layers, uneven layouts included), not only the divisors of the layers that
    build_search_space gives a free count (least cost missed uneven layouts: 3.72 against
    plan's 2.79 USD on a 5-layer model, 16 GPUs, pp 2 with 3,2 blocks). The layouts follow as
    build_search_space makes them (default stage skew; with ``slots``, Megatron's embedding and
    loss slots and their interleaves up to ``max_interleave``); partial recompute's domain is
    unchanged (pp = 1 already holds the most blocks a stage can)."""
    pps = {p for p in range(1, min(layers, top) + 1) if stage_layouts(layers, p)}
    pps |= set(space.domains["pp"])  # a pinned pp stays
    pp_values = tuple(sorted(pps))
    interleaves = space.domains["interleave"]
    if slots:
        interleaves = with_slot_interleaves(
            interleaves, layers, pp_values, max_interleave, DEFAULT_MAX_STAGE_SKEW
        )
    layouts = searched_layouts(
        layers, pp_values, interleaves if slots else (), DEFAULT_MAX_STAGE_SKEW
    )
    domains = {
        **space.domains,
        "pp": pp_values,
        "interleave": interleaves,
        "layout": tuple(range(len(layouts))),
    }
    return replace(space, domains=domains, layouts=layouts)


@dataclass
class FewestGpus(HardwareQuery):
    """The fewest GPUs that meet the goal (min-hardware's ``gpus``)."""

    refutations: Refutations | None = None
    """How the query ruled out the counts it searched (run)."""

    def domain(self) -> str:
        searched = _counts_searched(self)
        found = self.refutations
        if found is not None and found.stopped_at is not None:
            searched += f"; stopped at {found.stopped_at:,} after {found.plans} plans"
        return searched

    def pinned_or(self, knob: str, values: tuple[int, ...]) -> tuple[int, ...]:
        """The knob's pinned value, or ``values`` where it is not pinned."""
        return (self.pins[knob],) if knob in self.pins else values

    def may_factor(self, count: int, tcd: frozenset[int]) -> bool:
        """A necessary condition of ``factorable``, cheap: some pp of 1 .. layers and some
        product tp·cp·dp in ``tcd`` (over the free space's domains, which hold every fixed
        count's) multiply to ``count``."""
        pps = self.pinned_or("pp", tuple(range(1, self.model.layers + 1)))
        return any(count % p == 0 and count // p in tcd for p in pps)

    def factorable(self, count: int) -> bool:
        """Whether some tp·cp·pp·dp of plan's space at ``count`` GPUs (pinned values only,
        where pinned) multiplies to ``count``."""
        space = build_search_space(
            self.model, self.system, self.job, count, self.pins, **self.limits
        )
        domains = {
            knob: self.pinned_or(knob, space.domains[knob]) for knob in ("tp", "cp", "pp", "dp")
        }
        return any(
            count % (t * c * p) == 0 and count // (t * c * p) in domains["dp"]
            for t in domains["tp"]
            for c in domains["cp"]
            for p in domains["pp"]
        )

    def run(self) -> tuple:
        """The fewest GPUs (a multiple of the node size) at which ``plan`` meets the goal.

        Feasibility is not monotone in the GPU count (dp must divide the batch, tp·cp·pp·dp
        must multiply to the count, and more GPUs can be slower), so no bisection: the
        candidates are the node multiples from a proven lower bound (gpu_floor) up, in
        increasing order, each refuted or planned. A count is refuted when no tp·cp·pp·dp of
        plan's own space multiplies to it (``factorable``), or when plan, over that same space
        with the goal as a constraint, proves that no strategy meets the goal there (status
        infeasible). The first count where plan finds a strategy is the answer: proven minimal
        when every smaller candidate was refuted. A candidate whose plan ran out of budget is
        unknown: the answer is then the least found, not proven (Refutations.unrefuted). The
        search stops after GPU_CANDIDATE_PLANS plans or at the time limit, and answers unknown
        if it found no count by then."""
        multiple = self.system.gpus_per_node
        top = self.gpu_bound()
        free = self.free_space(top)
        floor = gpu_floor(self.ctx, free, self.loosest_target())
        tp, cp, dp = (self.pinned_or(k, free.domains[k]) for k in ("tp", "cp", "dp"))
        tcd = frozenset(t * c * d for t in tp for c in cp for d in dp)
        if floor is None:  # the goal's MFU is above what compute alone reaches
            return self.no_count(top, tcd)
        found = self.refutations = Refutations(floor=floor, multiple=multiple)
        below: Plan | None = None
        for count in range(max(1, math.ceil(floor / multiple)) * multiple, top + 1, multiple):
            if not (self.may_factor(count, tcd) and self.factorable(count)):
                found.unfactorable += 1
                below = None
                continue
            if found.plans >= GPU_CANDIDATE_PLANS or self.budget.exhausted():
                found.stopped_at = count
                return ("unknown", None, None)
            result = self.plan_at(gpus=count, cap_units=GPU_COUNT_WORK_UNITS)
            found.plans += 1
            if result.strategy is not None and self.meets_deadline(result):
                return self.gpu_answer(count, result, below)
            if result.strategy is not None:  # met the bound g⁺(N), not its own goodput
                found.short_of_deadline.append(count)
                found.unrefuted.append(count)
                below = None
                continue
            if result.status != "infeasible":
                found.unrefuted.append(count)
            below = result
        if found.unrefuted:
            return ("unknown", None, None)
        return self.no_count(top, tcd)

    def no_count(self, top: int, tcd: frozenset[int]) -> tuple:
        """No GPU count meets the goal: plan's conflict (not its fixes, which would search the
        GPU counts again) at the largest count of the domain that a tp·cp·pp·dp can make,
        found within GPU_CANDIDATE_PLANS node multiples of the top (else the top itself)."""
        multiple = self.system.gpus_per_node
        tops = range(top // multiple * multiple, multiple - 1, -multiple)
        count = next(
            (
                n
                for n in itertools.islice(tops, GPU_CANDIDATE_PLANS)
                if self.may_factor(n, tcd) and self.factorable(n)
            ),
            top,
        )
        return self.infeasible(f"{count:,} GPUs", diagnose="conflict", gpus=count)

    def gpu_answer(self, count: int, result: Plan, below: Plan | None) -> tuple:
        """The answer at ``count`` GPUs, with the evidence one node below it: plan's conflict
        there when plan refuted it, else how it was refuted (Refutations.describe)."""
        below_count = count - self.system.gpus_per_node
        if below is not None and below.status == "infeasible":
            below = self.plan_at(gpus=below_count, diagnose="conflict")
        proven = not self.refutations.unrefuted
        status, minimum, _ = self.answer(
            count, proven, result, below_count if below_count > 0 else None, below
        )
        if minimum is not None:
            minimum.evidence = self.refutations.describe(count)
            minimum.unrefuted = list(self.refutations.unrefuted)
            if below is None and below_count > 0:
                minimum.below_status = "infeasible"
        return (status, minimum, None)


class LeastCost(HardwareQuery):
    """The least cost that meets the goal (min-hardware's ``cost``)."""

    def domain(self) -> str:
        return _counts_searched(self)

    def run(self) -> tuple:
        """GPUs × step time minimised in one CP-SAT model with the GPU count free, over every
        pp a fixed count's plan searches (with_every_pp). A deadline in days enters the model
        failure-free (its step bound at goodput 1, the loosest any count can have); the
        answer's plan is then made at its count with the bound scaled by the goodput's upper
        bound there, and is proven only if it also meets the deadline at its own goodput. The
        objective does not divide by the goodput (which falls with the count): the cost with
        failures is reported (training.effective_cost_usd), not minimised."""
        bound = self.gpu_bound()
        space = with_every_pp(
            self.free_space(bound),
            self.model.layers,
            bound,
            self.limits["max_interleave"],
            slots=not self.ctx.calculon,
        )
        built = build_plan_model(
            self.ctx, space, target=self.loosest_target(), exact_exposure=False
        )
        count = built.variables.gpu_count()
        product = built.variables.new_int(
            "gpu_steps", built.variables.ub(count) * built.variables.ub(built.steps.step)
        )
        built.model.AddMultiplicationEquality(product, [count, built.steps.step])
        built.model.Minimize(product)
        # the LP phase after propagation: the product objective's bound can need it (the
        # tests' small least-cost problem ran its 60 units unproven without it once NCCL's
        # base latency and per-pair channels entered the tables, and is proven in 0.4 with it)
        solved = solve_within(built, self.budget, lp_fallback=True)
        solver, status = solved.solver, solved.status
        if status not in SOLVED:
            if status == cp_model.INFEASIBLE:
                return self.infeasible(f"{bound:,} GPUs", gpus=bound)
            return ("unknown", None, None)
        result = self.plan_at(gpus=decode(built, solver).gpus)
        if result.estimate is None:  # the budget ran out before the count's plan
            return ("unknown", None, None)
        value = self._cost(result)
        proven = status == cp_model.OPTIMAL and result.status == "optimal"
        return self.answer(value, proven, result, None, None)

    def _cost(self, result: Plan) -> float:
        """Dollars to train the job's token budget (or one step, without a budget)."""
        estimate = result.estimate
        steps = (
            self.job.train_tokens / (self.job.global_batch * self.ctx.seq_len)
            if self.job.train_tokens
            else 1.0
        )
        return steps * estimate.step_time_s * result.strategy.gpus / 3600 * self.system.gpu_hour_usd


def _counts_searched(query: HardwareQuery) -> str:
    """The GPU counts a query over the count searches, in words."""
    return (
        f"GPU counts that are multiples of {query.system.gpus_per_node}, up to "
        f"{query.gpu_bound():,}"
    )
