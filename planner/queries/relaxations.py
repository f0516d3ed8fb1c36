"""The fixes of an infeasible problem (step 4 of a diagnosis, planner.queries.diagnosis):
changes that alone make it feasible — the fewest GPUs, the least HBM, the least offload
capacity (or a new offload tier), a larger global batch, dropping a pin, letting TP cross the
scale-up domain — each verified by planning again with it.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from planner.queries.diagnosis_session import Session
from planner.space.rules import divisors
from planner.specs import MemoryTierSpec, Strategy
from planner.specs.hardware import with_tier_capacity

NEW_TIER_GBPS = 100.0
"""Bandwidth assumed for an offload tier the system does not have (the SC23 poster's 100 GB/s)."""
NEW_TIER_CAPACITY_GIB = 64.0 * 1024
MAX_BATCH_TRIES = 6


class Relaxation(BaseModel):
    """One change that alone makes the problem feasible (verified by planning with it)."""

    quantity: str
    change: str
    value: int | float | None = None
    unit: str | None = None
    verified: bool
    strategy: Strategy | None = None
    step_time_s: float | None = None


def search_relaxations(session: Session, core: set[str]) -> list[Relaxation]:
    """The changes that may lift the conflict of families ``core``, each verified by a plan."""
    ctx = session.ctx
    system = ctx.system
    found: list[Relaxation] = []
    fewest = None if session.out_of_time() else session.fewest_gpus()
    if fewest and fewest.value is not None and fewest.value != session.gpus:
        which = "the fewest that fit" if fewest.proven else "the fewest found; not proven"
        found.append(
            _verified("gpus", f"{fewest.value} GPUs ({which})", fewest.value, "GPUs", fewest.result)
        )
    if "hbm" in core and not session.out_of_time():
        least = session.least_memory("hbm")
        if least.value is not None:
            capacity = math.ceil(least.value / ctx.hbm_usable_fraction * 10) / 10
            bigger = with_tier_capacity(system, 0, capacity)
            found.append(
                _verified(
                    "hbm_gib",
                    f"HBM ≥ {capacity:g} GiB per GPU",
                    capacity,
                    "GiB",
                    session.replan(system=bigger),
                )
            )
    memory = "hbm" in core or any(name.startswith("offload") for name in core)
    if memory and not session.out_of_time():
        found.extend(offload_relaxations(session, core))
    pinned = [name.removeprefix("pin:") for name in core if name.startswith("pin:")]
    if pinned:
        found.append(drop_pins(session, pinned))
    if "placement" in core and not session.out_of_time():
        across = system.model_copy(update={"tp_across_domain": True})
        found.append(
            _verified(
                "tp_across_domain",
                f"let TP span more than one {system.network_tiers[0].name} domain "
                "(tp_across_domain: true)",
                None,
                None,
                session.replan(system=across),
            )
        )
    if core & {"batch", "divisibility", "target"}:
        found.extend(batch_relaxation(session))
    return found


def offload_relaxations(session: Session, core: set[str]) -> list[Relaxation]:
    """The least offload capacity that makes the problem fit: of each existing tier, or of a
    new tier at NEW_TIER_GBPS when the system has none."""
    system = session.ctx.system
    if system.offload_tiers:
        candidates = [
            k for k in range(1, len(system.memory_tiers)) if f"offload{k}" in core or "hbm" in core
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
        stretched = with_tier_capacity(base, index, NEW_TIER_CAPACITY_GIB)
        least = session.least_memory(f"offload{index}", system=stretched)
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
                session.replan(system=with_tier_capacity(base, index, capacity)),
            )
        )
    return results


def drop_pins(session: Session, names: list[str]) -> Relaxation:
    kept = {k: v for k, v in session.pins.items() if k not in names}
    text = ", ".join(f"{n}={session.pins[n]}" for n in names)
    return _verified(
        "pins",
        f"drop the pin{'s' if len(names) > 1 else ''} {text}",
        None,
        None,
        session.replan(pins=kept),
    )


def batch_relaxation(session: Session) -> list[Relaxation]:
    """The smallest larger global batch (rounded up to a multiple of a divisor of the GPU
    count) that plans; a job quantity, so tried candidate by candidate."""
    batch = session.ctx.job.global_batch
    candidates = sorted({math.ceil(batch / d) * d for d in divisors(session.gpus)} - {batch})
    for candidate in [c for c in candidates if c > batch][:MAX_BATCH_TRIES]:
        if session.out_of_time():
            break
        result = session.replan(job=session.ctx.job.model_copy(update={"global_batch": candidate}))
        if result is not None and result.strategy is not None:
            return [
                _verified(
                    "global_batch", f"global batch {candidate}", candidate, "sequences", result
                )
            ]
    return []


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
