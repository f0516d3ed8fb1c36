"""What the three launch formats share: the ``LaunchConfig`` result, the reader's intermediate
``Parsed`` record, and the steps every reader ends with (the model, the GPU count, dp).

Planner's strategy maps onto a framework's configuration knob by knob (each format module holds
its own table, with the version of the framework it was taken from). What a framework cannot
express is said in ``notes``, one line each, starting with the planner knob it is about
(``zero_stage = 1: ...``), never dropped silently. On reading, the flags or keys planner does not
use are listed in ``unsupported``; they are not errors.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from planner.errors import InputError
from planner.specs import (
    ARCHITECTURE_FIELDS,
    MODEL_NAMING_FIELDS,
    OFFLOAD_KINDS,
    PLACEMENT_CODES,
    RECOMPUTE_CODES,
    JobSpec,
    ModelSpec,
    Strategy,
    SystemSpec,
)
from planner.specs import limits as lim
from planner.specs.quantities import OFFLOAD_STEPS

NOT_SHAPE_FIELDS = (*MODEL_NAMING_FIELDS, *ARCHITECTURE_FIELDS, "seq_len")
SHAPE_FIELDS = tuple(name for name in ModelSpec.model_fields if name not in NOT_SHAPE_FIELDS)
"""The ModelSpec fields that make a model's shape (a configuration that gives the same values as
a catalog model reads as that model): every field but its naming, its sources, its default
sequence and its architecture (norm, positions, biases: checked apart, planner.launch.settle),
so a field added to ModelSpec takes part without being listed twice."""

HOST_WORDS = ("host", "cpu", "ddr", "dram")
MAX_WHOLE = 2**63 - 1
"""The largest whole number a configuration may state (any field then checks its own range)."""
PIN_FIELDS = (
    "tp", "cp", "pp", "dp", "ep", "expert_tp", "micro_batch", "interleave", "zero_stage",
    "sequence_parallel", "dp_overlap", "tp_overlap",
    *(f"offload_{kind}" for kind in OFFLOAD_KINDS),
)  # fmt: skip
"""The Strategy fields a --pin of the same name states as a whole number."""
Number = TypeVar("Number", int, float, int | None, float | None)


class LaunchConfig(BaseModel):
    """A framework configuration. Emitting fills ``text`` and ``notes``; reading fills ``model``,
    ``job`` (the JobSpec fields the configuration states), ``strategy``, ``gpus``, ``notes`` and
    ``unsupported`` (flags or keys planner does not read)."""

    model_config = ConfigDict(frozen=True)

    format: str
    text: str = ""
    notes: list[str] = []
    model: ModelSpec | None = None
    job: dict[str, object] = {}
    strategy: Strategy | None = None
    gpus: int | None = None
    unsupported: list[str] = []


@dataclass
class Parsed:
    """What a reader found before the model and the GPU count are settled.

    ``knobs`` are Strategy fields except dp; ``dp`` is set only where the configuration states it
    (torchtitan's degrees). ``layers_per_virtual_stage`` (with ``extra_stage_layers``, torchtitan's
    first/last-stage weights) gives the interleave once the model's layer count is known.
    """

    fmt: str
    shape: dict[str, object] = field(default_factory=dict)
    job: dict[str, object] = field(default_factory=dict)
    knobs: dict[str, object] = field(default_factory=dict)
    dp: int | None = None
    gpus: int | None = None
    gpus_from: str = ""
    layers_per_virtual_stage: int | None = None
    extra_stage_layers: int = 0
    end_stage_layers: tuple[int | None, int | None] = (None, None)
    """Blocks on the first and the last pipeline stage where the configuration states them
    (Megatron's --decoder-first/last-pipeline-num-layers); the stages between share the rest."""
    layout: str | None = None
    """Megatron-Core's --pipeline-model-parallel-layout string, where given (read against pp:
    planner.specs.layouts)."""
    virtual_less_layers: tuple[int, int] = (0, 0)
    """torchtitan's first/last_stage_less_layers with layers per virtual stage: the first and
    last virtual stage that much lighter (settle gives the virtual stages)."""
    embedding_loss_slots: tuple[bool, bool] = (False, False)
    """Megatron-Core's --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split."""
    recompute_layers_per_chunk: int | None = None
    """Blocks fully recomputed per model chunk (Megatron's block method), where stated; the
    strategy's recompute_layers is this times the interleave."""
    global_per_dp: int | None = None
    """torchtitan without a global batch: sequences per DP rank (global = this · dp)."""
    dp_multiple: int = 1
    """dp must be a multiple of this (torchtitan's replicate degree, shard degree leftover)."""
    architecture: dict[str, object] = field(default_factory=dict)
    """The model's ARCHITECTURE_FIELDS as the configuration states them (settle checks them
    against the model and builds a model read from its shape with them)."""
    unknown_model: str | None = None
    """Why the configuration's model is not known (an error unless --model is given)."""
    notes: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)


def shown(value: object, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters with an ellipsis (a message stays one short
    line whatever a file holds)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def positive(where: str, value: int | None) -> int | None:
    """``value`` unchanged when absent or ≥ 1; else an InputError naming ``where``."""
    if value is not None and value < 1:
        raise InputError(f"{where} = {value}: must be at least 1")
    return value


def in_range(where: str, value: Number, low: float, high: float) -> Number:
    """``value`` unchanged when absent or in [``low``, ``high``] (planner.specs.limits' physical
    bounds); else an InputError naming ``where``, the value and the range. Readers bound a count
    before they build anything its size (a list of pp stages, a pattern of layers)."""
    if value is not None:
        try:
            lim.check_range(where, value, low, high)
        except ValueError as error:
            raise InputError(str(error)) from None
    return value


def bounded_whole(where: str, value: int) -> int:
    """``value`` unchanged when it fits in 64 bits (the largest count any field allows is far
    smaller; planner.specs.limits); else an InputError naming ``where`` with the value cut short."""
    if abs(value) > MAX_WHOLE:
        raise InputError(f"{where} = {shown(value)}: too large (at most {MAX_WHOLE:,})")
    return value


def finite(where: str, value: float | None) -> float | None:
    """``value`` unchanged when absent or finite; else an InputError naming ``where`` (no
    infinity or NaN from a configuration reaches the cost model)."""
    if value is not None and not math.isfinite(value):
        raise InputError(f"{where} = {value}: expected a finite number")
    return value


def host_tier(system: SystemSpec) -> int | None:
    """The index of the system's first offload tier that is host (CPU) memory, the only place a
    framework's CPU offloading can put tensors; None when the system has none."""
    for index, tier in enumerate(system.offload_tiers, start=1):
        if any(word in tier.name.lower() for word in HOST_WORDS):
            return index
    return None


def place_on_host(parsed: Parsed, system: SystemSpec, knobs: list[str]) -> None:
    """Read CPU offloading of ``knobs`` into the system's host-memory tier, or, where the system
    has none, a note that says it was ignored."""
    host = host_tier(system)
    for knob in knobs:
        if host is None:
            parsed.notes.append(
                f"{knob}: system {system.name!r} has no host-memory tier; CPU offloading ignored"
            )
            parsed.knobs.pop(f"{knob}_fraction", None)
        else:
            parsed.knobs[knob] = host


def read_offload_fraction(parsed: Parsed, knob: str, value: float | None, where: str) -> bool:
    """Read a framework's offload fraction of ``knob`` (``where``: its flag or key, a share in
    [0, 1]) into ``<knob>_fraction``, snapped to the nearest 1/8 (a note says so when it moved);
    False when it offloads nothing."""
    if value is None:
        return True
    in_range(where, value, 0, 1)
    if not value > 0:
        parsed.notes.append(f"{knob}_fraction = {value:g}: nothing offloaded")
        return False
    eighths = max(1, round(value * OFFLOAD_STEPS))
    if eighths != value * OFFLOAD_STEPS:
        parsed.notes.append(
            f"{knob}_fraction = {value:g}: planner offloads in steps of 1/{OFFLOAD_STEPS}; "
            f"read as {eighths}/{OFFLOAD_STEPS}"
        )
    parsed.knobs[f"{knob}_fraction"] = eighths / OFFLOAD_STEPS
    return True


def host_offloads(
    strategy: Strategy, system: SystemSpec, framework: str, fractions: frozenset[str] = frozenset()
) -> tuple[set[str], list[str]]:
    """The offload knobs the strategy sends to the host tier (what a framework's CPU offloading
    can express), and a note for each knob sent to a tier that is not host memory and for each
    share below 1 of a knob outside ``fractions`` (those the framework offloads in part)."""
    host = host_tier(system)
    to_host: set[str] = set()
    notes: list[str] = []
    for knob in ("offload_weights", "offload_activations", "offload_optimizer"):
        tier = getattr(strategy, knob)
        fraction = getattr(strategy, f"{knob}_fraction")
        if tier and fraction < 1 and knob not in fractions:
            notes.append(
                f"{knob}_fraction = {fraction:g}: {framework} offloads the whole tensor class "
                "(or whole layers), not a share of every block's tensors; emitted as all of it"
            )
        if tier and tier == host:
            to_host.add(knob)
        elif tier:
            name = system.memory_tiers[tier].name
            notes.append(
                f"{knob} = {tier}: tier {name!r} is not host memory; {framework} offloads to "
                "CPU memory only — not expressible, left out"
            )
    return to_host, notes


Pins = dict[str, int]


@dataclass(frozen=True)
class Restriction:
    """What a framework can run: the union of ``parts`` (each extra pins on the plan's space;
    one empty part: the whole space), with one line per value left out (``caps``)."""

    parts: tuple[Pins, ...] = ({},)
    caps: tuple[str, ...] = ()

    def times(self, alternatives: tuple[Pins, ...], cap: str | None = None) -> Restriction:
        """Every part combined with each of ``alternatives`` (a knob's allowed values, as
        pins), and ``cap`` stated."""
        parts = tuple(part | extra for part in self.parts for extra in alternatives)
        return Restriction(parts, self.caps + ((cap,) if cap else ()))

    def pinned(self, pins: Pins, cap: str | None = None) -> Restriction:
        """Every part with ``pins`` added, and ``cap`` stated."""
        return self.times((pins,), cap)

    def admits(self, strategy: Strategy) -> bool:
        """Whether every pin of some part holds for ``strategy`` (read as plan's --pin)."""
        values = pin_values(strategy)
        return any(all(values[k] == v for k, v in part.items()) for part in self.parts)


def pin_values(strategy: Strategy) -> Pins:
    """Each pinnable knob's value in ``strategy``, coded as a --pin gives it (recompute and
    placement by their codes, booleans 0/1, no partial recompute 0, offload shares in
    eighths)."""
    values = {
        name: int(value)
        for name, value in strategy.model_dump().items()
        if isinstance(value, int | bool) and name in PIN_FIELDS
    }
    values |= {
        "recompute": RECOMPUTE_CODES[strategy.recompute],
        "placement": PLACEMENT_CODES[strategy.placement],
        "recompute_layers": strategy.recompute_layers or 0,
    }
    for kind in OFFLOAD_KINDS:
        share = getattr(strategy, f"offload_{kind}_fraction")
        values[f"offload_{kind}_fraction"] = round(share * OFFLOAD_STEPS)
    return values


NO_OFFLOAD: Pins = {f"offload_{kind}": 0 for kind in OFFLOAD_KINDS}
"""Pins that keep every tensor class in HBM."""


def host_offload_only(system: SystemSpec, knob: str, whole: bool) -> tuple[Pins, ...]:
    """The values of offload knob ``knob`` a framework with CPU offloading only can take: none,
    or the system's host-memory tier (the whole class where ``whole``). One alternative where
    that is already the whole domain (no offload tier, or the host tier the only one, shares
    free)."""
    host = host_tier(system)
    tiers = len(system.memory_tiers) - 1
    if host is None:
        return ({knob: 0},) if tiers else ({},)
    in_host: Pins = {knob: host} | ({f"{knob}_fraction": OFFLOAD_STEPS} if whole else {})
    if tiers == 1 and not whole:
        return ({},)
    return ({knob: 0}, in_host)


def megatron_core_restriction(
    system: SystemSpec, placements: tuple[Pins, ...], placement_cap: str
) -> Restriction:
    """What Megatron-LM and NeMo (both Megatron-Core) run of planner's space: the rank orders
    ``placements`` allows; sequence parallelism on (TransformerConfig: tp_comm_overlap needs
    it); no weight or activation offloading (cpu_offloading moves whole layers, and
    TransformerConfig refuses it with pipeline parallelism or recompute); the optimizer state
    offloaded, any share, to host memory only (optimizer_cpu_offload)."""
    optimizer = host_offload_only(system, "offload_optimizer", whole=False)
    restricted = Restriction().times(placements, placement_cap)
    restricted = restricted.pinned(
        {"offload_weights": 0, "offload_activations": 0, "sequence_parallel": 1},
        "sequence parallelism on (TP communication overlap needs it); no weight or activation "
        "offloading (cpu_offloading moves whole layers, and Megatron-Core refuses it with "
        "pipeline parallelism or recompute)",
    )
    if optimizer == ({},):
        return restricted
    where = "the host-memory tier only" if len(optimizer) > 1 else "nowhere (no host tier)"
    return restricted.times(optimizer, f"optimizer state offloaded to {where}")


EXPERT_COUNTS = (
    "experts_per_token",
    "expert_ffn_hidden",
    "shared_experts",
    "expert_groups",
    "expert_groups_per_token",
)
"""The whole-number MoE fields a configuration states beside the expert count and the layer
pattern (read_experts)."""


def read_experts(
    parsed: Parsed,
    experts: int,
    found: dict[str, object],
    dispatcher: str | None,
    names: dict[str, str],
    prefix: str,
) -> None:
    """The MoE shape of Megatron-Core's fields, as Megatron-LM's flags or NeMo's keys give them
    (``found``: the EXPERT_COUNTS and ``dense_layers``, the ``moe_layer_freq``; ``names`` their
    flags or keys, ``prefix`` how a message names one). The router's top-k defaults to 2
    (TransformerConfig's); the shared experts' total width is read as a count of experts of the
    routed width; a dispatcher other than the all-to-all is costed as it."""
    shape = parsed.shape
    shape["experts"] = experts
    for name in ("expert_ffn_hidden", "expert_groups"):
        positive(prefix + names[name], found[name])  # type: ignore[arg-type]
    shared = found["shared_experts"]
    if isinstance(shared, int) and shared < 0:
        raise InputError(f"{prefix}{names['shared_experts']} = {shared}: must be at least 0")
    per_token = found["experts_per_token"]
    shape["experts_per_token"] = 2 if per_token is None else per_token
    width, ffn = found["expert_ffn_hidden"], shape.get("ffn_hidden")
    shape["expert_ffn_hidden"] = 0 if width is None or width == ffn else width
    expert_width = width or ffn
    if width is None:
        positive(prefix + names["ffn_hidden"], ffn)  # type: ignore[arg-type]
    if isinstance(shared, int) and shared and isinstance(expert_width, int):
        count = max(1, round(shared / expert_width))
        shape["shared_experts"] = count
        if count * expert_width != shared:
            parsed.notes.append(
                f"shared_experts: {prefix}{names['shared_experts']} {shared} costed as {count} "
                f"shared expert(s) of the routed experts' width {expert_width}"
            )
    layers, frequency = shape.get("layers"), found["dense_layers"]
    if frequency is not None and isinstance(layers, int):
        in_range(prefix + names["layers"], layers, 1, lim.MAX_LAYERS)
        where = prefix + names["dense_layers"]
        shape["dense_layers"] = dense_layers(frequency, layers, parsed, where)
    groups = found["expert_groups"]
    if isinstance(groups, int) and groups > 1:
        shape["expert_groups"] = groups
        limited = found["expert_groups_per_token"]
        shape["expert_groups_per_token"] = groups if limited is None else limited
    if dispatcher not in (None, "alltoall", "flex"):
        parsed.notes.append(f"ep: the {dispatcher} token dispatcher costed as the all-to-all")


def read_latent_attention(parsed: Parsed, ranks: dict[str, int | None]) -> None:
    """The multi-latent-attention shape from Megatron-Core's fields: ``ranks`` holds
    ``kv_lora_rank``, ``q_lora_rank`` (None: no query compression), and ``head_dim``,
    ``rope_head_dim``, ``v_head_dim`` (None: MLATransformerConfig's 128, 64, 128)."""
    defaults = {"head_dim": 128, "rope_head_dim": 64, "v_head_dim": 128}
    parsed.shape |= {
        "kv_lora_rank": ranks["kv_lora_rank"],
        "q_lora_rank": ranks["q_lora_rank"] or 0,
        **{
            name: default if ranks[name] is None else ranks[name]
            for name, default in defaults.items()
        },
    }


def dense_layers(pattern: object, layers: int, parsed: Parsed, where: str) -> int:
    """Dense blocks of Megatron-Core's ``moe_layer_freq`` (``where`` names the flag or key): an
    int k (every k-th block, from the first, is MoE), a list of 0/1 per block, or such a list
    as an expression (``[0]*3+[1]*58``, ``([1]*3+[0])*4``, Megatron-LM's command line), read
    with a small safe evaluator (lists, ints, + and *), never ``eval``. Dense blocks that do not
    all come first are costed as if they did (a note says so)."""
    where = f"{where} = {shown(pattern)}"
    if isinstance(pattern, str):
        try:
            pattern = _layer_pattern(ast.parse(pattern.strip(), mode="eval").body, layers)
        except RecursionError:
            raise InputError(f"{where}: nested too deeply") from None
        except (SyntaxError, ValueError) as error:
            raise InputError(
                f"{where}: {error}; expected an int or a list like [0]*3+[1]*58"
            ) from None
    if type(pattern) is int:
        if pattern < 1:
            raise InputError(f"{where}: must be at least 1")
        pattern = [1 if block % pattern == 0 else 0 for block in range(layers)]
    if (
        not isinstance(pattern, list)
        or len(pattern) != layers
        or any(type(value) is not int or value not in (0, 1) for value in pattern)
    ):
        raise InputError(f"{where}: expected an int or {layers} entries of 0 or 1")
    dense = pattern.count(0)
    if pattern != [0] * dense + [1] * (layers - dense):
        parsed.notes.append(
            f"dense_layers: {where} interleaves dense blocks; costed as its {dense} dense "
            "blocks first"
        )
    return dense


def _layer_pattern(node: ast.expr, limit: int) -> int | list[int]:
    """An int or a list of ints from a tree of list literals, ints, + and * (lists at most
    ``limit`` long, so a pattern cannot blow up)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.List):
        values = [_layer_pattern(item, limit) for item in node.elts]
        if not all(isinstance(value, int) for value in values):
            raise ValueError("nested lists")
        return values  # type: ignore[return-value]
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, ast.Add | ast.Mult):
            raise ValueError("only + and * are allowed")
        left, right = _layer_pattern(node.left, limit), _layer_pattern(node.right, limit)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            result = left + right
        elif isinstance(node.op, ast.Mult) and isinstance(left, list) != isinstance(right, list):
            items, times = (left, right) if isinstance(left, list) else (right, left)
            if not 0 <= times <= limit:  # type: ignore[operator]
                raise ValueError(f"repeat count {times} out of range")
            result = items * times  # type: ignore[operator]
        else:
            raise ValueError("only list + list and list * int are allowed")
        if len(result) > limit:
            raise ValueError(f"more than {limit} entries")
        return result
    raise ValueError(f"unexpected {type(node).__name__}")


def refuse_precision(fmt: str, job: JobSpec, cannot: tuple[str, ...], edges: bool) -> None:
    """A one-line InputError where ``plan --emit fmt`` cannot state the job's precision
    recipe (``cannot``), or its bf16 first/last blocks (``edges`` False)."""
    if job.precision in cannot:
        raise InputError(
            f"--emit {fmt}: precision = {job.precision}: {fmt} has no such recipe; allowed: "
            f"any other (`planner catalog precisions`)"
        )
    if not edges and job.precision != "bf16" and (job.bf16_first_blocks or job.bf16_last_blocks):
        raise InputError(
            f"--emit {fmt}: bf16_first_blocks / bf16_last_blocks: {fmt} has no such setting; "
            "allowed: 0"
        )
