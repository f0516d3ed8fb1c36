"""One diagnosis's state and the searches both its parts ask for.

A diagnosis (planner.queries.diagnosis) names the conflict (planner.queries.conflicts) and
looks for fixes (planner.queries.relaxations); both quantify with the same two searches, which
live here with the state they share (``Session``): the problem, the budget every solve and
re-plan spends from, whether a limit cut a step short, and the least memory of a tier and the
fewest GPUs, each searched once and remembered.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from constraints import PlanModel, build_plan_model
from constraints.scales import FLOOR_MARGIN
from constraints.target import PerformanceTarget
from constraints.variables import ModelTooLarge
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.memory import memory_floor_gpus
from planner.queries.solving import (
    SOLVED,
    Budget,
    StoppedBy,
    decode,
    minimize_then_fix,
    solve_within,
)
from planner.space.rules import cp_allowed, divisors
from planner.space.search_space import SearchSpace, build_search_space
from planner.specs import JobSpec, Strategy, SystemSpec
from planner.specs import limits as lim

CHECK_WORK_UNITS = 20.0
"""Work cap of one step of a diagnosis (a conflict check, a least-memory solve, a re-plan), in
CP-SAT deterministic units, inside what is left of the query's budget."""
FEWEST_GPUS_WORK_UNITS = 10.0
"""Work cap of the whole fewest-GPUs search (all its plans); its answer is then the best found,
marked unproven (and none found is not a proof that none fits)."""
FEWEST_GPUS_SCAN = 6
"""Candidate GPU counts the fewest-GPUs search plans one by one from the smallest (each
refuted is part of the proof of the minimum) before it asks the free-count finder. A plan at
a count takes 0.1-0.5 s, mostly building its model, which no work limit counts: this cap keeps
the wait short where the answer is far (mt-128t on 64 A100s: thousands of counts to 61,440)."""
FEWEST_GPUS_PROOF_SCAN = 16
"""Where the finder's count is among the first this many candidates, the ones between the
scan and it are planned too, which proves it least (or finds a smaller one): llama3-405b on 16
H100s, batch 256: 96 GPUs, the 11th candidate."""


@dataclass(frozen=True)
class Least:
    """A least quantity a diagnosis searched for: the value found and its strategy (None: none
    found); whether the value is proven least or, with none found, whether it is proven that
    none exists; the plan that verified it, if one was made."""

    value: float | None
    strategy: Strategy | None
    proven: bool
    result: object = None


Planner = Callable[..., object]
"""planner.queries.plan.plan, passed in to verify relaxations (it calls planner.queries.diagnosis
when infeasible)."""


@dataclass
class Session:
    """One diagnosis: the problem, and the models and plans it builds along the way."""

    ctx: CostContext
    gpus: int
    pins: dict[str, int]
    limits: dict[str, int | None]
    target: PerformanceTarget | None
    plan_fn: Planner
    fixes: bool = True
    budget: Budget = field(default_factory=Budget)
    """What the diagnosis may spend; it answers with what it has when this runs out."""
    stopped_by: StoppedBy | None = None
    """Set once a step was cut short or skipped by a limit."""
    incomplete: bool = False
    """Set once a step was cut short, skipped, or done over a smaller space (a model too
    large to build whole)."""
    fewest_cache: list[Least] = field(default_factory=list)
    least_cache: dict[tuple[str, str | None], Least] = field(default_factory=dict)

    def step(self, cap_units: float) -> Budget:
        """The budget of one step: at most ``cap_units`` of what is left."""
        return self.budget.within(cap_units)

    def cut_short(self, stopped_by: StoppedBy | None) -> None:
        """Record that a limit left a step unproven (the diagnosis is then incomplete)."""
        self.stopped_by = self.stopped_by or stopped_by or "work limit"
        self.incomplete = True

    def out_of_time(self) -> bool:
        """Whether the budget has run out (the diagnosis is then incomplete)."""
        exhausted = self.budget.exhausted()
        if exhausted:
            self.cut_short(exhausted)
        return exhausted is not None

    def solve(self, built: PlanModel, cap_units: float, **options) -> tuple:
        """Solve within a step's budget; (solver, status), a limit that stopped it recorded."""
        solved = solve_within(built, self.step(cap_units), **options)
        if solved.stopped_by is not None:
            self.cut_short(solved.stopped_by)
        return solved.solver, solved.status

    def space(
        self, system: SystemSpec | None = None, gpus: int | None = -1, prune: bool = True, **extra
    ):
        system = system or self.ctx.system
        count = self.gpus if gpus == -1 else gpus
        return build_search_space(
            self.ctx.model,
            system,
            self.ctx.job,
            count,
            self.pins,
            prune=prune,
            **self.limits,
            **extra,
        )

    def build(self, space, ctx: CostContext | None = None, **options) -> PlanModel:
        return build_plan_model(ctx or self.ctx, space, target=self.target, **options)

    def replan(
        self,
        system: SystemSpec | None = None,
        job: JobSpec | None = None,
        gpus: int | None = None,
        pins: dict[str, int] | None = None,
    ):
        return self.checked_plan(
            system=system or self.ctx.system,
            job=job or self.ctx.job,
            gpus=gpus or self.gpus,
            pins=self.pins if pins is None else pins,
        )

    def checked_plan(self, target_free: bool = False, budget: Budget | None = None, **problem):
        """A plan (``plan_fn``) of this problem with ``problem``'s changes, within a step's
        budget inside ``budget`` (default: the diagnosis's), or None when none is left."""
        budget = budget or self.budget
        exhausted = budget.exhausted()
        if exhausted:
            self.cut_short(exhausted)
            return None
        step = budget.within(CHECK_WORK_UNITS)
        plan_fn = functools.partial(self.plan_fn, target=None) if target_free else self.plan_fn
        seconds_left = step.seconds_left()
        result = plan_fn(
            self.ctx.model,
            problem.get("system", self.ctx.system),
            problem.get("job", self.ctx.job),
            problem.get("gpus", self.gpus),
            pins=problem.get("pins", self.pins),
            work_limit=step.units_left(),
            time_limit_s=seconds_left if seconds_left is None else max(seconds_left, 1e-3),
            **self.limits,
        )
        if result.solver is not None:
            step.charge(result.solver.work_units)
            if result.solver.stopped_by is not None:
                self.cut_short(result.solver.stopped_by)
        return result

    def least_memory(self, family: str, system: SystemSpec | None = None) -> Least:
        """The least HBM (usable) or offload-tier capacity any strategy needs, in GiB per GPU,
        with that tier's fit family dropped, and its fastest strategy (solving.
        minimize_then_fix); remembered per family for the problem's own system (the conflict
        and the fix ask the same question)."""
        key = (family, None if system is None else system.model_dump_json())
        if key not in self.least_cache:
            self.least_cache[key] = self.solve_least_memory(family, system)
        return self.least_cache[key]

    def solve_least_memory(self, family: str, system: SystemSpec | None) -> Least:
        """least_memory, solved."""
        ctx = CostContext(self.ctx.model, system, self.ctx.job) if system else self.ctx
        try:
            built = self.build(self.space(system=system), ctx=ctx, dropped=frozenset({family}))
        except ModelTooLarge:
            self.incomplete = True
            return Least(None, None, proven=False)
        need = (
            built.needs.hbm
            if family == "hbm"
            else built.needs.offload[int(family.removeprefix("offload")) - 1]
        )
        least, proven, solved = minimize_then_fix(built, need, self.step(CHECK_WORK_UNITS))
        if solved.stopped_by is not None:
            self.cut_short(solved.stopped_by)
        if least is None or solved.status not in SOLVED:
            return Least(None, None, proven=solved.status == cp_model.INFEASIBLE)
        gib = least * built.needs.unit_bytes / BYTES_PER_GIB
        return Least(gib, decode(built, solved.solver), proven=proven)

    def fewest_gpus(self) -> Least:
        """The fewest GPUs that admit a strategy, within FEWEST_GPUS_WORK_UNITS. Candidate
        counts (``gpu_counts``) are planned one by one from the smallest, FEWEST_GPUS_SCAN of
        them: the first that plans is the answer, verified by its plan and proven least when
        every smaller candidate was proven infeasible. Past those, one model with the GPU count
        a decision variable (``solve_fewest_free``) finds a count, which a plan verifies: the
        fewest found, proven least only where every candidate below it was planned and refuted
        (the scan goes on to it when it is among the first FEWEST_GPUS_PROOF_SCAN); the
        finder's space is narrower than a plan's (pp divides the layers there, and
        ``_finder_space``), so its minimum is no proof. None found is proven only when every
        candidate was refuted.

        Galloping over the counts instead (doubling, then bisecting; every probe a plan) finds
        no fit for mt-72t on 16,384 offload H100s (13,312 fits, 16,384 does not; 3·2^k counts
        none) and 245,760 where 61,440 fits for mt-128t on 64 A100s: fitting is far from
        monotone in the count, while the free-count model finds both."""
        if not self.fewest_cache:
            self.fewest_cache.append(self.search_fewest_gpus())
        return self.fewest_cache[0]

    def gpu_range(self) -> tuple[int, int]:
        """(most, multiple): the GPU counts a fewest-GPUs search covers are multiples of a
        node where the problem's count is (else of 1), up to the system's maximum (else scale-up
        domain × layers × global batch, within planner.specs.limits)."""
        ctx, system = self.ctx, self.ctx.system
        bound = system.max_gpus or min(
            system.scale_up_gpus * ctx.model.layers * ctx.job.global_batch, lim.MAX_GPUS
        )
        return bound, system.gpus_per_node if self.gpus % system.gpus_per_node == 0 else 1

    def gpu_counts(self) -> list[int]:
        """Every GPU count any plan could factor as tp·cp·pp·dp, ascending, the problem's own
        left out: tp dividing the heads evenly (ModelSpec.splits_over), cp splitting the
        sequence (rules.cp_allowed), pp up to the layers (stage layouts need not be even), dp
        dividing the global batch; within ``gpu_range``, from the memory floor up (fewer GPUs
        cannot hold the model's state in all their tiers together: cost.memory.
        memory_floor_gpus, lowered by constraints.scales.FLOOR_MARGIN), so each count left out
        is refuted."""
        model, job = self.ctx.model, self.ctx.job
        bound, multiple = self.gpu_range()
        floor = memory_floor_gpus(self.ctx) * (1 - FLOOR_MARGIN)
        tps = [t for t in divisors(model.heads) if model.splits_over(t)]
        seq_len = job.seq_len_for(model)
        cps = [c for c in divisors(seq_len) if cp_allowed(c, seq_len)]
        dps = divisors(job.global_batch)
        counts = {
            t * c * p * d
            for t in tps
            for c in cps
            for d in dps
            if t * c * d <= bound
            for p in range(1, min(model.layers, bound // (t * c * d)) + 1)
        }
        return sorted(n for n in counts if n % multiple == 0 and n != self.gpus and n >= floor)

    def search_fewest_gpus(self) -> Least:
        """fewest_gpus, searched."""
        budget = self.step(FEWEST_GPUS_WORK_UNITS)
        counts = self.gpu_counts()
        refuted: set[int] = set()
        """Indices of the counts proven infeasible."""
        fits: dict[int, object] = {}
        """Plans that found a strategy, by count index."""

        def fit(index: int) -> bool | None:
            """Whether counts[index] plans (None: no budget left to plan it)."""
            result = self.checked_plan(gpus=counts[index], budget=budget)
            if result is None:
                return None
            if result.strategy is not None:
                fits[index] = result
            elif result.status == "infeasible":
                refuted.add(index)
            return result.strategy is not None

        def scan(stop: int) -> bool:
            """Plan counts[:stop] in order, up to the first that fits or the budget's end;
            whether the search is over."""
            for index in range(min(stop, len(counts))):
                if index not in refuted and fit(index) is not False:
                    return True
            return stop >= len(counts)

        if scan(FEWEST_GPUS_SCAN):
            return _fewest(counts, refuted, fits)
        least = self.solve_fewest_free(budget)
        if least in counts[:FEWEST_GPUS_PROOF_SCAN]:
            scan(counts.index(least) + 1)
        elif least in counts:
            fit(counts.index(least))
        return _fewest(counts, refuted, fits)

    def solve_fewest_free(self, budget: Budget) -> int | None:
        """The fewest GPUs of one model whose GPU count tp·cp·pp·dp is a decision variable
        (within ``gpu_range``), or None if it found none within ``budget``: a finder, whose
        count a plan then verifies, so its space may be narrowed to what fits best (``finder
        space``). Its tables vary along dp too: mt-128t on 64 A100s, 0.3 units of search but
        5 s of loading its 496k table entries over the whole space."""
        bound, multiple = self.gpu_range()
        space = self.space(gpus=None, max_gpus=bound, gpu_multiple=multiple)
        try:
            built = self.build(_finder_space(space, self.pins))
        except ModelTooLarge:  # a free GPU count adds dp to every dp-dependent table
            self.incomplete = True
            return None
        built.model.Minimize(built.variables.log_gpu_count())
        solved = solve_within(built, budget.within(None), lp_fallback=False)
        if solved.stopped_by is not None:
            self.cut_short(solved.stopped_by)
        return decode(built, solved.solver).gpus if solved.status in SOLVED else None


def _finder_space(space: SearchSpace, pins: dict[str, int]) -> SearchSpace:
    """``space`` with the knobs that only trade memory for time at their least-memory end
    (unpinned): the smallest micro-batch, no partial recompute (full recompute stays), the
    highest ZeRO stage. The fewest-GPUs finder searches it; its answer is verified by a plan
    over the whole space. mt-72t on 16,384 offload H100s: 528k table entries → 114k."""
    domains = dict(space.domains)
    if "micro_batch" not in pins:
        domains["micro_batch"] = (min(domains["micro_batch"]),)
    if "recompute_layers" not in pins:
        domains["recompute_layers"] = (0,)
    if "zero_stage" not in pins:
        domains["zero_stage"] = (max(domains["zero_stage"]),)
    return dataclasses.replace(space, domains=domains)


def _fewest(counts: list[int], refuted: set[int], fits: dict[int, object]) -> Least:
    """The fewest of ``counts`` found to fit (its plan in ``fits``), proven least when every
    smaller one is ``refuted``; none found is proven when every count is."""
    if not fits:
        return Least(None, None, proven=len(refuted) == len(counts))
    index = min(fits)
    result = fits[index]
    proven = all(i in refuted for i in range(index))
    return Least(counts[index], result.strategy, proven=proven, result=result)
