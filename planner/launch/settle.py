"""From what a launch-format reader parsed to specs: the model (matched against the catalog, or
built from the parsed shape), the job and the strategy, with the notes on what was read, assumed
or left out (settle, used by every format's read)."""

from __future__ import annotations

from pydantic import ValidationError

import hardware_catalog
from planner.errors import InputError, describe_validation_error
from planner.launch.architecture import mismatch_note
from planner.launch.common import SHAPE_FIELDS, LaunchConfig, Parsed, in_range, positive
from planner.specs import (
    ModelSpec,
    Strategy,
    SystemSpec,
)
from planner.specs import limits as lim
from planner.specs.layouts import embedding_loss_layout, parse_megatron_layout


def match_catalog(model: ModelSpec) -> ModelSpec:
    """The catalog model with the same shape (its name, sources and sequence), else ``model``."""
    key = tuple(getattr(model, name) for name in SHAPE_FIELDS)
    for name in hardware_catalog.model_names():
        known = hardware_catalog.load_model(name)
        if tuple(getattr(known, n) for n in SHAPE_FIELDS) == key:
            return known
    return model


def settle(
    parsed: Parsed,
    system: SystemSpec,
    gpus: int | None,
    model: ModelSpec | None,
    missing_hint: dict[str, str],
) -> LaunchConfig:
    """Finish a read: the model (``model`` wins over the configuration's shape, with a note when
    they differ, and another where the configuration's architecture differs from the model's),
    the GPU count (``gpus`` or the configuration's; they must agree), dp and the interleave;
    every contradiction is an InputError of one line."""
    notes = list(parsed.notes)
    where = f"{parsed.fmt} configuration"
    if model is None and parsed.unknown_model:
        raise InputError(f"{parsed.unknown_model}: pass --model")
    if model is None:
        model = _model_from_shape(parsed, missing_hint)
    else:
        differ = [
            f"{name} {parsed.shape[name]} vs {getattr(model, name)}"
            for name in SHAPE_FIELDS
            if name in parsed.shape and parsed.shape[name] != getattr(model, name)
        ]
        if differ:
            notes.append(
                f"model: --model {model.name} wins over the configuration's shape "
                f"({', '.join(differ)})"
            )
    architecture = mismatch_note(parsed.architecture, model, parsed.fmt)
    if architecture is not None:
        notes.append(architecture)
    if gpus is not None and parsed.gpus is not None and gpus != parsed.gpus:
        raise InputError(f"--gpus = {gpus} contradicts the {where}: {parsed.gpus_from}")
    gpus = gpus if gpus is not None else parsed.gpus
    knobs = dict(parsed.knobs)
    for knob, high in (("tp", lim.MAX_GPUS), ("cp", lim.MAX_GPUS), ("pp", lim.MAX_LAYERS)):
        in_range(f"the {where}'s {knob}", knobs.get(knob), 1, high)
    if parsed.layers_per_virtual_stage is not None:
        knobs["interleave"] = _interleave(parsed, model.layers, int(knobs.get("pp", 1)))
        first, last = parsed.virtual_less_layers
        per_stage, pp_ranks = parsed.layers_per_virtual_stage, int(knobs.get("pp", 1))
        stages = pp_ranks * int(knobs["interleave"])
        if (first or last) and stages > 1 and per_stage * stages == model.layers + first + last:
            inner = [per_stage] * (stages - 2)
            knobs["stage_layers"] = (per_stage - first, *inner, per_stage - last)
    tp, cp, pp = (int(knobs.get(k, 1)) for k in ("tp", "cp", "pp"))
    if parsed.end_stage_layers != (None, None):
        knobs["stage_layers"] = _stage_layers(parsed, model.layers, pp)
    if parsed.layout is not None:
        knobs["stage_layers"] = parse_megatron_layout(parsed.layout, pp)
        knobs["interleave"] = len(knobs["stage_layers"]) // pp
    elif any(parsed.embedding_loss_slots):
        v = int(knobs.get("interleave", 1))
        stages = embedding_loss_layout(model.layers, pp, v, *parsed.embedding_loss_slots)
        if len(set(stages)) > 1:
            knobs["stage_layers"] = stages
    if parsed.recompute_layers_per_chunk is not None:
        knobs["recompute_layers"] = _recompute_layers(parsed, knobs, model.layers)
    if gpus is None:
        if parsed.dp is None:
            raise InputError(
                f"the {where} does not give the GPU count: pass --gpus (Megatron-LM: or "
                "torchrun's --nnodes and --nproc-per-node in the file)"
            )
        gpus = tp * cp * pp * parsed.dp
    if gpus % (tp * cp * pp):
        raise InputError(
            f"gpus = {gpus} is not divisible by tp·cp·pp = {tp}·{cp}·{pp} = {tp * cp * pp} "
            f"(from the {where})"
        )
    dp = gpus // (tp * cp * pp)
    if dp % parsed.dp_multiple:
        raise InputError(
            f"dp = {dp} (gpus {gpus} / tp·cp·pp {tp * cp * pp}) is not a multiple of the "
            f"replicate degree {parsed.dp_multiple} (from the {where})"
        )
    if parsed.dp is not None and parsed.dp != dp:
        raise InputError(
            f"tp·cp·pp·dp = {tp}·{cp}·{pp}·{parsed.dp} = {tp * cp * pp * parsed.dp} must equal "
            f"gpus = {gpus} (from the {where})"
        )
    job = dict(parsed.job)
    if "global_batch" not in job and parsed.global_per_dp is not None:
        job["global_batch"] = parsed.global_per_dp * dp
    try:
        strategy = Strategy(**knobs, dp=dp)
    except ValidationError as error:
        raise InputError(describe_validation_error(error, where)) from None
    return LaunchConfig(
        format=parsed.fmt,
        notes=notes,
        model=model,
        job=job,
        strategy=strategy,
        gpus=gpus,
        unsupported=parsed.unsupported,
    )


def _recompute_layers(parsed: Parsed, knobs: dict[str, object], layers: int) -> int | None:
    """Strategy.recompute_layers from the blocks recomputed per model chunk: None (every block)
    where that covers the fullest stage."""
    per_stage = int(parsed.recompute_layers_per_chunk or 0) * int(knobs.get("interleave", 1))
    stages = knobs.get("stage_layers") or (-(-layers // int(knobs.get("pp", 1))),)
    return per_stage if per_stage < max(stages) else None


def _model_from_shape(parsed: Parsed, missing_hint: dict[str, str]) -> ModelSpec:
    for name in ("hidden", "layers", "heads", "ffn_hidden", "vocab"):
        if parsed.shape.get(name) is None:
            raise InputError(
                f"the {parsed.fmt} configuration does not give the model's {name} "
                f"({missing_hint.get(name, name)}): add it or pass --model"
            )
    try:
        spec = ModelSpec(name=f"{parsed.fmt}-config", **parsed.shape, **parsed.architecture)
    except ValidationError as error:
        raise InputError(describe_validation_error(error, f"{parsed.fmt} configuration")) from None
    return match_catalog(spec)


def _stage_layers(parsed: Parsed, layers: int, pp: int) -> tuple[int, ...]:
    """Blocks per stage from the first and last stages' counts, the rest shared equally."""
    first, last = parsed.end_stage_layers
    middle_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if pp < 2 or middle_stages < 1 and rest or middle_stages and (rest < 1 or rest % middle_stages):
        raise InputError(
            f"the {parsed.fmt} configuration's first/last stage layers ({first}, {last}) do not "
            f"leave the other {middle_stages} of pp = {pp} stages an equal share of {layers} "
            "layers"
        )
    share = rest // middle_stages if middle_stages else 0
    inner = [share] * middle_stages
    return tuple(
        ([first] if first is not None else []) + inner + ([last] if last is not None else [])
    )


def _interleave(parsed: Parsed, layers: int, pp: int) -> int:
    """Virtual stages per rank from the layers per virtual stage: exact for Megatron-LM; rounded up
    as torchtitan does when first/last stages carry embedding weights (extra_stage_layers)."""
    per_stage = parsed.layers_per_virtual_stage
    if per_stage is None:
        return 1
    positive(f"the {parsed.fmt} configuration's layers per virtual pipeline stage", per_stage)
    total = layers + parsed.extra_stage_layers
    stages = -(-total // per_stage)
    if (parsed.extra_stage_layers == 0 and total % per_stage) or stages % pp:
        raise InputError(
            f"the {parsed.fmt} configuration's {per_stage} layers per virtual pipeline stage do "
            f"not split {layers} layers evenly over pp = {pp} ranks ({stages} stages)"
        )
    return stages // pp
