"""Minimum-hardware queries: the least hardware that meets a goal, proven minimal.

The fewest GPUs are searched count by count, each count planned by ``plan`` itself (so over
exactly plan's space: its stage layouts, cp, ep, offload shares, partial recompute and caps),
from a lower bound that the cost model proves (_Query.fewest_gpus, gpu_floor). Every other
quantity is a decision variable of one CP-SAT model, with every cost term that depends on it
tabulated with it (DESIGN.md §5):

- ``hbm`` / ``offload-capacity``: the memory a strategy needs per GPU, a variable bounded by
  the fit family, which the query drops and minimises instead (reported on a 0.1 GiB / 1 GiB
  grid);
- ``offload-bandwidth`` / ``scale-out-bandwidth``: a one-hot over a geometric grid of bandwidths
  (the offload, DP/PP and optimizer tables get one more axis), minimised by grid index;
- ``cost``: GPUs × step time (GPU-hours per step, times the system's price), with the GPU count
  free (tp·cp·pp·dp, whole nodes, up to the system's maximum or ``max_gpus``).

Goals: a maximum step time, a minimum MFU, a token budget by a deadline (a step-time bound), or
just "fits". The answer comes with the strategy that achieves it and the evidence of minimality:
for the fewest GPUs, how every smaller node multiple was refuted (Refutations); for a capacity
or a bandwidth, plan's proof that one grid step below is infeasible (more of either never hurts
a strategy, so no lower step works either); for the cost, the solver's proof. Every solve of a
query shares one budget of deterministic work (and, if set, wall-clock time): the same input
gives the same answer under any load, and an answer a limit cut short is not called proven.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints import build_plan_model
from constraints.tables import FLOOR_MARGIN, with_bandwidth
from constraints.target import PerformanceTarget
from planner.cost.compute import block_times, lm_head_time_s
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.estimate import Estimate
from planner.cost.flops import model_flops_per_step
from planner.cost.memory import memory_floor_gpus
from planner.errors import InputError
from planner.queries.diagnosis import Diagnosis
from planner.queries.evaluate import as_model, as_system, evaluate
from planner.queries.plan import Plan, check_limits, plan
from planner.queries.solving import SOLVED, Budget, StoppedBy, decode, solve_within
from planner.space.search_space import SearchSpace, build_search_space, stage_layouts
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec
from planner.specs import limits as lim
from planner.specs.quantities import DEFAULT_MAX_STAGE_SKEW, QUANTITIES

Quantity = Literal[
    "gpus", "hbm", "offload-capacity", "offload-bandwidth", "scale-out-bandwidth", "cost"
]
HBM_STEP_GIB = 0.1
OFFLOAD_STEP_GIB = 1.0
BANDWIDTH_STEPS_PER_DOUBLING = 8
"""Bandwidth grids are geometric, 8 steps per doubling (9 % apart)."""


class Minimum(BaseModel):
    quantity: str
    value: int | float
    """A count (GPUs) is an int, in JSON too; capacities, bandwidths and dollars are floats."""
    unit: str
    proven: bool
    """CP-SAT proved no smaller value in the domain admits a strategy."""
    strategy: Strategy
    estimate: Estimate
    below_value: int | float | None
    """One grid step below the minimum (None when the minimum is the domain's smallest)."""
    below_status: str | None
    below_diagnosis: Diagnosis | None
    evidence: str | None = None
    """How every smaller value was ruled out, in words (fewest GPUs: Refutations.describe)."""
    unrefuted: list[int] = []
    """Smaller GPU counts whose plan ran out of budget: neither found nor refuted, so the
    minimum is not proven."""


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
    cp, micro-batch, sequence parallelism and ep: the product of at most a few hundred values."""
    domains = space.domains
    tp, cp, mb, sp, ep = np.meshgrid(
        *(
            np.asarray(domains[knob], dtype=float)
            for knob in ("tp", "cp", "micro_batch", "sequence_parallel", "ep")
        ),
        indexing="ij",
    )
    times = block_times(ctx, tp, mb, 0, sp, cp, ep)
    per_micro_batch_s = ctx.model.layers * (times.forward_s + times.backward_s)
    per_micro_batch_s = per_micro_batch_s + lm_head_time_s(ctx, tp, mb, cp)
    return float(np.min(ctx.job.global_batch * tp * cp * per_micro_batch_s / mb))


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

    def describe(self, answer: int) -> str:
        """The evidence for ``answer`` in words."""
        first = max(1, math.ceil(self.floor / self.multiple)) * self.multiple
        parts = [f"below {first:,} by the memory and compute floor ({self.floor:,.0f} GPUs)"]
        if self.unfactorable:
            parts.append(f"{self.unfactorable} with no tp·cp·pp·dp of that product")
        refuted = self.plans - 1 - len(self.unrefuted)
        parts.append(f"{refuted} by plan (infeasible under the goal)")
        if self.unrefuted:
            parts.append(f"{len(self.unrefuted)} unknown (plan ran out of budget)")
        return f"multiples of {self.multiple} below {answer:,}: " + ", ".join(parts)


class Unreachable(BaseModel):
    """The goal rules every strategy out even at the top of the searched domain: what the best
    plan there (the fastest, hence the highest MFU) reaches without it."""

    goal: str
    at: str
    """The hardware the best plan was found on: the top of the searched domain."""
    best_step_time_s: float
    best_mfu: float
    strategy: Strategy


class MinHardwareResult(BaseModel):
    status: Literal["optimal", "feasible", "infeasible", "unknown"]
    minimum: Minimum | None
    diagnosis: Diagnosis | None
    unreachable: Unreachable | None = None
    """Set when the status is infeasible because of the goal (see Unreachable)."""
    wall_time_s: float
    work_units: float = 0.0
    """CP-SAT deterministic work the query's solves spent."""
    stopped_by: StoppedBy | None = None
    """The limit that had run out when the query ended (None: neither)."""
    goal: str
    domain: str
    """The hardware values searched, in words."""


def bandwidth_grid(low_gbps: float, high_gbps: float) -> tuple[float, ...]:
    """Geometric grid from ``low`` to at least ``high``, BANDWIDTH_STEPS_PER_DOUBLING per 2×."""
    steps = math.ceil(math.log2(high_gbps / low_gbps) * BANDWIDTH_STEPS_PER_DOUBLING)
    return tuple(
        float(f"{low_gbps * 2 ** (i / BANDWIDTH_STEPS_PER_DOUBLING):.4g}") for i in range(steps + 1)
    )


def check_bandwidth_range(low_gbps: float, high_gbps: float) -> None:
    """Refuse a bandwidth grid's range unless limits.MIN_BANDWIDTH_GBPS ≤ LOW < HIGH ≤
    min(limits.MAX_BANDWIDTH_GBPS, LOW · limits.MAX_BANDWIDTH_SPAN), in one line."""
    high_allowed = min(lim.MAX_BANDWIDTH_GBPS, low_gbps * lim.MAX_BANDWIDTH_SPAN)
    if not (lim.MIN_BANDWIDTH_GBPS <= low_gbps < high_gbps <= high_allowed):
        raise InputError(
            f"--bandwidth-range = {low_gbps:g} {high_gbps:g}: allowed {lim.MIN_BANDWIDTH_GBPS:g} "
            f"≤ LOW < HIGH ≤ min({lim.MAX_BANDWIDTH_GBPS:g}, {lim.MAX_BANDWIDTH_SPAN:g} × LOW) GB/s"
        )


def with_every_pp(space: SearchSpace, layers: int, top: int) -> SearchSpace:
    """A free-count space with pp over every value up to min(layers, ``top``) that has a stage
    layout, as plan's space at a fixed count has (its pp: the count's divisors up to the
    layers, uneven layouts included), not only the divisors of the layers that
    build_search_space gives a free count (least cost missed uneven layouts: 3.72 against
    plan's 2.79 USD on a 5-layer model, 16 GPUs, pp 2 with 3,2 blocks). The layouts follow as
    build_search_space makes them (default stage skew); partial recompute's domain is unchanged
    (pp = 1 already holds the most blocks a stage can)."""
    pps = {p for p in range(1, min(layers, top) + 1) if stage_layouts(layers, p)}
    pps |= set(space.domains["pp"])  # a pinned pp stays
    layouts = tuple(
        layout for p in sorted(pps) for layout in stage_layouts(layers, p, DEFAULT_MAX_STAGE_SKEW)
    )
    domains = {
        **space.domains,
        "pp": tuple(sorted(pps)),
        "layout": tuple(range(len(layouts))),
    }
    return replace(space, domains=domains, layouts=layouts)


def with_bandwidth_levels(
    space: SearchSpace, knob: str, grid_gbps: tuple[float, ...]
) -> SearchSpace:
    """The space with bandwidth ``knob`` (offload_bw or scale_out_bw) a decision over the
    levels of ``grid_gbps``, its values the levels' positions."""
    domains = {**space.domains, knob: tuple(range(len(grid_gbps)))}
    return replace(space, domains=domains, hardware={knob: grid_gbps})


def min_hardware(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    quantity: str,
    gpus: int | None = None,
    target: PerformanceTarget | None = None,
    pins: dict[str, int] | None = None,
    max_gpus: int | None = None,
    bandwidth_range_gbps: tuple[float, float] | None = None,
    time_limit_s: float | None = None,
    work_limit: float | None = lim.DEFAULT_WORK_UNITS,
    max_micro_batch: int = 64,
    max_interleave: int | None = None,
    max_cp: int | None = None,
) -> MinHardwareResult:
    """The least ``quantity`` that meets ``target`` (see the module docstring), within
    ``work_limit`` deterministic units and, if set, ``time_limit_s`` seconds, shared by every
    solve of the query (MinHardwareResult.work_units says what it spent)."""
    started = time.perf_counter()
    check_limits(time_limit_s, work_limit)
    model_spec, system_spec = as_model(model), as_system(system)
    if quantity not in QUANTITIES:
        raise InputError(f"--minimize {quantity!r}: allowed: {', '.join(QUANTITIES)}")
    target = target or PerformanceTarget()
    pins = dict(pins or {})
    limits = {
        "max_micro_batch": max_micro_batch,
        "max_interleave": max_interleave,
        "max_cp": max_cp,
    }
    if bandwidth_range_gbps is not None:
        check_bandwidth_range(*bandwidth_range_gbps)
    query = _Query(
        model_spec,
        system_spec,
        job,
        quantity,
        gpus,
        target,
        pins,
        limits,
        Budget.of(work_limit, time_limit_s),
        max_gpus,
        bandwidth_range_gbps,
    )
    found = query.run()
    return MinHardwareResult(
        domain=query.domain(),
        status=found[0],
        minimum=found[1],
        diagnosis=found[2],
        unreachable=query.unreachable,
        wall_time_s=time.perf_counter() - started,
        work_units=query.budget.spent_units,
        stopped_by=query.budget.exhausted(),
        goal=target.describe() if _has_goal(target) else "fits",
    )


def _has_goal(target: PerformanceTarget) -> bool:
    return target.max_step_s is not None or target.min_mfu is not None


@dataclass
class _Query:
    """One minimum-hardware question and the plans it makes to answer it."""

    model: ModelSpec
    system: SystemSpec
    job: JobSpec
    quantity: str
    gpus: int | None
    target: PerformanceTarget
    pins: dict[str, int]
    limits: dict[str, int | None]
    budget: Budget
    """What the query's solves may still spend, shared by all of them."""
    max_gpus: int | None
    bandwidth_range: tuple[float, float] | None
    unreachable: Unreachable | None = None
    """Set by ``infeasible`` when the goal is what no hardware in the domain meets."""
    refutations: Refutations | None = None
    """How a fewest-GPUs query ruled out the counts it searched (fewest_gpus)."""

    def __post_init__(self) -> None:
        model, system, quantity, gpus = self.model, self.system, self.quantity, self.gpus
        self.ctx = CostContext(model, system, self.job)
        if quantity not in ("gpus", "cost") and gpus is None:
            raise InputError(f"--minimize {quantity} needs --gpus (the GPU count to size for)")
        if quantity in ("offload-capacity", "offload-bandwidth") and not system.offload_tiers:
            raise InputError(
                f"--minimize {quantity}: system {system.name!r} has no offload "
                "tier (use one that has, e.g. h100-offload-512g)"
            )
        if quantity == "cost" and system.gpu_hour_usd is None:
            raise InputError(f"--minimize cost: system {system.name!r} has no gpu_hour_usd")

    def gpu_bound(self) -> int:
        """The largest GPU count searched: --max-gpus, else the system's, else the most any
        strategy can use (scale-up domain × layers × batch), at most limits.MAX_GPUS."""
        system = self.system
        return min(
            self.max_gpus
            or system.max_gpus
            or system.scale_up_gpus * self.model.layers * self.job.global_batch,
            lim.MAX_GPUS,
        )

    def domain(self) -> str:
        if self.quantity in ("gpus", "cost"):
            searched = (
                f"GPU counts that are multiples of {self.system.gpus_per_node}, up to "
                f"{self.gpu_bound():,}"
            )
            found = self.refutations
            if found is not None and found.stopped_at is not None:
                searched += f"; stopped at {found.stopped_at:,} after {found.plans} plans"
            return searched
        if self.quantity in ("hbm", "offload-capacity"):
            step = HBM_STEP_GIB if self.quantity == "hbm" else OFFLOAD_STEP_GIB
            return f"capacities in steps of {step:g} GiB, up to 64 TiB per GPU"
        return "a geometric bandwidth grid, 8 steps per doubling"

    def plan_at(
        self,
        system: SystemSpec | None = None,
        gpus: int | None = None,
        diagnose: bool | str = False,
        cap_units: float | None = None,
    ) -> Plan:
        """plan with the query's goal, pins and limits, within what is left of its budget
        and at most ``cap_units`` work units (status unknown, without solving, when nothing
        is left), charged to it."""
        if self.budget.exhausted():
            return Plan(status="unknown", strategy=None, estimate=None, solver=None)
        work_limit = self.budget.units_left()
        if cap_units is not None:
            work_limit = cap_units if work_limit is None else min(work_limit, cap_units)
        result = plan(
            self.model,
            system or self.system,
            self.job,
            gpus or self.gpus,
            pins=self.pins,
            target=self.target,
            time_limit_s=self.budget.seconds_left(),
            work_limit=work_limit,
            diagnose=diagnose,
            **self.limits,
        )
        self.budget.charge(result.solver.work_units if result.solver else 0.0)
        return result

    def run(self):
        if self.quantity == "gpus":
            return self.fewest_gpus()
        if self.quantity == "cost":
            return self.least_cost()
        if self.quantity in ("hbm", "offload-capacity"):
            return self.memory()
        return self.bandwidth()

    # -- answers -----------------------------------------------------------------------------
    def answer(
        self,
        value: float,
        proven: bool,
        result: Plan,
        below_value: float | None,
        below: Plan | None,
    ) -> tuple:
        if result.strategy is None:
            return ("unknown", None, result.diagnosis)
        minimum = Minimum(
            quantity=self.quantity,
            value=value,
            unit=QUANTITIES[self.quantity],
            proven=proven,
            strategy=result.strategy,
            estimate=result.estimate,
            below_value=below_value,
            below_status=below.status if below is not None else None,
            below_diagnosis=below.diagnosis if below is not None else None,
        )
        return ("optimal" if proven else "feasible", minimum, None)

    def infeasible(self, top: str, diagnose: bool | str = True, **changes) -> tuple:
        """No value in the domain works: the diagnosis of the problem at the domain's top
        (``top``, in words; ``diagnose`` as plan's), and what the goal's best plan there
        reaches when the goal is among the conflicting constraints."""
        system = changes.get("system", self.system)
        result = self.plan_at(
            system=system,
            gpus=changes.get("gpus", self.gpus or self.system.max_gpus or 1),
            diagnose=diagnose,
        )
        self.unreachable = self.best_without_goal(result.diagnosis, system, top)
        return ("infeasible", None, result.diagnosis)

    def best_without_goal(
        self, diagnosis: Diagnosis | None, system: SystemSpec, top: str
    ) -> Unreachable | None:
        """The diagnosis's best plan without the goal, when the goal is one of its conflicts."""
        conflicts = diagnosis.conflicts if diagnosis is not None else []
        best = next((c.strategy for c in conflicts if c.family == "target" and c.strategy), None)
        if best is None:
            return None
        estimate = evaluate(self.model, system, self.job, best)
        return Unreachable(
            goal=self.target.describe(),
            at=f"{top} (the top of the searched domain)",
            best_step_time_s=estimate.step_time_s,
            best_mfu=estimate.mfu,
            strategy=best,
        )

    # -- GPU count ---------------------------------------------------------------------------
    def free_space(self, top: int) -> SearchSpace:
        """The knob domains with the GPU count free, up to ``top``: every fixed count's tp,
        cp, micro-batch and ep domains are inside these (build_search_space)."""
        return build_search_space(
            self.model,
            self.system,
            self.job,
            None,
            self.pins,
            max_gpus=top,
            gpu_multiple=self.system.gpus_per_node,
            **self.limits,
        )

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

    def fewest_gpus(self) -> tuple:
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
        floor = gpu_floor(self.ctx, free, self.target)
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
            if result.strategy is not None:
                return self.gpu_answer(count, result, below)
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

    # -- cost --------------------------------------------------------------------------------
    def least_cost(self) -> tuple:
        """GPUs × step time minimised in one CP-SAT model with the GPU count free, over every
        pp a fixed count's plan searches (with_every_pp)."""
        bound = self.gpu_bound()
        space = with_every_pp(self.free_space(bound), self.model.layers, bound)
        built = build_plan_model(self.ctx, space, target=self.target, exact_exposure=False)
        count = built.variables.gpu_count()
        product = built.variables.new_int(
            "gpu_steps", built.variables.ub(count) * built.variables.ub(built.steps.step)
        )
        built.model.AddMultiplicationEquality(product, [count, built.steps.step])
        built.model.Minimize(product)
        solved = solve_within(built, self.budget, lp_fallback=False)
        solver, status = solved.solver, solved.status
        if status not in SOLVED:
            if status == cp_model.INFEASIBLE:
                return self.infeasible(f"{bound:,} GPUs", gpus=bound)
            return ("unknown", None, None)
        result = self.plan_at(gpus=decode(built, solver).gpus)
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

    # -- memory capacities -------------------------------------------------------------------
    def memory(self) -> tuple:
        family, step = (
            ("hbm", HBM_STEP_GIB) if self.quantity == "hbm" else ("offload1", OFFLOAD_STEP_GIB)
        )
        system = self.system
        if family == "offload1":  # room to find the least, however large
            system = _with_capacity(system, 1, 64 * 1024.0)
        ctx = CostContext(self.model, system, self.job)
        space = build_search_space(
            self.model, system, self.job, self.gpus, self.pins, **self.limits
        )
        built = build_plan_model(
            ctx, space, dropped=frozenset({family}), target=self.target, exact_exposure=False
        )
        need = built.needs.hbm if family == "hbm" else built.needs.offload[0]
        built.model.Minimize(need)
        solved = solve_within(built, self.budget, lp_fallback=False)
        solver, status = solved.solver, solved.status
        if status not in SOLVED:
            if status == cp_model.INFEASIBLE:  # diagnosed with the tier at the domain's top
                tier, what = (0, "HBM") if family == "hbm" else (1, "offload capacity")
                return self.infeasible(
                    f"{lim.MAX_CAPACITY_GIB:g} GiB of {what} per GPU",
                    system=_with_capacity(system, tier, lim.MAX_CAPACITY_GIB),
                )
            return ("unknown", None, None)
        gib = solver.Value(need) * built.needs.unit_bytes / BYTES_PER_GIB
        if family == "hbm":
            gib /= self.ctx.hbm_usable_fraction
        tier = 0 if family == "hbm" else 1
        steps, result, below = self.settle_capacity(
            system, tier, step, math.ceil(gib / step - 1e-9)
        )
        proven = below.status == "infeasible" if below else status == cp_model.OPTIMAL
        return self.answer(
            _on_grid(steps, step),
            proven,
            result,
            _on_grid(steps - 1, step) if below else None,
            below,
        )

    def settle_capacity(
        self, system: SystemSpec, tier: int, step: float, steps: int
    ) -> tuple[int, Plan, Plan | None]:
        """(grid steps, the plan there, the plan one step below) of the least capacity plan
        itself fits at; no plan below the grid's lowest value (0.1 GiB of HBM, 0 GiB of offload).
        The query's need is an upper bound of plan's, not always equal: a need of up to 64 TiB
        takes a coarser memory unit than plan's at the answer (entries round up to 64 KiB
        instead of 1 KiB for 1,000 layers on 1,000 GPUs), so plan can fit one step below it.
        Then the answer steps down, until plan does not fit below."""
        lowest = 1 if tier == 0 else 0
        result = self.plan_at(system=_with_capacity(system, tier, _on_grid(steps, step)))
        while steps > lowest:
            below_system = _with_capacity(system, tier, _on_grid(steps - 1, step))
            below = self.plan_at(system=below_system, diagnose="conflict")
            if below.strategy is None:
                return steps, result, below
            steps, result = steps - 1, below
        return steps, result, None

    # -- bandwidths --------------------------------------------------------------------------
    def bandwidth(self) -> tuple:
        knob = "offload_bw" if self.quantity == "offload-bandwidth" else "scale_out_bw"
        current = (
            self.system.memory_tiers[1].bandwidth_gbps
            if knob == "offload_bw"
            else self.system.network_tiers[-1].bandwidth_gbps
        )
        low, high = self.bandwidth_range or (current / 64, current * 16)
        grid = bandwidth_grid(low, high)
        space = build_search_space(
            self.model, self.system, self.job, self.gpus, self.pins, **self.limits
        )
        built = build_plan_model(
            self.ctx,
            with_bandwidth_levels(space, knob, grid),
            target=self.target,
            exact_exposure=False,
        )
        built.model.Minimize(built.variables.index(knob))
        solved = solve_within(built, self.budget, lp_fallback=False)
        solver, status = solved.solver, solved.status
        if status not in SOLVED:
            top = with_bandwidth(self.system, knob, grid[-1])
            if status == cp_model.INFEASIBLE:
                what = "offload" if knob == "offload_bw" else "scale-out"
                return self.infeasible(f"{grid[-1]:g} GB/s of {what} bandwidth", system=top)
            return ("unknown", None, None)
        level = int(np.argmax([solver.Value(b) for b in built.variables.onehot[knob]]))
        level, result, below = self.settle_bandwidth(knob, grid, level)
        proven = below.status == "infeasible" if below else status == cp_model.OPTIMAL
        return self.answer(grid[level], proven, result, grid[level - 1] if level else None, below)

    def settle_bandwidth(
        self, knob: str, grid: tuple[float, ...], level: int
    ) -> tuple[int, Plan, Plan | None]:
        """(grid level, the plan there, the plan one level below) of the least level plan
        itself meets the goal at, from the query's ``level`` down; no plan below level 0.
        More bandwidth never slows a strategy (every transfer is bytes / bandwidth), so plan
        proving the goal infeasible one level below proves it for every lower level."""
        result = self.plan_at(system=with_bandwidth(self.system, knob, grid[level]))
        while level > 0:
            lower = with_bandwidth(self.system, knob, grid[level - 1])
            below = self.plan_at(system=lower, diagnose="conflict")
            if below.strategy is None:
                return level, result, below
            level, result = level - 1, below
        return level, result, None


def _on_grid(steps: int, step: float) -> float:
    """``steps`` grid steps of ``step`` GiB, without binary-fraction noise (0.30000000000000004)."""
    return round(steps * step, 6)


def _with_capacity(system: SystemSpec, tier: int, gib: float) -> SystemSpec:
    tiers = tuple(
        t.model_copy(update={"capacity_gib": gib}) if i == tier else t
        for i, t in enumerate(system.memory_tiers)
    )
    return system.model_copy(update={"memory_tiers": tiers})


class ParetoPoint(BaseModel):
    first: int | float
    second: int | float
    step_time_s: float
    mfu: float
    strategy: Strategy


SWEEP_POINTS = 6
UNBOUNDED = {
    "hbm": 4096.0,
    "offload-capacity": 65536.0,
    "offload-bandwidth": 10000.0,
    "scale-out-bandwidth": 10000.0,
}
"""Generous values of the minimised quantity while the other one's least value is found."""


def pareto(
    model: ModelSpec | str,
    system: SystemSpec | str,
    job: JobSpec,
    first: str,
    second: str,
    gpus: int | None = None,
    target: PerformanceTarget | None = None,
    time_limit_s: float | None = None,
    work_limit: float | None = lim.DEFAULT_WORK_UNITS,
    **options,
) -> list[ParetoPoint]:
    """The Pareto front of two quantities by the epsilon-constraint method: the second is capped
    at SWEEP_POINTS values on a geometric grid — from its least value (the first set generously,
    UNBOUNDED) to what the first's minimum needs of it — and the first minimised under each cap;
    dominated points are dropped. Every query of the sweep shares one budget of
    ``work_limit`` units and ``time_limit_s`` seconds: once it is spent, the caps not yet
    searched are left out of the front."""
    model_spec, system_spec = as_model(model), as_system(system)
    target = target or PerformanceTarget()
    if second == first:
        raise InputError(f"--sweep {second}: choose a quantity other than --minimize")
    check_limits(time_limit_s, work_limit)
    budget = Budget.of(work_limit, time_limit_s)

    def least(on: SystemSpec, quantity: str, goal: PerformanceTarget) -> Minimum | None:
        """min_hardware within what is left of the sweep's budget (None once it is spent)."""
        if budget.exhausted():
            return None
        result = min_hardware(
            model_spec,
            on,
            job,
            quantity,
            gpus=gpus,
            target=goal,
            time_limit_s=budget.seconds_left(),
            work_limit=budget.units_left(),
            **options,
        )
        budget.charge(result.work_units)
        return result.minimum

    corner = least(system_spec, first, target)
    if corner is None:
        return []
    high = _requirement(corner, second, system_spec)
    if second == "step-time":
        low = corner.estimate.step_time_s
    else:
        roomy = (
            _set_quantity(system_spec, first, UNBOUNDED[first])
            if first in UNBOUNDED
            else system_spec
        )
        fewest = least(roomy, second, target)
        low = fewest.value if fewest is not None else high
    low = max(low, SWEEP_FLOOR.get(second, 0.0))
    high = max(high, low)
    caps = sorted(
        {
            _up_to_4_digits(low * (high / low) ** (i / (SWEEP_POINTS - 1)))
            for i in range(SWEEP_POINTS)
        }
    )
    points: list[ParetoPoint] = []
    for cap in caps:
        capped_system, capped_target = system_spec, target
        if second == "step-time":
            bound = min(cap, target.max_step_s) if target.max_step_s else cap
            capped_target = PerformanceTarget(max_step_s=bound, min_mfu=target.min_mfu)
        else:
            capped_system = _set_quantity(system_spec, second, cap)
        result = least(capped_system, first, capped_target)
        if result is None:
            continue
        points.append(
            ParetoPoint(
                first=result.value,
                second=cap,
                step_time_s=result.estimate.step_time_s,
                mfu=result.estimate.mfu,
                strategy=result.strategy,
            )
        )
    front: list[ParetoPoint] = []
    for point in sorted(points, key=lambda p: (p.second, p.first)):
        if not front or point.first < front[-1].first:
            front.append(point)
    return front


def _up_to_4_digits(value: float) -> float:
    """``value`` rounded up to 4 significant digits: a cap rounded down below the corner's own
    requirement (9.834 s for a step of 9.8345 s) left the corner's answer out of its front."""
    rounded = float(f"{value:.4g}")
    if rounded >= value:
        return rounded
    digit = 10 ** (math.floor(math.log10(value)) - 3)
    return float(f"{rounded + digit:.4g}")


SWEEP_FLOOR = {
    "hbm": 1.0,
    "offload-capacity": 1.0,
    "offload-bandwidth": 1.0,
    "scale-out-bandwidth": 1.0,
}


def _requirement(minimum: Minimum, quantity: str, system: SystemSpec) -> float:
    """How much of ``quantity`` the strategy of a minimum uses (bandwidths: the system's)."""
    memory = minimum.estimate.memory_gib
    if quantity == "hbm":
        return memory["hbm"]["total"] / memory["hbm"]["usable"] * memory["hbm"]["capacity"]
    if quantity == "offload-capacity":
        return max(memory.get("offload_1", {}).get("total", 0.0), 1.0)
    if quantity == "offload-bandwidth":
        return system.memory_tiers[1].bandwidth_gbps
    if quantity == "scale-out-bandwidth":
        return system.network_tiers[-1].bandwidth_gbps
    if quantity == "step-time":
        return minimum.estimate.step_time_s * 2
    return minimum.value


def _set_quantity(system: SystemSpec, quantity: str, value: float) -> SystemSpec:
    if quantity == "hbm":
        return _with_capacity(system, 0, value)
    if quantity == "offload-capacity":
        return _with_capacity(system, 1, value)
    if quantity == "offload-bandwidth":
        return with_bandwidth(system, "offload_bw", value)
    if quantity == "scale-out-bandwidth":
        return with_bandwidth(system, "scale_out_bw", value)
    raise InputError(f"--sweep {quantity}: cannot cap this quantity")
