"""The search space of a planning problem: each knob's domain, and which strategies count.

The CP-SAT model (constraints/) takes its domains from here. The brute-force oracle
(planner.space.oracle) builds its own, the raw product of knob values inside the same stated caps,
so that every reduction made here is checked against a space that does not make it.

Domains come from the problem: tp, cp and pp range over the divisors of the GPU count (pp at
most the layer count; cp splitting the sequence into 2·cp equal chunks, up to ``max_cp``), the
micro-batch over the divisors of the global batch (up to ``max_micro_batch``), the interleave
over the divisors of the layer count (up to ``max_interleave``), offload knobs over the
system's offload tiers and the eighths of a tensor class in each (specs.offload_code). A few
knobs have no effect in some corners (sequence parallelism, TP overlap and expert TP with
tp = 1; ZeRO and DP overlap where no state is replicated, dp·cp = 1; placement where pp = 1);
the CP-SAT model keeps one canonical value there (constraints.structure.add_canonical, which
argues each), so that distinct strategies differ in something that matters. For a
mixture-of-experts model ep ranges over the divisors of the experts and expert TP over tp (its
code 0) and 1: the two layouts Megatron-Core recipes use (evaluate takes any divisor of tp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import hardware_catalog
from planner.errors import InputError
from planner.space.layouts import Layout, searched_layouts, stage_layouts, with_slot_interleaves
from planner.space.rules import cp_allowed, divisors
from planner.specs import (
    OFFLOAD_KINDS,
    PLACEMENT_CODES,
    RECOMPUTE_CODES,
    JobSpec,
    ModelSpec,
    Strategy,
    SystemSpec,
    offload_code,
    offload_eighths,
    offload_tier,
)
from planner.specs import limits as lim
from planner.specs.quantities import (
    DEFAULT_MAX_STAGE_SKEW,
    DEFAULT_OFFLOAD_STEP,
    MIN_CP_CHUNK_TOKENS,
    OFFLOAD_STEPS,
    parse_eighths,
)

KNOBS = (
    "tp",
    "tp_column",
    "tp_depth",
    "cp",
    "pp",
    "layout",
    "ep",
    "expert_tp",
    "micro_batch",
    "interleave",
    "recompute",
    "recompute_layers",
    "sequence_parallel",
    "zero_stage",
    "offload_weights",
    "offload_activations",
    "offload_optimizer",
    "dp_overlap",
    "tp_overlap",
    "placement",
)
"""The knobs the planner chooses (dp follows from gpus / (tp·cp·pp); ``layout`` indexes
SearchSpace.layouts, the blocks per stage, and fixes pp)."""

FRACTION_PINS = tuple(f"offload_{kind}_fraction" for kind in OFFLOAD_KINDS)
"""Pins on the share of an offload knob (its code carries tier and share)."""

PINNABLE = (*(k for k in KNOBS if k != "layout"), "dp", *FRACTION_PINS)

PIN_LIMITS = {
    "tp": lim.MAX_GPUS,
    "tp_column": lim.MAX_GPUS,
    "tp_depth": lim.MAX_GPUS,
    "cp": lim.MAX_GPUS,
    "pp": lim.MAX_LAYERS,
    "dp": lim.MAX_GPUS,
    "ep": lim.MAX_EXPERTS,
    "expert_tp": lim.MAX_GPUS,
    "micro_batch": lim.MAX_GLOBAL_BATCH,
    "interleave": lim.MAX_LAYERS,
    "recompute_layers": lim.MAX_LAYERS,
    "zero_stage": 3,
    "offload_weights": lim.MAX_MEMORY_TIERS - 1,
    "offload_activations": lim.MAX_MEMORY_TIERS - 1,
    "offload_optimizer": lim.MAX_MEMORY_TIERS - 1,
}
"""The largest value a whole-number pin may take (planner.specs.limits)."""


@dataclass(frozen=True)
class SearchSpace:
    """Knob domains (values, in increasing order) and the user's pins. ``gpus`` fixes the GPU
    count; None leaves it free (tp·cp·pp·dp a multiple of ``gpu_multiple``, at most
    ``max_gpus``), as the minimum-hardware queries need."""

    gpus: int | None
    layers: int
    domains: dict[str, tuple[int, ...]]
    pins: dict[str, int] = field(default_factory=dict)
    max_gpus: int = 0
    gpu_multiple: int = 1
    hardware: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Hardware knobs made decisions (constraints.scales.HARDWARE_KNOBS): name → the grid of
    values; its one-hot knob in ``domains`` ranges over the grid's indices."""
    layouts: tuple[Layout, ...] = ()
    """The stage layouts the ``layout`` knob indexes."""

    @property
    def stage_kinds(self) -> tuple[str, ...]:
        """The stage kinds whose DP exposure the solver encodes: the first and the last, and
        the middle where a layout has a lighter first stage. Elsewhere the middle stages hold
        the first's blocks with fewer parameters (no embedding), hence no more DP traffic under
        the same per-block windows, so the first's exposure bounds theirs."""
        if any(layout.lighter_first for layout in self.layouts):
            return ("first", "middle", "last")
        return ("first", "last")

    def layout_index(self, strategy: Strategy) -> int:
        """The index of the strategy's layout in ``layouts`` (-1 if it is not among them)."""
        wanted = strategy.stage_layers
        for index, layout in enumerate(self.layouts):
            if layout.pp == strategy.pp and layout.stage_layers() == wanted:
                return index
        return -1

    def size(self) -> int:
        """Points in the product of the knob domains (dp excluded when tp·cp·pp·dp is fixed;
        pp counted through the layouts, which fix it)."""
        names = [
            k
            for k in self.domains
            if (k != "dp" or self.gpus is None) and k not in self.hardware and k != "pp"
        ]
        return int(np.prod([len(self.domains[k]) for k in names], dtype=float))


def parse_pin(text: str) -> tuple[str, int]:
    """``tp=8`` → ("tp", 8); ``recompute=full`` → ("recompute", 2); booleans as true/false."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in PINNABLE:
        raise InputError(
            f"--pin {text!r}: expected KNOB=VALUE with KNOB one of {', '.join(PINNABLE)}"
        )
    value = value.strip().lower()
    if name == "recompute":
        if value not in RECOMPUTE_CODES:
            raise InputError(f"--pin {text!r}: recompute is one of none, selective, full")
        return name, RECOMPUTE_CODES[value]
    if name == "placement":
        if value not in PLACEMENT_CODES:
            raise InputError(f"--pin {text!r}: placement is one of {', '.join(PLACEMENT_CODES)}")
        return name, PLACEMENT_CODES[value]
    if name in FRACTION_PINS:
        try:
            return name, parse_eighths(value)
        except ValueError as error:
            raise InputError(f"--pin {text!r}: {error}") from None
    if name in ("sequence_parallel", "dp_overlap", "tp_overlap"):
        if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise InputError(f"--pin {text!r}: {name} is true or false")
        return name, int(value in ("true", "1", "yes", "on"))
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"--pin {text!r}: {name} takes a whole number") from None
    zero_allowed = ("zero_stage", "recompute_layers", "expert_tp")
    low = 0 if name in zero_allowed or name.startswith("offload") else 1
    if not low <= number <= PIN_LIMITS[name]:
        raise InputError(f"--pin {text!r}: {name} is allowed in {low}..{PIN_LIMITS[name]}")
    return name, number


def offload_codes(tiers: int, eighths: tuple[int, ...]) -> tuple[int, ...]:
    """The offload knob's domain with ``tiers`` offload tiers: nothing offloaded, and each
    share in ``eighths`` of the class in each tier (specs.offload_code), in increasing order."""
    codes = {offload_code(t, e) for t in range(1, tiers + 1) for e in eighths}
    return (0, *sorted(codes))


def encoded_pins(pins: dict[str, int] | None) -> dict[str, int]:
    """The user's pins as the knobs encode them: a partial full recompute (recompute full with
    recompute_layers r > 0) is recompute none plus r fully recomputed blocks."""
    pins = dict(pins or {})
    if pins.get("recompute_layers", 0) > 0 and pins.get("recompute") == RECOMPUTE_CODES["full"]:
        pins["recompute"] = RECOMPUTE_CODES["none"]
    return pins


def offload_domain(system: SystemSpec, offload_step: int, pins: dict[str, int]) -> tuple[int, ...]:
    """An offload knob's domain on ``system``: shares in steps of ``offload_step`` eighths in
    every offload tier (offload_codes), plus any share a fraction pin names."""
    shares = set(range(offload_step, OFFLOAD_STEPS + 1, offload_step))
    shares |= {value for name, value in pins.items() if name in FRACTION_PINS}
    return offload_codes(len(system.memory_tiers) - 1, tuple(sorted(shares)))


def pinned_values(space: SearchSpace, name: str, value: int) -> tuple[str, tuple[int, ...]]:
    """(the knob a pin constrains, the knob values it allows): an offload tier pin allows every
    share in that tier, an offload fraction pin (in eighths) that share in every tier; any other
    pin its one value."""
    if name in FRACTION_PINS:
        knob = name.removesuffix("_fraction")
        codes = space.domains[knob]
        return knob, tuple(c for c in codes if offload_tier(c) and offload_eighths(c) == value)
    if name.startswith("offload"):
        return name, tuple(c for c in space.domains[name] if offload_tier(c) == value)
    return name, (value,)


def build_search_space(
    model: ModelSpec,
    system: SystemSpec,
    job: JobSpec,
    gpus: int | None,
    pins: dict[str, int] | None = None,
    max_micro_batch: int = 64,
    max_interleave: int | None = None,
    max_cp: int | None = None,
    max_stage_skew: int = DEFAULT_MAX_STAGE_SKEW,
    prune: bool = True,
    offload_step: int = DEFAULT_OFFLOAD_STEP,
    max_gpus: int | None = None,
    gpu_multiple: int = 1,
) -> SearchSpace:
    """Domains for ``gpus`` GPUs. With ``prune``, tp and pp keep only the values the
        divisibility and placement rules allow (the solver's structural families then cannot fail,
        and its model is smaller); without, every divisor stays and the rules are left to the
        constraint families, so that a conflict can be named. A pinned value outside its domain is
        kept (the solver then reports the conflict) unless it cannot be represented at all. With a
        flash-attention kernel, selective recompute is the same plan as none and is left out
        (under the stack's ``attention_core`` policy; the others keep more or less). An
    overlap the job's stack does not have (StackProfile.dp_overlap, tp_overlap) is off.
    Offload shares are searched in steps of ``offload_step`` eighths; a pinned share is added."""
    pins = encoded_pins(pins)
    stack = hardware_catalog.load_stack(job.stack)
    calculon = stack.arithmetic == "calculon"
    if calculon:  # Calculon's space (rules.calculon_violations): whole classes offloaded
        offload_step = OFFLOAD_STEPS
    seq_len = job.seq_len_for(model)
    tiers = tuple(range(len(system.memory_tiers)))
    offload = offload_domain(system, offload_step, pins)
    if gpus is None:
        limit = max_gpus or system.max_gpus
        if not limit:
            raise InputError("a free GPU count needs an upper bound (--max-gpus)")
        tp_values = tuple(t for t in divisors(model.heads * model.kv_heads) if t <= limit)
        cp_values = tuple(c for c in divisors(seq_len) if c <= limit)
        pp_values = tuple(p for p in divisors(model.layers) if p <= limit)
        dp_values = tuple(d for d in divisors(job.global_batch) if d <= limit)
    else:
        limit = gpus
        tp_values = tuple(divisors(gpus))
        cp_values = tuple(divisors(gpus))
        pp_values = tuple(p for p in divisors(gpus) if p <= model.layers)
        dp_values = tuple(divisors(math.gcd(gpus, job.global_batch)))
    domain = system.network_tiers[0].domain_gpus if len(system.network_tiers) > 1 else None
    # AxoNN's depth group may leave the domain (constraints.structure.add_placement)
    axonn_grid = stack.tp_form == "axonn" and not (model.is_moe or model.is_latent_attention)
    tp_values = _keep_allowed(
        tp_values,
        lambda t: (
            model.splits_over(t)
            and (
                system.tp_across_domain
                or domain is None
                or t <= domain
                or (axonn_grid and t <= model.kv_heads)  # rules.axonn_violations
            )
        ),
        prune,
    )
    pp_values = _keep_allowed(pp_values, lambda p: bool(stage_layouts(model.layers, p)), prune)
    cp_limit = default_max_cp(seq_len) if max_cp is None else max_cp
    cp_values = _keep_allowed(
        tuple(c for c in cp_values if c <= cp_limit), lambda c: cp_allowed(c, seq_len), prune
    )
    flash = job.attention == "flash" and not calculon  # Calculon materialises attention
    # only the attention-core policy's selective recompute is none under flash attention
    same_as_none = flash and stack.selective_policy == "attention_core"
    recompute = (0, 2) if same_as_none and "recompute" not in pins else (0, 1, 2)
    domains: dict[str, tuple[int, ...]] = {
        "tp": tp_values,
        **axonn_domains(model, stack.tp_form == "axonn", tp_values, prune),
        "cp": cp_values,
        "pp": pp_values,
        "dp": dp_values,
        "ep": _expert_parallel_values(model, gpus, limit),
        "expert_tp": (0, 1) if model.is_moe and max(tp_values, default=1) > 1 else (0,),
        "micro_batch": tuple(b for b in divisors(job.global_batch) if b <= max_micro_batch),
        "interleave": tuple(
            v
            for v in divisors(model.layers)
            if v == 1 or (v < model.layers and v <= (max_interleave or v))
        ),
        "recompute": recompute,
        "recompute_layers": (0,),
        "sequence_parallel": (0, 1),
        "zero_stage": (0, 1, 2, 3),
        "offload_weights": offload,
        "offload_activations": offload,
        "offload_optimizer": offload,
        "dp_overlap": (0, 1) if stack.dp_overlap else (0,),
        "tp_overlap": (0, 1) if stack.tp_overlap else (0,),
        "placement": tuple(PLACEMENT_CODES.values()) if len(system.network_tiers) > 1 else (0,),
    }
    for name, value in pins.items():
        if name in FRACTION_PINS:
            if len(tiers) == 1:
                raise InputError(
                    f"--pin {name}={value}/8: system {system.name!r} has no offload tier"
                )
            continue
        if name.startswith("offload"):
            if value not in tiers:
                raise InputError(
                    f"--pin {name}={value}: system {system.name!r} has memory tiers 0..{tiers[-1]}"
                )
            continue
        if name == "zero_stage" and value > 3:
            raise InputError(f"--pin zero_stage={value}: allowed 0..3")
        if value not in domains[name]:
            domains[name] = tuple(sorted({*domains[name], value}))
    if stack.tp_form == "axonn":  # Megatron-AxoNN (rules.axonn_violations): rules as domains
        domains["placement"] = (PLACEMENT_CODES["tp-pp-dp"],)
        domains["cp"] = tuple(c for c in domains["cp"] if c == 1)
        domains["zero_stage"] = tuple(z for z in domains["zero_stage"] if z <= 1)
        domains["sequence_parallel"] = (0,)
        for knob in ("offload_weights", "offload_activations", "offload_optimizer"):
            domains[knob] = (0,)
    # what the stack runs (rules.stack_violations): the rules as domains
    domains["zero_stage"] = tuple(z for z in domains["zero_stage"] if z <= stack.max_zero_stage)
    if not stack.interleaved_schedule:
        domains["interleave"] = (1,)
    if calculon:  # Calculon's space (rules.calculon_violations): the rules as domains
        domains["cp"] = tuple(c for c in domains["cp"] if c == 1)
        domains["zero_stage"] = tuple(z for z in domains["zero_stage"] if z <= 1)
    if not calculon and stack.interleaved_schedule:  # the slots' interleaves of their own
        domains["interleave"] = with_slot_interleaves(
            domains["interleave"], model.layers, domains["pp"], max_interleave, max_stage_skew
        )
    layouts = tuple(
        layout
        for layout in searched_layouts(
            model.layers, domains["pp"], domains["interleave"], max_stage_skew
        )
        if layout.even or not calculon
    )
    domains["layout"] = tuple(range(len(layouts)))
    domains["recompute_layers"] = (
        (0,) if calculon else _partial_recompute_values(domains, pins, layouts)
    )
    return SearchSpace(
        layouts=layouts,
        gpus=gpus,
        layers=model.layers,
        domains=domains,
        pins=pins,
        max_gpus=limit,
        gpu_multiple=gpu_multiple,
    )


def axonn_domains(
    model: ModelSpec, axonn: bool, tp_values: tuple[int, ...], prune: bool
) -> dict[str, tuple[int, ...]]:
    """The domains of AxoNN's grid knobs: (1,) unless the stack runs AxoNN's tensor parallelism
    on a dense model with multi-head or grouped-query attention; then X over the tp values that
    divide the hidden size and the FFN (in_features % X; every tp value without ``prune``), Z
    over the tp values (rules.axonn_violations; the solver's add_axonn forbids the grids a
    tp's shapes or the micro-batch do not allow)."""
    if not axonn or model.is_moe or model.is_latent_attention:
        return {"tp_column": (1,), "tp_depth": (1,)}
    return {
        "tp_column": _keep_allowed(
            tp_values, lambda x: model.hidden % x == 0 and model.ffn_hidden % x == 0, prune
        ),
        "tp_depth": tp_values,
    }


def _expert_parallel_values(model: ModelSpec, gpus: int | None, limit: int) -> tuple[int, ...]:
    """ep's domain: the divisors of the experts that fit in the GPU count (1 for a dense
    model)."""
    if not model.is_moe:
        return (1,)
    return tuple(
        e for e in divisors(model.experts) if e <= limit and (gpus is None or gpus % e == 0)
    )


def _partial_recompute_values(
    domains: dict[str, tuple[int, ...]], pins: dict[str, int], layouts: tuple[Layout, ...]
) -> tuple[int, ...]:
    """0 (no partial recompute) and, where partial recompute can be chosen (full recompute
    offered, recompute not pinned and no offloading possible), 1 .. the most blocks a
    lightest stage holds − 1 (fewer than every stage holds: recomputing them all is full
    recompute). A pinned value is kept (rules name the conflict)."""
    possible = (
        RECOMPUTE_CODES["full"] in domains["recompute"]
        and ("recompute" not in pins or "recompute_layers" in pins)
        and all(
            0 in domains[k] for k in ("offload_weights", "offload_activations", "offload_optimizer")
        )
    )
    largest = max((layout.lightest for layout in layouts), default=1) - 1 if possible else 0
    values = set(range(largest + 1))
    if "recompute_layers" in pins:
        values.add(pins["recompute_layers"])
    return tuple(sorted(values))


UNPRUNED_EXTRA_VALUES = 4
"""Without pruning, a knob keeps every allowed value and this many of the values the rules
forbid (the smallest): enough for a conflict to name the rule, while the model stays the size of
the pruned one (all 240 divisors of 720,720 as tp candidates made a diagnosis model of millions
of table entries that CP-SAT could not even load within its time limit)."""


def _keep_allowed(values: tuple[int, ...], allowed, prune: bool) -> tuple[int, ...]:
    """The values the rule ``allowed`` admits; without ``prune``, also a few it forbids."""
    kept = [v for v in values if allowed(v)]
    if not prune:
        kept += [v for v in values if not allowed(v)][:UNPRUNED_EXTRA_VALUES]
    return tuple(sorted(kept))


def default_max_cp(seq_len: int) -> int:
    """The largest cp searched by default: chunks of at least MIN_CP_CHUNK_TOKENS."""
    return max(1, seq_len // MIN_CP_CHUNK_TOKENS)


def strategy_from_values(values: dict[str, int], space: SearchSpace) -> Strategy:
    """A Strategy from knob values (recompute as its 0/1/2 code, the layout as its index)."""
    names = {code: name for name, code in RECOMPUTE_CODES.items()}
    partial = values.get("recompute_layers", 0)
    offloads = {}
    for kind in OFFLOAD_KINDS:
        code = values[f"offload_{kind}"]
        offloads[f"offload_{kind}"] = offload_tier(code)
        offloads[f"offload_{kind}_fraction"] = (offload_eighths(code) or 8) / OFFLOAD_STEPS
    return Strategy(
        **offloads,
        recompute_layers=partial or None,
        stage_layers=space.layouts[values["layout"]].stage_layers(),
        tp=values["tp"],
        tp_column=values.get("tp_column", 1),
        tp_depth=values.get("tp_depth", 1),
        cp=values["cp"],
        pp=values["pp"],
        dp=values["dp"],
        ep=values.get("ep", 1),
        expert_tp=values.get("expert_tp", 0),
        micro_batch=values["micro_batch"],
        interleave=values["interleave"],
        recompute="full" if partial else names[values["recompute"]],
        sequence_parallel=bool(values["sequence_parallel"]),
        zero_stage=values["zero_stage"],
        dp_overlap=bool(values["dp_overlap"]),
        tp_overlap=bool(values["tp_overlap"]),
        placement=next(n for n, c in PLACEMENT_CODES.items() if c == values.get("placement", 0)),
    )
