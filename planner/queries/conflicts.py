"""The conflict of an infeasible problem, named and quantified (steps 1-3 of a diagnosis,
planner.queries.diagnosis): pins that contradict the problem on their own (``pin_conflicts``,
no solving), CP-SAT's irreducible conflicting set of constraint families
(``irreducible_core``), and what each member limits (``quantify``).
"""

from __future__ import annotations

import math

from ortools.sat.python import cp_model
from pydantic import BaseModel

from constraints.variables import ModelTooLarge
from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.knobs import Knobs
from planner.cost.step import evaluate_terms
from planner.queries.diagnosis_session import CHECK_WORK_UNITS, Least, Session
from planner.space.layouts import searched_layouts, stage_layouts
from planner.space.rules import cp_values, divisors
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec


class Conflict(BaseModel):
    """One member of an irreducible conflicting set of constraint families."""

    family: str
    label: str
    detail: str
    value: int | float | None = None
    """The conflict's number, when it has one (a GPU count is an int, in JSON too)."""
    unit: str | None = None
    strategy: Strategy | None = None


def _interleaves(layers: int, pp: int, v: int) -> bool:
    """Whether a layout the solver searches on pp stages admits the interleave v (an even
    one, or one with embedding/loss slots: planner.space.layouts, Layout.admits)."""
    return any(layout.admits(v) for layout in searched_layouts(layers, (pp,), (v,), max_skew=1))


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
        if pins.get("pp") == 1:
            add("interleave", "interleaving needs pp > 1")
        else:
            pipelines = [pins["pp"]] if pins.get("pp") else [p for p in pp_ok if p > 1]
            allowed = [
                v
                for v in range(1, model.layers + 3)
                if v == 1 or any(_interleaves(model.layers, p, v) for p in pipelines)
            ]
            if pins["interleave"] not in allowed:
                add(
                    "interleave",
                    "the interleave must divide the layers per stage, or the layers plus "
                    "Megatron's embedding and loss slots per stage; allowed: "
                    f"{_listing(allowed)}",
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


def irreducible_core(session: Session) -> list[tuple[str, str]]:
    """An irreducible set of (family, label) that admits no strategy: CP-SAT's sufficient
    assumptions, shrunk by deletion. Each deletion check builds the model with only the
    remaining families on (the others dropped), which CP-SAT proves infeasible much faster
    than the same question asked through assumptions (one worker, no presolve)."""
    space = session.space(prune=False)
    try:
        built = session.build(space, assumptions=True)
    except ModelTooLarge:  # the plan's own (pruned) space was small enough
        session.incomplete = True
        space = session.space()
        built = session.build(space, assumptions=True)
    built.model.ClearObjective()
    families = {name: f.label for name, f in built.variables.families.items()}
    solver, status = session.solve(built, CHECK_WORK_UNITS)
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
        trial = session.build(space, dropped=frozenset(families) - set(names))
        trial.model.ClearObjective()
        return session.solve(trial, CHECK_WORK_UNITS)[1] == cp_model.INFEASIBLE

    for name in list(core):
        if session.out_of_time():  # the core found so far conflicts, maybe not minimally
            break
        remaining = [n for n in core if n != name]
        if remaining and infeasible(remaining):
            core = remaining
    return [(name, families[name]) for name in core]


def quantify(session: Session, family: str, label: str) -> Conflict:
    """What the family limits, with the family dropped and that quantity minimised."""
    ctx = session.ctx
    if session.out_of_time():
        return Conflict(family=family, label=label, detail=f"not quantified ({session.stopped_by})")
    if family == "hbm" or family.startswith("offload"):
        least = session.least_memory(family)
        if least.value is None:
            return Conflict(family=family, label=label, detail=none_found(session, least))
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
        if not session.fixes:
            return Conflict(family=family, label=label, detail=f"{session.gpus} GPUs")
        fewest = session.fewest_gpus()
        if fewest.value is None:
            return Conflict(
                family=family,
                label=label,
                detail=f"{session.gpus} GPUs; {none_found(session, fewest, 'GPU count')}",
            )
        which = "the fewest that fit" if fewest.proven else "the fewest found (not proven)"
        return Conflict(
            family=family,
            label=label,
            detail=f"{session.gpus} GPUs; {which} under the other constraints: {fewest.value}",
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
                f"{_listing(divisors(math.gcd(session.gpus, ctx.job.global_batch)))}"
            ),
        )
    if family == "divisibility":
        m = ctx.model
        tp_ok = [t for t in divisors(session.gpus) if m.splits_over(t)]
        seq_len = ctx.job.seq_len_for(m)
        cp_ok = cp_values(session.gpus, seq_len)
        return Conflict(
            family=family,
            label=label,
            detail=(
                f"{m.tp_widths} allow tp in "
                f"{{{_listing(tp_ok)}}}, the sequence {seq_len} cp in {{{_listing(cp_ok)}}}"
                f" on {session.gpus} GPUs (and interleaving needs micro-batches % pp = 0)"
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
                f"({session.gpus} / pp); tp > 1 needs sequence parallelism; ep > 1 the "
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
    if family == "target" and session.target is not None:
        return target_conflict(session, label)
    return Conflict(
        family=family,
        label=label,
        detail=f"{label} rules out every strategy that fits with the rest",
    )


def none_found(session: Session, least: Least, what: str = "strategy") -> str:
    """What a search that found nothing may claim: that nothing fits, with a proof; else
    only that nothing was found within the limit that stopped it."""
    if least.proven:
        return f"no {what} fits even then" if what == "strategy" else f"no {what} fits"
    return f"no {what} found within the {session.stopped_by or 'work limit'}"


def target_conflict(session: Session, label: str) -> Conflict:
    """The best the problem can do without the target: its strategy, and as the value its
    MFU (an MFU goal) or its step time (a step-time goal)."""
    result = session.checked_plan(target_free=True)
    if result is None or result.strategy is None:
        proven = result is not None and result.status == "infeasible"
        detail = (
            "no strategy fits even without the target"
            if proven
            else f"no strategy found without the target within the {session.stopped_by}"
        )
        return Conflict(family="target", label=label, detail=detail)
    estimate = result.estimate
    detail = (
        f"unreachable here: the best strategy without it reaches MFU {estimate.mfu:.1%}, "
        f"{estimate.step_time_s:.4g} s per step ({result.strategy.describe()})"
    )
    by_mfu = session.target.min_mfu is not None
    return Conflict(
        family="target",
        label=label,
        detail=detail,
        value=estimate.mfu if by_mfu else estimate.step_time_s,
        unit="MFU" if by_mfu else "s",
        strategy=result.strategy,
    )


def _hbm_items(ctx: CostContext, strategy: Strategy) -> str:
    terms = evaluate_terms(ctx, Knobs.from_strategy(strategy))
    stage = max(terms.stages, key=lambda s: float(s.hbm_total))
    return ", ".join(
        f"{name} {float(value) / BYTES_PER_GIB:.1f}"
        for name, value in stage.items().items()
        if float(value) > 0
    )
