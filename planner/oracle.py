"""The brute-force oracle: every strategy of the search space, evaluated by the vectorised cost
model, filtered by the same rules and memory limits, ranked by step time.

It is the reference the CP-SAT planner is tested against and the baseline of the latency
benchmark; it is exponential in the number of knobs, so only small problems finish quickly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planner.cost.context import BYTES_PER_GIB, CostContext
from planner.cost.experts import expert_tp_size
from planner.cost.step import Knobs, evaluate_terms
from planner.search_space import (
    KNOBS,
    SearchSpace,
    canonical_mask,
    pinned_values,
    strategy_from_values,
)
from planner.specs import Strategy

INNER_KNOBS = tuple(k for k in KNOBS if k not in ("tp", "pp", "layout"))


@dataclass(frozen=True)
class Ranked:
    step_time_s: float
    strategy: Strategy


def valid_mask(ctx: CostContext, space: SearchSpace, k: dict[str, np.ndarray]) -> np.ndarray:
    """The rules of planner.rules and constraints/structure.py, vectorised."""
    m, system, job = ctx.model, ctx.system, ctx.job
    t, c, p = k["tp"], k["cp"], k["pp"]
    d = space.gpus // (t * c * p)
    b, v = k["micro_batch"], k["interleave"]
    ok = (t * c * p * d == space.gpus) & (job.global_batch % np.maximum(d * b, 1) == 0)
    ok &= (c == 1) | (ctx.seq_len % (2 * c) == 0)
    ok &= (m.heads % t == 0) & (m.ffn_hidden % t == 0) & (m.expert_width % t == 0)
    ok &= (m.kv_heads % t == 0) | (t % m.kv_heads == 0)
    n = job.global_batch // np.maximum(d * b, 1)
    even = k["first_blocks"] == k["last_blocks"]
    ok &= (v == 1) | ((p > 1) & even & (k["first_blocks"] % v == 0) & (n % p == 0))
    ok &= (k["placement"] == 0) | (c == 1)
    if m.is_moe:
        e = k["ep"]
        etp = expert_tp_size(t, k["expert_tp"])
        ok &= (m.experts % e == 0) & (t % etp == 0) & (m.expert_width % etp == 0)
        ok &= (t * c * d) % (e * etp) == 0
        ok &= (t == 1) | (k["sequence_parallel"] == 1)
        ok &= (e == 1) | (k["placement"] == 0)
    else:
        ok &= (k["ep"] == 1) & (k["expert_tp"] == 0)
    r = k["recompute_layers"]
    offloaded = (k["offload_weights"] > 0) | (k["offload_activations"] > 0)
    offloaded |= k["offload_optimizer"] > 0
    ok &= (r == 0) | (
        (k["recompute"] == 0)
        & (k["zero_stage"] < 3)
        & ~offloaded
        & (r < k["last_blocks"])
        & (r % v == 0)
    )
    if not system.tp_across_domain and len(system.network_tiers) > 1:
        ok &= t <= (system.network_tiers[0].domain_gpus or 0)
    ok &= canonical_mask(t, d, k, space.pins, space.domains)
    for name, value in space.pins.items():
        knob, allowed = pinned_values(space, name, value)
        ok &= np.isin(k[knob], allowed)
    return ok


def enumerate_strategies(ctx: CostContext, space: SearchSpace, top: int = 1) -> list[Ranked]:
    """The ``top`` fastest valid strategies that fit in memory, fastest first."""
    best_steps: list[np.ndarray] = []
    best_values: list[dict[str, np.ndarray]] = []
    usable_bytes = ctx.system.hbm.capacity_gib * ctx.hbm_usable_fraction * BYTES_PER_GIB
    inner = np.array(list(itertools.product(*(space.domains[k] for k in INNER_KNOBS))))
    for t, layout in itertools.product(space.domains["tp"], space.domains["layout"]):
        p = space.layouts[layout].pp
        if space.gpus % (t * p):
            continue
        values = {name: inner[:, i] for i, name in enumerate(INNER_KNOBS)}
        values["tp"] = np.full(len(inner), t)
        values["pp"] = np.full(len(inner), p)
        values["layout"] = np.full(len(inner), layout)
        values["first_blocks"] = np.full(len(inner), space.layouts[layout].blocks)
        values["middle_blocks"] = values["first_blocks"]
        values["last_blocks"] = np.full(len(inner), space.layouts[layout].last)
        values["dp"] = space.gpus // (t * p * values["cp"])
        ok = valid_mask(ctx, space, values)
        if not ok.any():
            continue
        values = {name: array[ok] for name, array in values.items()}
        knobs = Knobs.of(**{k: v for k, v in values.items() if k != "layout"})
        terms = evaluate_terms(ctx, knobs)
        fits = terms.hbm_bytes <= usable_bytes
        for tier, spec in enumerate(ctx.system.offload_tiers, start=1):
            fits &= terms.offload_bytes(tier) <= spec.capacity_gib * BYTES_PER_GIB
        if not fits.any():
            continue
        steps = np.broadcast_to(terms.step_time_s, fits.shape)[fits]
        order = np.argsort(steps, kind="stable")[:top]
        best_steps.append(steps[order])
        best_values.append({name: array[fits][order] for name, array in values.items()})
    if not best_steps:
        return []
    steps = np.concatenate(best_steps)
    merged = {name: np.concatenate([v[name] for v in best_values]) for name in best_values[0]}
    order = np.argsort(steps, kind="stable")[:top]
    return [
        Ranked(
            step_time_s=float(steps[i]),
            strategy=strategy_from_values(
                {name: int(array[i]) for name, array in merged.items()}, space
            ),
        )
        for i in order
    ]
