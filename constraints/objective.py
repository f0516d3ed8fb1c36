"""The step-time objective, linear in tabulated terms (the cost model's formula in
planner/cost/step.py, re-expressed over integer table variables).

With U the per-block per-micro-batch time (compute + exposed TP, CP and offload), H the LM
head and M one PP message per micro-batch, and n·U, n·H, n·M their per-step tables
(n = B/(d·b) micro-batches):

    pipeline = n·T + (p−1)/v·T,   T = (L/p)·U + H + [p>1]·2v·M
    p·v·pipeline = v·L·(n·U) + p·v·(n·H) + [p>1]·2p·v²·(n·M)
                   + (p−1)·L·U + p(p−1)·H + [p>1]·2p·v(p−1)·M

Every coefficient depends only on (pp, interleave), so each pair literal enforces one linear
inequality with integer coefficients. DP exposure is max(0, comm − window) per part (two
inequalities under minimisation); its per-micro-batch part multiplies the micro-batch count by
the comm table (AddMultiplicationEquality).
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.tables import PerBlock, TableBuilder
from constraints.variables import INT_LIMIT, Variables


@dataclass(frozen=True)
class StepVariables:
    step: cp_model.IntVar
    pipeline: cp_model.IntVar
    dp_exposed: tuple[cp_model.IntVar, ...]
    optimizer: cp_model.IntVar


def upper(variables: Variables, terms: list[tuple[int, cp_model.IntVar]]) -> int:
    """Upper bound of Σ coef·var for non-negative variables and coefficients."""
    return sum(coef * variables.ub(var) for coef, var in terms)


def linear(terms: list[tuple[int, cp_model.IntVar]]) -> cp_model.LinearExpr:
    return sum(coef * var for coef, var in terms)


def add_step_time(variables: Variables, tables: TableBuilder) -> StepVariables:
    m, layers = variables.model, tables.ctx.model.layers
    compute, forward = tables.block_compute()
    comm = tables.comm_exposed()
    head, message = tables.head(), tables.pp_message()
    offload = list(tables.offload_exposed()) if len(tables.ctx.system.memory_tiers) > 1 else []
    per_block = [compute, comm, *offload]

    pp_values, v_values = variables.domains["pp"], variables.domains["interleave"]
    hidden_p2p = tables.ctx.stack.pp_overlap  # P2P under compute with interleaving (step.py)
    terms_by_pair = {
        (a, c): _pipeline_terms(
            pp_values[a],
            v_values[c],
            layers,
            per_block,
            head,
            None if hidden_p2p and v_values[c] > 1 else message,
        )
        for a, c in variables.pairs
    }
    pipeline = variables.new_int(
        "pipeline",
        max(
            upper(variables, terms) // (pp_values[a] * v_values[c]) + 1
            for (a, c), terms in terms_by_pair.items()
        ),
    )
    for (a, c), pair in variables.pairs.items():
        p, v = pp_values[a], v_values[c]
        m.Add(p * v * pipeline >= linear(terms_by_pair[(a, c)])).OnlyEnforceIf(pair)
    if all(x.pp_power == 1 for x in per_block):
        # Redundant, for propagation before (pp, interleave) is chosen: the stage's share of
        # the per-step block work, (L/p)·n·U = L·(φ·U), does not depend on p.
        m.Add(pipeline >= layers * sum(x.per_step for x in per_block))

    after, before, per_mb = tables.dp_comm()
    overlap = variables.onehot["dp_overlap"][1] if 1 in variables.domains["dp_overlap"] else None
    off_f = [(1, offload[0].once, 0)] if offload else []
    off_b = [(1, offload[1].once, 0)] if offload else []
    exposed_after = _exposed_once(
        variables,
        "dp_after_exposed",
        after,
        [(1, compute.once, 0), (-1, forward.once, 0), *off_b],
        layers,
        overlap,
    )
    exposed_before = _exposed_once(
        variables, "dp_before_exposed", before, [(1, forward.once, 0), *off_f], layers, overlap
    )

    micro_batches = variables.micro_batch_count()
    comm_all = variables.new_int(
        "dp_per_step_comm", variables.ub(micro_batches) * variables.ub(per_mb)
    )
    m.AddMultiplicationEquality(comm_all, [micro_batches, per_mb])
    window_step = [(1, compute.per_step, compute.pp_power)]
    window_step += [(1, o.per_step, o.pp_power) for o in offload]
    exposed_mb = _exposed_once(
        variables, "dp_micro_batch_exposed", comm_all, window_step, layers, overlap
    )

    optimizer = tables.optimizer()
    dp_exposed = (exposed_after, exposed_before, exposed_mb)
    step_terms = [pipeline, *dp_exposed, optimizer]
    step = variables.new_int("step", min(INT_LIMIT, sum(variables.ub(v) for v in step_terms)))
    m.Add(step == sum(step_terms))
    return StepVariables(step=step, pipeline=pipeline, dp_exposed=dp_exposed, optimizer=optimizer)


def _pipeline_terms(
    p: int,
    v: int,
    layers: int,
    per_block: list[PerBlock],
    head: PerBlock,
    message: PerBlock | None,
) -> list[tuple[int, cp_model.IntVar]]:
    """p·v × pipeline, as (coefficient, variable) terms (see the module docstring);
    ``message`` None: the stack hides the stage-to-stage messages."""
    pv = p * v
    terms = [(v * layers * p**x.pp_power, x.per_step) for x in per_block]
    terms += [(pv * p**head.pp_power, head.per_step), (p * (p - 1), head.once)]
    terms += [((p - 1) * layers, x.once) for x in per_block]
    if p > 1 and message is not None:
        terms += [
            (2 * pv * v * p**message.pp_power, message.per_step),
            (2 * pv * (p - 1), message.once),
        ]
    return [(coef, var) for coef, var in terms if coef]


def _exposed_once(
    variables: Variables,
    name: str,
    comm: cp_model.IntVar,
    window: list[tuple[int, cp_model.IntVar, int]],
    layers: int,
    overlap: cp_model.IntVar | None,
) -> cp_model.IntVar:
    """max(0, comm − (L/p)·window): p·x ≥ p·comm − L·window under each pp literal when
    overlapping, x ≥ comm otherwise (x ≥ 0 by its domain; minimisation makes it the max).
    ``window`` terms are (coefficient, variable, pp power): the coefficient is multiplied by
    pp to that power."""
    m = variables.model
    exposed = variables.new_int(name, variables.ub(comm))
    if overlap is None:
        m.Add(exposed >= comm)
        return exposed
    m.Add(exposed >= comm).OnlyEnforceIf(overlap.Not())
    for p, chosen in zip(variables.domains["pp"], variables.onehot["pp"], strict=True):
        window_p = sum(coef * p**power * var for coef, var, power in window)
        m.Add(p * exposed >= p * comm - layers * window_p).OnlyEnforceIf([overlap, chosen])
    return exposed
