"""Why a problem has no feasible strategy, by how much, and what would fix it.

1. Pins that contradict the model, the job or the system on their own (tp = 16 on an 8-GPU
   NVLink domain, tp not dividing the heads, ...) are named before any solving, with the values
   that are allowed.
2. Otherwise the CP-SAT model is solved with every constraint family as an assumption; CP-SAT's
   sufficient assumptions are shrunk by deletion (re-solve without each member; keep it out if
   still infeasible) to an irreducible conflicting set.
3. Each member is quantified by dropping it and minimising what it limits (the least HBM any
   strategy needs, the fewest GPUs that work, ...), with the strategy that achieves it.
4. Relaxations, each alone: the fewest GPUs, the least HBM, the least offload capacity (or a
   new offload tier), a larger global batch, dropping a pin, letting TP cross the scale-up
   domain — each found by the solver (hardware as decision variables) and verified by planning
   again with it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints import PlanModel, build_plan_model
from constraints.tables import FLOOR_MARGIN
from constraints.target import PerformanceTarget
from constraints.variables import ModelTooLarge
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.memory import memory_floor_gpus
from planner.cost.step import Knobs, evaluate_terms
from planner.queries.solving import (
    SOLVED,
    Budget,
    StoppedBy,
    decode,
    minimize_then_fix,
    solve_within,
)
from planner.space.rules import cp_allowed, cp_values, divisors
from planner.space.search_space import SearchSpace, build_search_space, stage_layouts
from planner.specs import JobSpec, MemoryTierSpec, ModelSpec, Strategy, SystemSpec
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
NEW_TIER_GBPS = 100.0
"""Bandwidth assumed for an offload tier the system does not have (the SC23 poster's 100 GB/s)."""
NEW_TIER_CAPACITY_GIB = 64.0 * 1024
MAX_BATCH_TRIES = 6


class Conflict(BaseModel):
    """One member of an irreducible conflicting set of constraint families."""

    family: str
    label: str
    detail: str
    value: int | float | None = None
    """The conflict's number, when it has one (a GPU count is an int, in JSON too)."""
    unit: str | None = None
    strategy: Strategy | None = None


class Relaxation(BaseModel):
    """One change that alone makes the problem feasible (verified by planning with it)."""

    quantity: str
    change: str
    value: int | float | None = None
    unit: str | None = None
    verified: bool
    strategy: Strategy | None = None
    step_time_s: float | None = None


class Diagnosis(BaseModel):
    conflicts: list[Conflict]
    relaxations: list[Relaxation]
    wall_time_s: float
    complete: bool = True
    """False when a limit cut a step short: the conflict may then not be irreducible, and some
    fixes were not searched for, not proven least or not verified."""
    stopped_by: StoppedBy | None = None
    """The limit that cut a step short ("work limit" or "time limit"; None when complete)."""
    fixes_searched: bool = True
    """False for a conflict-only diagnosis (plan(diagnose="conflict"), as min-hardware asks
    for at the largest GPU count): no change was looked for, so none missing says nothing."""


@dataclass(frozen=True)
class _Least:
    """A least quantity a diagnosis searched for: the value found and its strategy (None: none
    found); whether the value is proven least or, with none found, whether it is proven that
    none exists; the plan that verified it, if one was made."""

    value: float | None
    strategy: Strategy | None
    proven: bool
    result: object = None


Planner = Callable[..., object]
"""planner.queries.plan.plan, passed in to verify relaxations (it calls this module when
infeasible)."""


def pin_conflicts(
    model: ModelSpec, system: SystemSpec, job: JobSpec, gpus: int, pins: dict[str, int]
) -> list[Conflict]:
    """Pins that no strategy can honour, each with the values that are allowed."""
    conflicts = []

    def add(name: str, reason: str) -> None:
        conflicts.append(
            Conflict(family=f"pin:{name}", label=f"pin {name}={pins[name]}", detail=reason)
        )

    domain = system.network_tiers[0].domain_gpus if len(system.network_tiers) > 1 else None
    tp_ok = [
        t
        for t in divisors(gpus)
        if model.splits_over(t) and (system.tp_across_domain or domain is None or t <= domain)
    ]
    if "tp" in pins and pins["tp"] not in tp_ok:
        add(
            "tp",
            f"tp must divide the GPUs ({gpus}) and {model.tp_widths}"
            + (
                f" and stay within one {system.network_tiers[0].name} domain ({domain})"
                if domain and not system.tp_across_domain
                else ""
            )
            + f"; allowed: {_listing(tp_ok)}",
        )
    pp_ok = [p for p in divisors(gpus) if stage_layouts(model.layers, p)]
    if "pp" in pins and pins["pp"] not in pp_ok:
        add(
            "pp",
            f"pp must divide the GPUs ({gpus}) and leave every stage at least one of the "
            f"{model.layers} layers; allowed: {_listing(pp_ok)}",
        )
    seq_len = job.seq_len_for(model)
    cp_ok = cp_values(gpus, seq_len)
    if "cp" in pins and pins["cp"] not in cp_ok:
        add(
            "cp",
            f"cp must divide the GPUs ({gpus}) and split the sequence ({seq_len}) into 2·cp "
            f"equal chunks; allowed: {_listing(cp_ok)}",
        )
    dp_ok = divisors(math.gcd(gpus, job.global_batch))
    if "dp" in pins and pins["dp"] not in dp_ok:
        add(
            "dp",
            f"dp must divide the GPUs ({gpus}) and the global batch "
            f"({job.global_batch}); allowed: {_listing(dp_ok)}",
        )
    if "micro_batch" in pins and job.global_batch % pins["micro_batch"]:
        add(
            "micro_batch",
            f"the micro-batch must divide the global batch "
            f"({job.global_batch}); allowed: "
            f"{_listing(divisors(job.global_batch))}",
        )
    if "interleave" in pins and pins["interleave"] > 1:
        v = pins["interleave"]
        per_stage = model.layers // pins["pp"] if pins.get("pp") else None
        if pins.get("pp") == 1:
            add("interleave", "interleaving needs pp > 1")
        elif model.layers % v or (per_stage and model.layers % pins["pp"] == 0 and per_stage % v):
            allowed = divisors(per_stage) if per_stage else divisors(model.layers)
            add(
                "interleave",
                f"the interleave must divide the layers per stage; allowed: {_listing(allowed)}",
            )
    if "ep" in pins and (not model.is_moe or model.experts % pins["ep"] or gpus % pins["ep"]):
        allowed = [e for e in divisors(model.experts) if gpus % e == 0] if model.is_moe else [1]
        add(
            "ep",
            f"ep must divide the experts ({model.experts}) and the GPUs ({gpus}); allowed: "
            f"{_listing(allowed)}",
        )
    pinned = [k for k in ("tp", "cp", "pp", "dp") if k in pins]
    product = math.prod(pins[k] for k in pinned)
    factors = "·".join(pinned)
    if len(pinned) == 4 and product != gpus:
        add("dp", f"{factors} = {product} must equal the GPUs ({gpus})")
    elif len(pinned) >= 2 and gpus % product:
        add(pinned[-1], f"{factors} = {product} must divide the GPUs ({gpus})")
    tiers = len(system.memory_tiers) - 1
    for knob in ("offload_weights", "offload_activations", "offload_optimizer"):
        if pins.get(knob, 0) > tiers:
            add(
                knob,
                f"the system has offload tiers 1..{tiers}"
                if tiers
                else "the system has no offload tier",
            )
    return conflicts


def _listing(values: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return (shown + (", ..." if len(values) > limit else "")) or "none"


def diagnose(
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int,
    pins: dict[str, int],
    plan_fn: Planner,
    limits: dict[str, int | None],
    target: PerformanceTarget | None = None,
    fixes: bool = True,
    budget: Budget | None = None,
) -> Diagnosis:
    """The diagnosis of an infeasible planning problem (see the module docstring). Without
    ``fixes``, only the conflict (no relaxations, and no fewest-GPU search). Every solve and
    re-plan inside spends from ``budget`` (default: planner.specs.limits.DEFAULT_WORK_UNITS); when a
    limit cuts a step short the diagnosis says what it has (``complete`` false, ``stopped_by``)."""
    started = time.perf_counter()
    session = _Session(
        CostContext(model, system, job),
        gpus,
        pins,
        limits,
        target,
        plan_fn,
        fixes,
        budget=budget or Budget(),
    )
    pinned = pin_conflicts(model, system, job, gpus, pins)
    if pinned:
        relaxation = session.drop_pins([c.family.removeprefix("pin:") for c in pinned])
        return Diagnosis(
            conflicts=pinned,
            relaxations=[relaxation],
            wall_time_s=time.perf_counter() - started,
            complete=not session.incomplete,
            stopped_by=session.stopped_by,
        )
    core = session.irreducible_core()
    conflicts = [session.quantify(family, label) for family, label in core]
    relaxations = session.relaxations({family for family, _ in core}) if fixes else []
    return Diagnosis(
        conflicts=conflicts,
        relaxations=relaxations,
        wall_time_s=time.perf_counter() - started,
        complete=not session.incomplete,
        stopped_by=session.stopped_by,
        fixes_searched=fixes,
    )


@dataclass
class _Session:
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
    fewest_cache: list[_Least] = field(default_factory=list)
    least_cache: dict[tuple[str, str | None], _Least] = field(default_factory=dict)

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

    # -- the conflict ------------------------------------------------------------------------
    def irreducible_core(self) -> list[tuple[str, str]]:
        """An irreducible set of (family, label) that admits no strategy: CP-SAT's sufficient
        assumptions, shrunk by deletion. Each deletion check builds the model with only the
        remaining families on (the others dropped), which CP-SAT proves infeasible much faster
        than the same question asked through assumptions (one worker, no presolve)."""
        space = self.space(prune=False)
        try:
            built = self.build(space, assumptions=True)
        except ModelTooLarge:  # the plan's own (pruned) space was small enough
            self.incomplete = True
            space = self.space()
            built = self.build(space, assumptions=True)
        built.model.ClearObjective()
        families = {name: f.label for name, f in built.variables.families.items()}
        solver, status = self.solve(built, CHECK_WORK_UNITS)
        if status == cp_model.INFEASIBLE:
            by_index = {f.literal.Index(): n for n, f in built.variables.families.items()}
            core = [
                by_index[i] for i in solver.SufficientAssumptionsForInfeasibility() if i in by_index
            ]
        elif status == cp_model.UNKNOWN:
            core = list(families)
        else:
            return []

        def infeasible(names: list[str]) -> bool:
            trial = self.build(space, dropped=frozenset(families) - set(names))
            trial.model.ClearObjective()
            return self.solve(trial, CHECK_WORK_UNITS)[1] == cp_model.INFEASIBLE

        for name in list(core):
            if self.out_of_time():  # the core found so far conflicts, maybe not minimally
                break
            remaining = [n for n in core if n != name]
            if remaining and infeasible(remaining):
                core = remaining
        return [(name, families[name]) for name in core]

    def quantify(self, family: str, label: str) -> Conflict:
        """What the family limits, with the family dropped and that quantity minimised."""
        ctx = self.ctx
        if self.out_of_time():
            return Conflict(
                family=family, label=label, detail=f"not quantified ({self.stopped_by})"
            )
        if family == "hbm" or family.startswith("offload"):
            least = self.least_memory(family)
            if least.value is None:
                return Conflict(family=family, label=label, detail=self.none_found(least))
            gib, strategy = least.value, least.strategy
            if family == "hbm":
                capacity = gib / ctx.hbm_usable_fraction
                detail = (
                    f"the least HBM any strategy needs here is {capacity:.1f} GiB per "
                    f"GPU ({strategy.describe()}: {_hbm_items(ctx, strategy)}); the "
                    f"system has {ctx.system.hbm.capacity_gib:g} GiB"
                )
                return Conflict(
                    family=family,
                    label=label,
                    detail=detail,
                    value=capacity,
                    unit="GiB",
                    strategy=strategy,
                )
            tier = ctx.system.memory_tiers[int(family.removeprefix("offload"))]
            detail = (
                f"the least {tier.name} capacity any strategy needs is {gib:.1f} GiB per "
                f"GPU ({strategy.describe()}); the tier has {tier.capacity_gib:g} GiB"
            )
            return Conflict(
                family=family, label=label, detail=detail, value=gib, unit="GiB", strategy=strategy
            )
        if family == "factorization":
            if not self.fixes:
                return Conflict(family=family, label=label, detail=f"{self.gpus} GPUs")
            fewest = self.fewest_gpus()
            if fewest.value is None:
                return Conflict(
                    family=family,
                    label=label,
                    detail=f"{self.gpus} GPUs; {self.none_found(fewest, 'GPU count')}",
                )
            which = "the fewest that fit" if fewest.proven else "the fewest found (not proven)"
            return Conflict(
                family=family,
                label=label,
                detail=f"{self.gpus} GPUs; {which} under the other constraints: {fewest.value}",
                value=fewest.value,
                unit="GPUs",
                strategy=fewest.strategy,
            )
        if family == "batch":
            return Conflict(
                family=family,
                label=label,
                detail=(
                    f"global batch {ctx.job.global_batch} must split into dp × micro-batch × "
                    f"micro-batches; dp must divide both it and the GPUs: "
                    f"{_listing(divisors(math.gcd(self.gpus, ctx.job.global_batch)))}"
                ),
            )
        if family == "divisibility":
            m = ctx.model
            tp_ok = [t for t in divisors(self.gpus) if m.splits_over(t)]
            seq_len = ctx.job.seq_len_for(m)
            cp_ok = cp_values(self.gpus, seq_len)
            return Conflict(
                family=family,
                label=label,
                detail=(
                    f"{m.tp_widths} allow tp in "
                    f"{{{_listing(tp_ok)}}}, the sequence {seq_len} cp in {{{_listing(cp_ok)}}}"
                    f" on {self.gpus} GPUs (and interleaving needs micro-batches % pp = 0)"
                ),
            )
        if family == "experts":
            m = ctx.model
            return Conflict(
                family=family,
                label=label,
                detail=(
                    f"ep must divide the {m.experts} experts ({{{_listing(divisors(m.experts))}}}) "
                    "and ep·expert_tp the ranks of a pipeline stage, tp·cp·dp = GPUs / pp "
                    f"({self.gpus} / pp); tp > 1 needs sequence parallelism; ep > 1 the "
                    "tp-cp-dp-pp rank order"
                ),
            )
        if family == "placement":
            up = ctx.system.network_tiers[0]
            return Conflict(
                family=family,
                label=label,
                detail=(
                    f"tp is at most {up.domain_gpus} ({up.name} domain); the system does not let "
                    f"TP cross domains"
                ),
            )
        if family == "target" and self.target is not None:
            return self.target_conflict(label)
        return Conflict(
            family=family,
            label=label,
            detail=f"{label} rules out every strategy that fits with the rest",
        )

    def none_found(self, least: _Least, what: str = "strategy") -> str:
        """What a search that found nothing may claim: that nothing fits, with a proof; else
        only that nothing was found within the limit that stopped it."""
        if least.proven:
            return f"no {what} fits even then" if what == "strategy" else f"no {what} fits"
        return f"no {what} found within the {self.stopped_by or 'work limit'}"

    def target_conflict(self, label: str) -> Conflict:
        """The best the problem can do without the target: its strategy, and as the value its
        MFU (an MFU goal) or its step time (a step-time goal)."""
        result = self.checked_plan(target_free=True)
        if result is None or result.strategy is None:
            proven = result is not None and result.status == "infeasible"
            detail = (
                "no strategy fits even without the target"
                if proven
                else f"no strategy found without the target within the {self.stopped_by}"
            )
            return Conflict(family="target", label=label, detail=detail)
        estimate = result.estimate
        detail = (
            f"unreachable here: the best strategy without it reaches MFU {estimate.mfu:.1%}, "
            f"{estimate.step_time_s:.4g} s per step ({result.strategy.describe()})"
        )
        by_mfu = self.target.min_mfu is not None
        return Conflict(
            family="target",
            label=label,
            detail=detail,
            value=estimate.mfu if by_mfu else estimate.step_time_s,
            unit="MFU" if by_mfu else "s",
            strategy=result.strategy,
        )

    def least_memory(self, family: str, system: SystemSpec | None = None) -> _Least:
        """The least HBM (usable) or offload-tier capacity any strategy needs, in GiB per GPU,
        with that tier's fit family dropped, and its fastest strategy (solving.
        minimize_then_fix); remembered per family for the problem's own system (the conflict
        and the fix ask the same question)."""
        key = (family, None if system is None else system.model_dump_json())
        if key not in self.least_cache:
            self.least_cache[key] = self.solve_least_memory(family, system)
        return self.least_cache[key]

    def solve_least_memory(self, family: str, system: SystemSpec | None) -> _Least:
        """least_memory, solved."""
        ctx = CostContext(self.ctx.model, system, self.ctx.job) if system else self.ctx
        try:
            built = self.build(self.space(system=system), ctx=ctx, dropped=frozenset({family}))
        except ModelTooLarge:
            self.incomplete = True
            return _Least(None, None, proven=False)
        need = (
            built.needs.hbm
            if family == "hbm"
            else built.needs.offload[int(family.removeprefix("offload")) - 1]
        )
        least, proven, solved = minimize_then_fix(built, need, self.step(CHECK_WORK_UNITS))
        if solved.stopped_by is not None:
            self.cut_short(solved.stopped_by)
        if least is None or solved.status not in SOLVED:
            return _Least(None, None, proven=solved.status == cp_model.INFEASIBLE)
        gib = least * built.needs.unit_bytes / BYTES_PER_GIB
        return _Least(gib, decode(built, solved.solver), proven=proven)

    def fewest_gpus(self) -> _Least:
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
        memory_floor_gpus, lowered by constraints.tables.FLOOR_MARGIN), so each count left out
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

    def search_fewest_gpus(self) -> _Least:
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

    # -- the fixes ---------------------------------------------------------------------------
    def relaxations(self, core: set[str]) -> list[Relaxation]:
        ctx = self.ctx
        system = ctx.system
        found: list[Relaxation] = []
        fewest = None if self.out_of_time() else self.fewest_gpus()
        if fewest and fewest.value is not None and fewest.value != self.gpus:
            which = "the fewest that fit" if fewest.proven else "the fewest found; not proven"
            found.append(
                _verified(
                    "gpus", f"{fewest.value} GPUs ({which})", fewest.value, "GPUs", fewest.result
                )
            )
        if "hbm" in core and not self.out_of_time():
            least = self.least_memory("hbm")
            if least.value is not None:
                capacity = math.ceil(least.value / ctx.hbm_usable_fraction * 10) / 10
                bigger = _with_tier(system, 0, capacity)
                found.append(
                    _verified(
                        "hbm_gib",
                        f"HBM ≥ {capacity:g} GiB per GPU",
                        capacity,
                        "GiB",
                        self.replan(system=bigger),
                    )
                )
        memory = "hbm" in core or any(name.startswith("offload") for name in core)
        if memory and not self.out_of_time():
            found.extend(self.offload_relaxations(core))
        pinned = [name.removeprefix("pin:") for name in core if name.startswith("pin:")]
        if pinned:
            found.append(self.drop_pins(pinned))
        if "placement" in core and not self.out_of_time():
            across = system.model_copy(update={"tp_across_domain": True})
            found.append(
                _verified(
                    "tp_across_domain",
                    f"let TP span more than one {system.network_tiers[0].name} domain "
                    "(tp_across_domain: true)",
                    None,
                    None,
                    self.replan(system=across),
                )
            )
        if core & {"batch", "divisibility", "target"}:
            found.extend(self.batch_relaxation())
        return found

    def offload_relaxations(self, core: set[str]) -> list[Relaxation]:
        """The least offload capacity that makes the problem fit: of each existing tier, or of a
        new tier at NEW_TIER_GBPS when the system has none."""
        system = self.ctx.system
        if system.offload_tiers:
            candidates = [
                k
                for k in range(1, len(system.memory_tiers))
                if f"offload{k}" in core or "hbm" in core
            ]
            base = system
        else:
            tier = MemoryTierSpec(
                name="offload (new)",
                capacity_gib=NEW_TIER_CAPACITY_GIB,
                bandwidth_gbps=NEW_TIER_GBPS,
            )
            base = system.model_copy(update={"memory_tiers": (*system.memory_tiers, tier)})
            candidates = [1]
        results = []
        for index in candidates:
            stretched = _with_tier(base, index, NEW_TIER_CAPACITY_GIB)
            least = self.least_memory(f"offload{index}", system=stretched)
            if least.value is None:
                continue
            capacity = math.ceil(least.value)
            tier = base.memory_tiers[index]
            what = (
                f"an offload tier of ≥ {capacity} GiB per GPU at {tier.bandwidth_gbps:g} GB/s"
                if not system.offload_tiers
                else f"{tier.name} ≥ {capacity} GiB per GPU"
            )
            results.append(
                _verified(
                    "offload_gib",
                    what,
                    capacity,
                    "GiB",
                    self.replan(system=_with_tier(base, index, capacity)),
                )
            )
        return results

    def drop_pins(self, names: list[str]) -> Relaxation:
        kept = {k: v for k, v in self.pins.items() if k not in names}
        text = ", ".join(f"{n}={self.pins[n]}" for n in names)
        return _verified(
            "pins",
            f"drop the pin{'s' if len(names) > 1 else ''} {text}",
            None,
            None,
            self.replan(pins=kept),
        )

    def batch_relaxation(self) -> list[Relaxation]:
        """The smallest larger global batch (rounded up to a multiple of a divisor of the GPU
        count) that plans; a job quantity, so tried candidate by candidate."""
        batch = self.ctx.job.global_batch
        candidates = sorted({math.ceil(batch / d) * d for d in divisors(self.gpus)} - {batch})
        for candidate in [c for c in candidates if c > batch][:MAX_BATCH_TRIES]:
            if self.out_of_time():
                break
            result = self.replan(job=self.ctx.job.model_copy(update={"global_batch": candidate}))
            if result is not None and result.strategy is not None:
                return [
                    _verified(
                        "global_batch", f"global batch {candidate}", candidate, "sequences", result
                    )
                ]
        return []


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


def _fewest(counts: list[int], refuted: set[int], fits: dict[int, object]) -> _Least:
    """The fewest of ``counts`` found to fit (its plan in ``fits``), proven least when every
    smaller one is ``refuted``; none found is proven when every count is."""
    if not fits:
        return _Least(None, None, proven=len(refuted) == len(counts))
    index = min(fits)
    result = fits[index]
    proven = all(i in refuted for i in range(index))
    return _Least(counts[index], result.strategy, proven=proven, result=result)


def _with_tier(system: SystemSpec, index: int, capacity_gib: float) -> SystemSpec:
    tiers = tuple(
        t.model_copy(update={"capacity_gib": capacity_gib}) if i == index else t
        for i, t in enumerate(system.memory_tiers)
    )
    return system.model_copy(update={"memory_tiers": tiers})


def _hbm_items(ctx: CostContext, strategy: Strategy) -> str:
    terms = evaluate_terms(ctx, Knobs.from_strategy(strategy))
    stage = max(terms.stages, key=lambda s: float(s.hbm_total))
    return ", ".join(
        f"{name} {float(value) / BYTES_PER_GIB:.1f}"
        for name, value in stage.items().items()
        if float(value) > 0
    )


def _verified(quantity: str, change: str, value, unit, result) -> Relaxation:
    """A relaxation, verified when ``result`` (the plan with it; None: not planned, for want
    of budget) found a strategy."""
    ok = result is not None and result.strategy is not None
    return Relaxation(
        quantity=quantity,
        change=change,
        value=value,
        unit=unit,
        verified=ok,
        strategy=result.strategy if ok else None,
        step_time_s=result.estimate.step_time_s if ok else None,
    )
