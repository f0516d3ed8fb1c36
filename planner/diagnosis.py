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

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints import PlanModel, build_plan_model
from constraints.target import PerformanceTarget
from constraints.variables import ModelTooLarge
from planner import limits as lim
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.step import Knobs, evaluate_terms
from planner.rules import cp_values, divisors
from planner.search_space import build_search_space, stage_layouts
from planner.solving import SOLVED, decode, minimize_then_fix, solve
from planner.specs import JobSpec, MemoryTierSpec, ModelSpec, Strategy, SystemSpec

CHECK_TIME_LIMIT_S = 20.0
FEWEST_GPUS_TIME_LIMIT_S = 10.0
"""The fewest-GPUs search stops here; its answer is then the best found, marked unproven."""
NEW_TIER_GBPS = 100.0
"""Bandwidth assumed for an offload tier the system does not have (the SC23 poster's 100 GB/s)."""
NEW_TIER_CAPACITY_GIB = 64.0 * 1024
MAX_BATCH_TRIES = 6
MIN_SOLVE_S = 0.05
"""A solve started after the diagnosis's deadline still gets this long (it may prove quickly)."""


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
    """False when the time budget ran out: the conflict may then not be irreducible, and some
    fixes were not searched for or not verified."""


Planner = Callable[..., object]
"""planner.plan.plan, passed in to verify relaxations (it calls this module when infeasible)."""


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
    time_limit_s: float = 60.0,
) -> Diagnosis:
    """The diagnosis of an infeasible planning problem (see the module docstring). Without
    ``fixes``, only the conflict (no relaxations, and no fewest-GPU search). Every solve and
    re-plan inside shares ``time_limit_s``; when it runs out the diagnosis says what it has
    (``complete`` false)."""
    started = time.perf_counter()
    session = _Session(
        CostContext(model, system, job),
        gpus,
        pins,
        limits,
        target,
        plan_fn,
        fixes,
        deadline=started + time_limit_s,
    )
    pinned = pin_conflicts(model, system, job, gpus, pins)
    if pinned:
        relaxation = session.drop_pins([c.family.removeprefix("pin:") for c in pinned])
        return Diagnosis(
            conflicts=pinned,
            relaxations=[relaxation],
            wall_time_s=time.perf_counter() - started,
            complete=not session.incomplete,
        )
    core = session.irreducible_core()
    conflicts = [session.quantify(family, label) for family, label in core]
    relaxations = session.relaxations({family for family, _ in core}) if fixes else []
    return Diagnosis(
        conflicts=conflicts,
        relaxations=relaxations,
        wall_time_s=time.perf_counter() - started,
        complete=not session.incomplete,
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
    deadline: float = math.inf
    """perf_counter() time by which the diagnosis answers with what it has."""
    incomplete: bool = False
    """Set once a step was cut short or skipped for want of time."""
    fewest_cache: list = field(default_factory=list)

    def limit_s(self, cap_s: float) -> float:
        """The time limit of the next solve: ``cap_s`` or what is left, if less (then the
        diagnosis is marked incomplete, since that solve may not finish)."""
        left_s = self.deadline - time.perf_counter()
        if left_s < cap_s:
            self.incomplete = True
        return max(MIN_SOLVE_S, min(cap_s, left_s))

    def out_of_time(self) -> bool:
        """Whether the deadline has passed (the diagnosis is then incomplete)."""
        if time.perf_counter() >= self.deadline:
            self.incomplete = True
            return True
        return False

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
        return self.plan_fn(
            self.ctx.model,
            system or self.ctx.system,
            job or self.ctx.job,
            gpus or self.gpus,
            pins=self.pins if pins is None else pins,
            time_limit_s=self.limit_s(CHECK_TIME_LIMIT_S),
            **self.limits,
        )

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
        solver, status = solve(built, self.limit_s(CHECK_TIME_LIMIT_S))
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
            limit_s = self.limit_s(CHECK_TIME_LIMIT_S)
            return solve(trial, limit_s)[1] == cp_model.INFEASIBLE

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
            return Conflict(family=family, label=label, detail="not quantified (time limit)")
        if family == "hbm" or family.startswith("offload"):
            least = self.least_memory(family)
            if least is None:
                return Conflict(family=family, label=label, detail="no strategy fits even then")
            gib, strategy = least
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
            fewest = self.fewest_gpus() if self.fixes else None
            if not self.fixes:
                return Conflict(family=family, label=label, detail=f"{self.gpus} GPUs")
            if fewest is None:
                return Conflict(
                    family=family,
                    label=label,
                    detail=(f"{self.gpus} GPUs; no GPU count fits under the other constraints"),
                )
            return Conflict(
                family=family,
                label=label,
                detail=(
                    f"{self.gpus} GPUs; the fewest that fit under the other constraints: "
                    f"{fewest[0]}"
                ),
                value=fewest[0],
                unit="GPUs",
                strategy=fewest[1].strategy,
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

    def target_conflict(self, label: str) -> Conflict:
        """The best the problem can do without the target: its strategy, and as the value its
        MFU (an MFU goal) or its step time (a step-time goal)."""
        free = functools.partial(self.plan_fn, target=None)
        result = free(
            self.ctx.model,
            self.ctx.system,
            self.ctx.job,
            self.gpus,
            pins=self.pins,
            time_limit_s=self.limit_s(CHECK_TIME_LIMIT_S),
            **self.limits,
        )
        if result.strategy is None:
            return Conflict(
                family="target", label=label, detail="no strategy fits even without the target"
            )
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

    def least_memory(
        self, family: str, system: SystemSpec | None = None
    ) -> tuple[float, Strategy] | None:
        """(GiB per GPU, strategy): the least HBM (usable) or offload-tier capacity any strategy
        needs, with that tier's fit family dropped."""
        ctx = CostContext(self.ctx.model, system, self.ctx.job) if system else self.ctx
        try:
            built = self.build(self.space(system=system), ctx=ctx, dropped=frozenset({family}))
        except ModelTooLarge:
            self.incomplete = True
            return None
        need = (
            built.needs.hbm
            if family == "hbm"
            else built.needs.offload[int(family.removeprefix("offload")) - 1]
        )
        least, solver, status = minimize_then_fix(built, need, self.limit_s(CHECK_TIME_LIMIT_S))
        if least is None or status not in SOLVED:
            return None
        return least * built.needs.unit_bytes / BYTES_PER_GIB, decode(built, solver)

    def fewest_gpus(self) -> tuple[int, object, bool] | None:
        """The fewest GPUs that admit a strategy, with the GPU count tp·cp·pp·dp a decision
        variable (whole nodes when the problem's count is; bounded by the system's maximum,
        else by scale-up domain × layers × global batch); the plan at that count (the
        fixed-count model finds its fastest strategy much faster); and whether the minimum is
        proven."""
        if not self.fewest_cache:
            ctx, system = self.ctx, self.ctx.system
            bound = system.max_gpus or min(
                system.scale_up_gpus * ctx.model.layers * ctx.job.global_batch, lim.MAX_GPUS
            )
            node = system.gpus_per_node
            multiple = node if self.gpus % node == 0 else 1
            try:
                built = self.build(self.space(gpus=None, max_gpus=bound, gpu_multiple=multiple))
            except ModelTooLarge:  # a free GPU count adds dp to every dp-dependent table
                self.incomplete = True
                self.fewest_cache.append(None)
                return None
            built.model.Minimize(built.variables.log_gpu_count())
            solver, status = solve(built, self.limit_s(FEWEST_GPUS_TIME_LIMIT_S), lp_fallback=False)
            if status in SOLVED:
                least = decode(built, solver).gpus
                result = self.replan(gpus=least)
                self.fewest_cache.append((least, result, status == cp_model.OPTIMAL))
            else:
                self.fewest_cache.append(None)
        return self.fewest_cache[0]

    # -- the fixes ---------------------------------------------------------------------------
    def relaxations(self, core: set[str]) -> list[Relaxation]:
        ctx = self.ctx
        system = ctx.system
        found: list[Relaxation] = []
        fewest = None if self.out_of_time() else self.fewest_gpus()
        if fewest and fewest[0] != self.gpus:
            which = "the fewest that fit" if fewest[2] else "the fewest found; not proven minimal"
            found.append(
                _verified("gpus", f"{fewest[0]} GPUs ({which})", fewest[0], "GPUs", fewest[1])
            )
        if "hbm" in core and not self.out_of_time():
            least = self.least_memory("hbm")
            if least is not None:
                capacity = math.ceil(least[0] / ctx.hbm_usable_fraction * 10) / 10
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
            if least is None:
                continue
            capacity = math.ceil(least[0])
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
            if result.strategy is not None:
                return [
                    _verified(
                        "global_batch", f"global batch {candidate}", candidate, "sequences", result
                    )
                ]
        return []


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
    ok = result.strategy is not None
    return Relaxation(
        quantity=quantity,
        change=change,
        value=value,
        unit=unit,
        verified=ok,
        strategy=result.strategy,
        step_time_s=result.estimate.step_time_s if ok else None,
    )
