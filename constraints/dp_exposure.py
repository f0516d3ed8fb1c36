"""The DP transfers a stage shows per step, as CP-SAT constraints: the encoding of
planner/cost/step.py dp_exposed_s (chunk-by-chunk exposure under an interleaved schedule, the
stack's DP-overlap contention) over the tabulated DP collectives (constraints/tables.py
dp_comm) and the per-block pass tables, for constraints/objective.py."""

from __future__ import annotations

from fractions import Fraction

from ortools.sat.python import cp_model

from constraints.tables import DpCommVariables
from constraints.variables import Variables, linear, pair_maximum, upper


def dp_transfers_shown(
    variables: Variables,
    comm: DpCommVariables,
    comm_all: cp_model.IntVar,
    exposed_mb: cp_model.IntVar,
    backward: list[tuple[int, cp_model.IntVar, int]],
    forward: list[tuple[int, cp_model.IntVar, int]],
    stage_backward: list[tuple[int, cp_model.IntVar, int]],
    stage: str,
    overlap: cp_model.IntVar | None,
    contention: float,
    exact: bool,
) -> cp_model.IntVar:
    """The DP transfers a stage shows per step (step.dp_exposed_s without the latencies): with
    R, G the once-per-step reduction and gather, n·M the per-micro-batch traffic, B and F the
    stage's backward and forward per micro-batch (``backward``, ``forward``: per-block window
    terms as in objective._exposed_once; ``stage_backward`` per stage) and Z = ``exposed_mb``, under
    each (layout, v) pair

        v·after  = max(0, R − B)                                   (v = 1)
                 = max(R, v·R − (v − 1)·p·B)                       (v > 1)
        v·before = max(0, G − F, [v > 1] (2G − p·F), [v > 1] (v·G − (v − 1)·p·F))
        shown    = ⌈((1 − u)·(v·after + v·before + v·Z) + u·v·(R + G + n·M)) / v⌉

    with ``contention`` (the stack's dp_overlap_contention) u as the nearest fraction a/q with
    q ≤ 1000. v is a constant under each pair, so every term is linear with integer
    coefficients there: gaps fixed by the pair's literals, maxima by max equalities, and q·v·shown
    bounded from both sides (the ceiling: at most one unit above the evaluation). Without
    overlap the transfers show whole. ``exact`` False: lower bounds only (see
    objective._exposed_once)."""
    m = variables.model
    reduction, gather = comm.after_backward_s, comm.before_forward_s
    total = [(1, reduction), (1, gather), (1, comm_all)]
    shown = variables.new_int(f"dp_transfers_shown_{stage}", upper(variables, total) + 1)
    if overlap is None:
        m.Add(shown == linear(total))
        return shown
    m.Add(shown == linear(total)).OnlyEnforceIf(overlap.Not())
    pairs = list(variables.layout_interleaves())

    def window(layout, scale: int, per_block, whole) -> list[tuple[int, cp_model.IntVar]]:
        """−scale × (the stage's k blocks of ``per_block`` plus ``whole``)."""
        blocks = layout.stage_blocks(stage)
        terms = [(-scale * blocks * c * layout.pp**w, x) for c, x, w in per_block]
        return terms + [(-scale * c * layout.pp**w, x) for c, x, w in whole]

    after_rows: list[list[list[tuple[int, cp_model.IntVar]]]] = []
    before_rows: list[list[list[tuple[int, cp_model.IntVar]]]] = []
    for layout, v, _ in pairs:
        late = (v - 1) * layout.pp  # chunk steps behind the first-released chunk, times v
        own_f = window(layout, 1, forward, [])
        if v == 1:
            after_rows.append([[(1, reduction), *window(layout, 1, backward, stage_backward)], []])
            before_rows.append([[(1, gather), *own_f], [], []])
            continue
        after_rows.append(
            [[(1, reduction)], [(v, reduction), *window(layout, late, backward, stage_backward)]]
        )
        before_rows.append(
            [
                [(1, gather), *own_f],
                [(2, gather), *window(layout, layout.pp, forward, [])],
                [(v, gather), *window(layout, late, forward, [])],
            ]
        )
    literals = [[overlap, *lits] for _, _, lits in pairs]
    # Without overlap both are 0 (the transfers show whole through ``shown``), not free.
    after = pair_maximum(
        variables,
        f"dp_after_exposed_{stage}",
        [*after_rows, [[], []]],
        [*literals, [overlap.Not()]],
        exact,
    )
    before = pair_maximum(
        variables,
        f"dp_before_exposed_{stage}",
        [*before_rows, [[], [], []]],
        [*literals, [overlap.Not()]],
        exact,
    )
    share = Fraction(contention).limit_denominator(1000)
    a, q = share.numerator, share.denominator
    for (_, v, _), enforced in zip(pairs, literals, strict=True):
        excess = [(q - a, after), (q - a, before), ((q - a) * v, exposed_mb)]
        numerator = [(c, x) for c, x in [*excess, *[(a * v * c, x) for c, x in total]] if c]
        m.Add(q * v * shown >= linear(numerator)).OnlyEnforceIf(enforced)
        if exact:
            m.Add(q * v * shown <= linear(numerator) + q * v - 1).OnlyEnforceIf(enforced)
    return shown
