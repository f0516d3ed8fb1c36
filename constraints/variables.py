"""The decision variables of the CP-SAT model and the two ways terms are linked to them.

Every knob is a one-hot vector of booleans over its domain (exactly one true), with its index
and value as linear expressions of them. dp, the micro-batch count n and the (pp, interleave)
pair are one-hot too. A cost term that depends on a few knobs is tabulated with the cost model
over the product of those knobs' domains and tied to an integer variable, by a table of allowed
(positions..., value) tuples over per-knob position variables, or (spaces with expert layouts) by
``AddElement`` on the linear index of the knobs (DESIGN.md §5; Variables.table): the model grows
with the sum of the tables, not with the product of all domains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from planner.errors import InputError
from planner.space.rules import divisors
from planner.space.search_space import SearchSpace

MAX_TABLE_ENTRIES = 1_000_000
"""Cost-table entries one model may hold. Catalog problems need 10^3–10^5; past 10^6 the
tables take longer to evaluate and load than any time limit a user would set (a 720,720-GPU
problem with 240 micro-batch candidates needed ~10^7 and stalled building for minutes)."""


class ModelTooLarge(InputError):
    """The problem's search space is too large to tabulate: one line saying what to narrow."""


GPU_FACTORS = ("tp", "cp", "pp", "dp")
"""The knobs whose product is the GPU count."""

INT_LIMIT = (1 << 62) - 1
"""Largest bound of an integer variable: CP-SAT requires domains inside ±(2^63 − 1)/2."""
LOG_SCALE = 10**10
"""Scale of log_gpu_count: ln((N+1)/N) > 10^-7 for N < 10^7, i.e. > 1000 units, against a
rounding error of at most 1.5 units."""


@dataclass(frozen=True)
class Family:
    """A named constraint family, switched on by an assumption literal."""

    name: str
    label: str
    literal: cp_model.IntVar


@dataclass
class Variables:
    """All decision variables of one planning model."""

    model: cp_model.CpModel
    space: SearchSpace
    onehot: dict[str, list[cp_model.IntVar]] = field(default_factory=dict)
    domains: dict[str, tuple[int, ...]] = field(default_factory=dict)
    pairs: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    families: dict[str, Family] = field(default_factory=dict)
    upper_bounds: dict[int, int] = field(default_factory=dict)
    counts: dict[str, cp_model.IntVar] = field(default_factory=dict)
    relaxable: frozenset[str] | None = None
    """Families that may end up off (dropped, or assumptions): None means all of them."""
    entries: int = 0
    """Table entries so far (reserve_entries)."""
    positions: dict[str, cp_model.IntVar] = field(default_factory=dict)
    """Per knob, an integer variable equal to the chosen value's position in its domain (the
    tables' index, created on first use)."""
    pending: dict[tuple[str, ...], list[tuple[cp_model.IntVar, np.ndarray]]] = field(
        default_factory=dict
    )
    """Tables not yet in the model, by the knobs they vary along (add_tables)."""
    tabulated: int = 0
    """Cost values the tables tie to variables (after varying_axes)."""

    @classmethod
    def create(
        cls,
        model: cp_model.CpModel,
        space: SearchSpace,
        global_batch: int,
        relaxable: frozenset[str] | None = None,
    ) -> Variables:
        variables = cls(model=model, space=space, relaxable=relaxable)
        for name, domain in space.domains.items():
            variables.add_onehot(name, domain)
        variables.add_onehot("micro_batches", tuple(divisors(global_batch)))
        variables.add_pairs()
        return variables

    def add_onehot(self, name: str, domain: tuple[int, ...]) -> None:
        bools = [self.model.NewBoolVar(f"{name}={value}") for value in domain]
        self.model.AddExactlyOne(bools)
        self.onehot[name] = bools
        self.domains[name] = domain

    def add_pairs(self) -> None:
        """One literal per (pp, interleave) pair: the product of the two one-hots. Interleave
        v > 1 is only paired with a pp > 1 that has a layout admitting it (Layout.admits: the
        even layout whose layers per stage v divides, or Megatron-Core's embedding/loss
        slots)."""
        for a, p in enumerate(self.domains["pp"]):
            for c, v in enumerate(self.domains["interleave"]):
                if any(x.pp == p and x.admits(v) for x in self.space.layouts):
                    self.pairs[(a, c)] = self.model.NewBoolVar(f"pp={p},interleave={v}")
        for a in range(len(self.domains["pp"])):
            row = [lit for (i, _), lit in self.pairs.items() if i == a]
            self.model.Add(sum(row) == self.onehot["pp"][a])
        for c in range(len(self.domains["interleave"])):
            column = [lit for (_, j), lit in self.pairs.items() if j == c]
            self.model.Add(sum(column) == self.onehot["interleave"][c])
        self.add_layouts()

    def add_layouts(self) -> None:
        """Each layout fixes pp (the layout literals of a pp sum to its literal) and admits
        only some interleaves (Layout.admits): a slot layout its own, v > 1 an even layout
        (Megatron's virtual stages split equal stages) or a slot layout of that v."""
        layouts = self.space.layouts
        chosen = list(zip(self.onehot["layout"], layouts, strict=True))
        for a, p in enumerate(self.domains["pp"]):
            mine = [lit for lit, layout in chosen if layout.pp == p]
            self.model.Add(sum(mine) == self.onehot["pp"][a])
        for lit, layout in chosen:
            admitted = [
                self.onehot["interleave"][c]
                for c, v in enumerate(self.domains["interleave"])
                if layout.admits(v)
            ]
            if len(admitted) < len(self.domains["interleave"]):
                self.model.AddBoolOr([lit.Not(), *admitted])

    def layout_interleaves(self):
        """(layout, v, [layout literal, interleave literal]) for every admissible pair
        (Layout.admits)."""
        for i, layout in enumerate(self.space.layouts):
            for c, v in enumerate(self.domains["interleave"]):
                if layout.admits(v):
                    literals = [self.onehot["layout"][i], self.onehot["interleave"][c]]
                    yield layout, v, literals

    @property
    def partial_recompute(self) -> bool:
        """Whether partial recompute (recompute_layers > 0) is in the space."""
        return self.domains["recompute_layers"] != (0,)

    def partial_literal(self) -> cp_model.IntVar | None:
        """The literal 'recompute_layers > 0' (None when it cannot be)."""
        if not self.partial_recompute:
            return None
        whole = self.is_value("recompute_layers", 0)
        return whole.Not() if whole is not None else self.model.NewConstant(1)

    def recomputed_blocks(self) -> cp_model.IntVar:
        """An integer variable equal to recompute_layers (created once)."""
        if "recompute_layers" not in self.counts:
            count = self.new_int("recompute_layers_value", max(self.domains["recompute_layers"]))
            self.model.Add(count == self.value("recompute_layers"))
            self.counts["recompute_layers"] = count
        return self.counts["recompute_layers"]

    def always_on(self, name: str) -> bool:
        """Whether family ``name`` will be fixed true in this model (so its bound may be
        written into variable domains, which the solver propagates better)."""
        return self.relaxable is not None and name not in self.relaxable

    def family(self, name: str, label: str) -> cp_model.IntVar:
        """The assumption literal of a constraint family (created on first use)."""
        if name not in self.families:
            literal = self.model.NewBoolVar(f"family:{name}")
            self.families[name] = Family(name=name, label=label, literal=literal)
        return self.families[name].literal

    def value(self, name: str) -> cp_model.LinearExpr:
        return sum(v * b for v, b in zip(self.domains[name], self.onehot[name], strict=True))

    def index(self, name: str) -> cp_model.LinearExpr:
        return sum(i * b for i, b in enumerate(self.onehot[name]))

    def is_value(self, name: str, value: int) -> cp_model.IntVar | None:
        """The literal 'knob == value', or None if the value is outside the domain."""
        domain = self.domains[name]
        return self.onehot[name][domain.index(value)] if value in domain else None

    def exponent(self, name: str, prime: int) -> cp_model.LinearExpr:
        """The exponent of ``prime`` in the knob's value (linear in the one-hot)."""
        return sum(
            prime_exponent(value, prime) * b
            for value, b in zip(self.domains[name], self.onehot[name], strict=True)
        )

    def reserve_entries(self, knobs: tuple[str, ...]) -> None:
        """Count a table over ``knobs`` against MAX_TABLE_ENTRIES before it is evaluated;
        raise ModelTooLarge, naming the largest domains, if the model would outgrow it."""
        self.entries += math.prod(len(self.domains[k]) for k in knobs)
        if self.entries > MAX_TABLE_ENTRIES:
            sizes = sorted(
                ((len(values), name) for name, values in self.space.domains.items()),
                reverse=True,
            )
            largest = ", ".join(f"{name} ({count} values)" for count, name in sizes[:3])
            raise ModelTooLarge(
                f"the search space needs more than {MAX_TABLE_ENTRIES:,} table entries; its "
                f"largest domains: {largest}; narrow them (--max-micro-batch, "
                "--max-interleave, --pin) or pick a GPU count and batch with fewer divisors"
            )

    def table(self, name: str, knobs: tuple[str, ...], values: np.ndarray) -> cp_model.IntVar:
        """An integer variable equal to ``values[i_1, ..., i_k]`` at the knobs' indices.

        Knobs the (integer) table does not vary along are dropped first (``varying_axes``):
        the constraint is the same function, over a shorter index. The variable's domain is the
        table's range, so the objective has a bound before any knob is chosen (the README's
        main job: 92 % of the optimum at the root; with 0 in every domain it was 0).

        The tables that vary along the same knobs become one constraint of allowed (positions...,
        value, value, ...) tuples over the knobs' position variables (add_tables, once every
        table is made); where the space holds expert layouts (more than one ep), each is an
        element constraint on the flattened index. Measured (2 cores, one run each), allowed
        tuples against elements: benchmarks/latency_battery.py --quick, total 66 s → 44 s, p50
        0.32 → 0.21 s, p99 3.7 → 2.2 s, max 6.2 → 5.3 s; benchmarks/plan_latency.py --quick
        median 0.35 → 0.24 s; the README's main job 0.78 → 0.31 s. With expert layouts the tables
        were slower (benchmarks/moe_latency.py: DBRX on 4,096 H100s 3.0 → 4.4 s; DeepSeek-V3 on
        2,048 H800s under hai-llm 7 s → unproven at 60 s), so those keep the element
        constraint. One constraint per set of knobs rather than per table (the README's main
        job: 50 constraints of 17,928 rows → 14 of 4,980; CP-SAT loads it in 0.03 s, not 0.06),
        2 cores, one run each, guided tp then pp (the order then):
        benchmarks/latency_battery.py --quick p50 0.19 → 0.16 s, p99 3.4 → 2.5 s, total 41 →
        36 s; benchmarks/plan_latency.py --quick median ratio 0.90;
        benchmarks/min_hardware_latency.py gpt3-175b fewest GPUs 21.5 → 15.1 s;
        benchmarks/top_k_latency.py main job top 20 9.4 → 8.0 s; but the main job's plan
        itself 0.25 → 0.35 s (its guided search takes longer)."""
        shape = tuple(len(self.domains[k]) for k in knobs)
        table, knobs = varying_axes(np.asarray(values, dtype=np.int64).reshape(shape), knobs)
        order = list(self.domains)
        axes = sorted(range(len(knobs)), key=lambda axis: order.index(knobs[axis]))
        table, knobs = np.transpose(table, axes), tuple(knobs[axis] for axis in axes)
        flat = table.ravel()
        self.tabulated += flat.size
        lower, upper = int(flat.min()), int(flat.max())
        target = self.model.NewIntVar(lower, upper, name)
        self.upper_bounds[target.Index()] = upper
        if lower == upper:
            self.model.Add(target == lower)
            return target
        if len(self.domains["ep"]) > 1:
            strides = np.cumprod((1,) + table.shape[:0:-1])[::-1]
            index = sum(int(n) * self.index(k) for n, k in zip(strides, knobs, strict=True))
            self.model.AddElement(index, [int(x) for x in flat], target)
            return target
        self.pending.setdefault(knobs, []).append((target, flat))
        return target

    def add_tables(self) -> None:
        """The pending tables, one allowed-assignments constraint per set of knobs: the rows
        are the knobs' positions, with every table's value over them as a column."""
        for knobs, columns in self.pending.items():
            shape = tuple(len(self.domains[k]) for k in knobs)
            rows = np.indices(shape).reshape(len(knobs), -1)
            tuples = np.vstack([rows, *(flat for _, flat in columns)]).T.tolist()
            targets = [target for target, _ in columns]
            self.model.AddAllowedAssignments([*map(self.position, knobs), *targets], tuples)
        self.pending.clear()

    def position(self, name: str) -> cp_model.IntVar:
        """The knob's position variable (``positions``), tied to its one-hot."""
        if name not in self.positions:
            var = self.model.NewIntVar(0, len(self.domains[name]) - 1, f"{name}#")
            self.model.Add(var == self.index(name))
            self.positions[name] = var
        return self.positions[name]

    def new_int(self, name: str, upper: int, lower: int = 0) -> cp_model.IntVar:
        bound = min(int(upper), INT_LIMIT)
        var = self.model.NewIntVar(lower, bound, name)
        self.upper_bounds[var.Index()] = bound
        return var

    def micro_batch_count(self) -> cp_model.IntVar:
        """An integer variable equal to n, the micro-batches per step (created once)."""
        if "micro_batches" not in self.counts:
            count = self.new_int("micro_batch_count", max(self.domains["micro_batches"]), 1)
            self.model.Add(count == self.value("micro_batches"))
            self.counts["micro_batches"] = count
        return self.counts["micro_batches"]

    def log_gpu_count(self) -> cp_model.LinearExpr:
        """LOG_SCALE·ln(tp·cp·pp·dp), linear in the one-hots: minimising it minimises the GPU
        count exactly (distinct counts up to 10^7 differ by more than the rounding of the four
        terms) and propagates far better than the product."""
        return sum(
            round(LOG_SCALE * math.log(value)) * chosen
            for name in GPU_FACTORS
            for value, chosen in zip(self.domains[name], self.onehot[name], strict=True)
        )

    def gpu_count(self) -> cp_model.IntVar:
        """An integer variable equal to tp·cp·pp·dp (created once)."""
        if "gpus" not in self.counts:
            m = self.model
            product = None
            for name in GPU_FACTORS:
                value = self.new_int(f"{name}_value", max(self.domains[name]), 1)
                m.Add(value == self.value(name))
                if product is None:
                    product = value
                    continue
                bound = min(self.ub(product) * self.ub(value), INT_LIMIT)
                partial = self.new_int(f"gpus_to_{name}", bound, 1)
                m.AddMultiplicationEquality(partial, [product, value])
                product = partial
            self.counts["gpus"] = product
        return self.counts["gpus"]

    def ub(self, var: cp_model.IntVar) -> int:
        """The upper bound a variable was created with."""
        return self.upper_bounds[var.Index()]

    def assignment(self, solver: cp_model.CpSolver) -> dict[str, int]:
        """The chosen value of every one-hot knob in a solution."""
        return {
            name: next(v for v, b in zip(self.domains[name], bools, strict=True) if solver.Value(b))
            for name, bools in self.onehot.items()
        }


def varying_axes(table: np.ndarray, knobs: tuple[str, ...]) -> tuple[np.ndarray, tuple[str, ...]]:
    """The table without the axes along which it is constant, and the knobs it keeps. A cost
    term is tabulated over every knob it can depend on; on a given problem some do not move it
    (the DP traffic does not depend on cp at a fixed GPU count, where d·cp = N/(t·p), nor on
    the rank order when both orders put the DP group on one network tier). DeepSeek-V3 on
    2,048 H800s: 249,516 table entries → 112,525."""
    keep = [
        axis
        for axis in range(table.ndim)
        if table.shape[axis] > 1 and not np.all(table == np.take(table, [0], axis=axis))
    ]
    index = tuple(slice(None) if axis in keep else 0 for axis in range(table.ndim))
    return table[index], tuple(knobs[axis] for axis in keep)


def prime_exponent(value: int, prime: int) -> int:
    """The exponent of ``prime`` in ``value``."""
    count = 0
    while value % prime == 0:
        value //= prime
        count += 1
    return count


def prime_factors(value: int) -> dict[int, int]:
    """{prime: exponent} of a positive integer."""
    factors: dict[int, int] = {}
    candidate = 2
    while candidate * candidate <= value:
        while value % candidate == 0:
            factors[candidate] = factors.get(candidate, 0) + 1
            value //= candidate
        candidate += 1
    if value > 1:
        factors[value] = factors.get(value, 0) + 1
    return factors


def upper(variables: Variables, terms: list[tuple[int, cp_model.IntVar]]) -> int:
    """Upper bound of Σ coef·var for non-negative variables and coefficients."""
    return sum(coef * variables.ub(var) for coef, var in terms)


def linear(terms: list[tuple[int, cp_model.IntVar]]) -> cp_model.LinearExpr:
    return sum(coef * var for coef, var in terms)


def pair_maximum(
    variables: Variables,
    name: str,
    rows: list[list[list[tuple[int, cp_model.IntVar]]]],
    literals: list[list[cp_model.IntVar]],
    exact: bool,
) -> cp_model.IntVar:
    """max(0, max_i Σ rows[pair][i]) for the pair whose ``literals`` hold (exactly one holds
    wherever the result is used; a row of no terms is 0): one gap variable per column, fixed
    under each pair's literals, and a max equality. ``exact`` False: only lower bounds, which
    minimisation tightens (see objective._exposed_once)."""
    m = variables.model
    width = max(len(row) for row in rows)

    def bound(terms, sign: int) -> int:
        return sum(sign * c * variables.ub(x) for c, x in terms if sign * c > 0)

    highest = max(bound(terms, 1) for row in rows for terms in row)
    result = variables.new_int(name, highest)
    if not exact:
        for row, enforced in zip(rows, literals, strict=True):
            for terms in row:
                if terms:
                    m.Add(result >= linear(terms)).OnlyEnforceIf(enforced)
        return result
    gaps = []
    for i in range(width):
        column = [row[i] if i < len(row) else [] for row in rows]
        lowest = max(bound(terms, -1) for terms in column)
        top = max(bound(terms, 1) for terms in column)
        gap = m.NewIntVar(-lowest, top, f"{name}_gap{i}")
        for terms, enforced in zip(column, literals, strict=True):
            m.Add(gap == linear(terms)).OnlyEnforceIf(enforced)
        gaps.append(gap)
    m.AddMaxEquality(result, [*gaps, 0])
    return result
