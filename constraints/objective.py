"""The step-time objective, linear in tabulated terms (the cost model's formula in
planner/cost/step.py, re-expressed over integer table variables).

With φ = B·t/(N·b) (so the micro-batch count is n = p·φ), U the per-block per-micro-batch time
(compute + exposed TP + exposed offload), H the LM head and M one PP message per micro-batch:

    pipeline = n·T + (p−1)/v·T,   T = (L/p)·U + H + [p>1]·2v·M
             = L·φ·U + p·φ·H + [p>1]·2pv·φ·M  +  ((p−1)·L·U + p(p−1)·H + [p>1]·2pv(p−1)·M)/(pv)

The φ-scaled products are tables over (tp, micro_batch, ...) of their own; what multiplies them
depends only on (pp, interleave), so each (pp, interleave) pair literal enforces one linear
inequality with integer coefficients (multiplied through by p·v). DP exposure is
max(0, comm − window) per part (AddMax-style: two inequalities under minimisation); its per
micro-batch part multiplies the micro-batch count by the comm table (AddMultiplicationEquality).
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from constraints.tables import TableBuilder
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
    compute, forward, compute_step, forward_step = tables.block_compute()
    tp, tp_step = tables.tp_exposed()
    head, message, head_step, message_step = tables.head_and_message()
    if len(tables.ctx.system.memory_tiers) > 1:
        off_f, off_b, off_f_step, off_b_step = tables.offload_exposed()
        offload, offload_step = [(1, off_f), (1, off_b)], [(1, off_f_step), (1, off_b_step)]
    else:
        offload, offload_step = [], []
    per_block = [(1, compute), (1, tp), *offload]
    per_block_step = [(1, compute_step), (1, tp_step), *offload_step]

    pp_values, v_values = variables.domains["pp"], variables.domains["interleave"]
    bounds = []
    for a, c in variables.pairs:
        p, v = pp_values[a], v_values[c]
        bounds.append(
            upper(
                variables,
                _pipeline_terms(
                    p, v, layers, per_block, per_block_step, head, message, head_step, message_step
                ),
            )
            // (p * v)
            + 1
        )
    pipeline = variables.new_int("pipeline", max(bounds))
    # Implied by every pair's inequality (p, v ≥ 1): gives the LP relaxation a real bound.
    m.Add(pipeline >= linear(per_block_step) + head_step)
    for (a, c), pair in variables.pairs.items():
        p, v = pp_values[a], v_values[c]
        terms = _pipeline_terms(
            p, v, layers, per_block, per_block_step, head, message, head_step, message_step
        )
        m.Add(p * v * pipeline >= linear(terms)).OnlyEnforceIf(pair)

    after, before, per_mb = tables.dp_comm()
    overlap = variables.onehot["dp_overlap"][1] if 1 in variables.domains["dp_overlap"] else None
    backward_window = [(1, compute), (-1, forward)] + ([offload[1]] if offload else [])
    forward_window = [(1, forward)] + ([offload[0]] if offload else [])
    exposed_after = _exposed_once(
        variables, "dp_after_exposed", after, backward_window, layers, overlap
    )
    exposed_before = _exposed_once(
        variables, "dp_before_exposed", before, forward_window, layers, overlap
    )

    micro_batches = variables.new_int(
        "micro_batches_value", max(variables.domains["micro_batches"]), 1
    )
    m.Add(micro_batches == variables.value("micro_batches"))
    comm_all = variables.new_int(
        "dp_per_step_comm", variables.ub(micro_batches) * variables.ub(per_mb)
    )
    m.AddMultiplicationEquality(comm_all, [micro_batches, per_mb])
    exposed_mb = variables.new_int("dp_micro_batch_exposed", variables.ub(comm_all))
    window_step = linear([(1, compute_step)] + offload_step)
    if overlap is not None:
        m.Add(exposed_mb >= comm_all - window_step).OnlyEnforceIf(overlap)
        m.Add(exposed_mb >= comm_all).OnlyEnforceIf(overlap.Not())
    else:
        m.Add(exposed_mb >= comm_all)

    optimizer = tables.optimizer()
    dp_exposed = (exposed_after, exposed_before, exposed_mb)
    step_terms = [pipeline, *dp_exposed, optimizer]
    step = variables.new_int("step", min(INT_LIMIT, sum(variables.ub(v) for v in step_terms)))
    m.Add(step == sum(step_terms))
    return StepVariables(step=step, pipeline=pipeline, dp_exposed=dp_exposed, optimizer=optimizer)


def _pipeline_terms(
    p, v, layers, per_block, per_block_step, head, message, head_step, message_step
) -> list[tuple[int, cp_model.IntVar]]:
    """p·v × pipeline, as (coefficient, variable) terms (see the module docstring)."""
    pv = p * v
    terms = [(pv * coef, var) for coef, var in per_block_step]
    terms += [(pv * p, head_step)]
    terms += [((p - 1) * layers * coef, var) for coef, var in per_block]
    terms += [(p * (p - 1), head)]
    if p > 1:
        terms += [(2 * pv * pv, message_step), (2 * pv * (p - 1), message)]
    return [(coef, var) for coef, var in terms if coef]


def _exposed_once(
    variables: Variables,
    name: str,
    comm: cp_model.IntVar,
    window: list[tuple[int, cp_model.IntVar]],
    layers: int,
    overlap: cp_model.IntVar | None,
) -> cp_model.IntVar:
    """max(0, comm − (L/p)·window) for a once-per-step DP transfer: p·x ≥ p·comm − L·window
    under each pp literal when overlapping, x ≥ comm otherwise."""
    m = variables.model
    exposed = variables.new_int(name, variables.ub(comm))
    if overlap is None:
        m.Add(exposed >= comm)
        return exposed
    m.Add(exposed >= comm).OnlyEnforceIf(overlap.Not())
    for p, chosen in zip(variables.domains["pp"], variables.onehot["pp"], strict=True):
        m.Add(p * exposed >= p * comm - layers * linear(window)).OnlyEnforceIf([overlap, chosen])
    return exposed
