"""Megatron-Core's pipeline layouts as Strategy.stage_layers (blocks per virtual stage).

Three ways Megatron-Core states how the blocks sit on the pipeline (NVIDIA/Megatron-LM
@ d98e8a64ddf3, megatron/core/transformer/transformer_block.py get_num_layers_to_build and
transformer_config.py __post_init__, and pipeline_parallel_layer_layout.py):

- ``--decoder-first-pipeline-num-layers F`` / ``--decoder-last-pipeline-num-layers L``: F blocks
  on the first rank, L on the last, the rest evenly over the ranks between; with v virtual
  stages per rank each rank's blocks split evenly over its v chunks (each must divide by v).
  Strategy.stage_layers of pp entries.
- ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``: the
  embedding and the loss count as one layer slot each; the L + e + l slots split evenly over the
  p·v virtual stages, and the first (last) virtual stage builds one block fewer
  (embedding_loss_layout).
- ``--pipeline-model-parallel-layout``: one string, virtual stages separated by ``|`` in
  pipeline order (virtual stage j·p + r is chunk j of rank r), ``E`` the embedding, ``t`` a
  transformer block, ``L`` the loss, ``x*n`` and ``(...)*n`` repetitions, commas cosmetic
  (parse_megatron_layout, megatron_layout_text).
"""

from __future__ import annotations

import re

from planner.errors import InputError

_REPEAT_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_REPEAT_CHAR = re.compile(r"(.)\*(\d+)")

MAX_LAYOUT_CHARS = 1 << 16
"""Longest layout string, as given and once its repetitions are unrolled (65,536 characters):
a layout holds at most planner.specs.limits.MAX_LAYERS blocks, an embedding, a loss and one
``|`` per virtual stage, far fewer. Checked before any repetition is unrolled, so that
``t*99999999999`` is an input error, not a string of a hundred gigabytes."""


def _unrolled(text: str, flat: str, pattern: re.Pattern[str]) -> str:
    """``flat`` with every repetition of ``pattern`` unrolled, once its unrolled length is known
    to stay within MAX_LAYOUT_CHARS (the counts are read as digits, never multiplied out past
    it); a one-line InputError otherwise."""
    length = len(flat)
    for match in pattern.finditer(flat):
        length += len(match.group(1)) * _count(match.group(2)) - len(match.group(0))
        if length > MAX_LAYOUT_CHARS:
            raise InputError(
                f"pipeline layout {_shown(text)}: unrolls to more than {MAX_LAYOUT_CHARS:,} "
                f"characters (repetition {_shown(match.group(0))}); allowed: at most "
                f"{MAX_LAYOUT_CHARS:,}, i.e. repetition counts no larger than the blocks and "
                "stages a model has"
            )
    return pattern.sub(lambda match: match.group(1) * _count(match.group(2)), flat)


def _count(digits: str) -> int:
    """A repetition count, read as at most MAX_LAYOUT_CHARS + 1 (longer digit strings are not
    converted: Python refuses ints of more than 4,300 digits)."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > len(str(MAX_LAYOUT_CHARS)):
        return MAX_LAYOUT_CHARS + 1
    return min(int(digits), MAX_LAYOUT_CHARS + 1)


def _shown(text: str, limit: int = 60) -> str:
    """``repr(text)``, cut to ``limit`` characters with an ellipsis (a one-line message)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def parse_megatron_layout(text: str, pp: int) -> tuple[int, ...]:
    """Blocks per virtual stage of a ``--pipeline-model-parallel-layout`` string (Megatron-Core's
    PipelineParallelLayerLayout.parse_str_to_list: commas dropped, ``(...)*n`` then ``x*n``
    unrolled, stages split at ``|``). The embedding must open the first stage's list and the loss
    close the last's (validate_layer_layout); multi-token-prediction layers (``m``) are not
    modelled. The string, as given and unrolled, is at most MAX_LAYOUT_CHARS long. One-line
    InputError otherwise."""
    if len(text) > MAX_LAYOUT_CHARS:
        raise InputError(
            f"pipeline layout {_shown(text)}: {len(text):,} characters; allowed: at most "
            f"{MAX_LAYOUT_CHARS:,}"
        )
    flat = text.replace(",", "")
    for pattern in (_REPEAT_GROUP, _REPEAT_CHAR):
        flat = _unrolled(text, flat, pattern)
    stages = flat.split("|")
    bad = sorted(set(flat) - set("EtL|"))
    if bad:
        raise InputError(
            f"pipeline layout {_shown(text)}: unknown layer characters {bad}; allowed: E, t, L "
            "(multi-token prediction 'm' is not modelled)"
        )
    if flat.count("E") != 1 or flat.count("L") != 1 or flat[0] != "E" or flat[-1] != "L":
        raise InputError(
            f"pipeline layout {_shown(text)}: the embedding E must open it and the loss L "
            "close it, once each"
        )
    if len(stages) % pp:
        raise InputError(
            f"pipeline layout {_shown(text)}: {len(stages)} virtual stages, not a multiple of "
            f"pp = {pp}"
        )
    return tuple(stage.count("t") for stage in stages)


def megatron_layout_text(virtual_stages: tuple[int, ...]) -> str:
    """The ``--pipeline-model-parallel-layout`` string of blocks per virtual stage, embedding
    first and loss last, runs of equal stages folded as ``(t*2|)*34``."""
    tokens = []
    last = len(virtual_stages) - 1
    for index, blocks in enumerate(virtual_stages):
        body = "t" if blocks == 1 else f"t*{blocks}" if blocks else ""
        tokens.append(("E" if index == 0 else "") + body + ("L" if index == last else ""))
    text, index = "", 0
    while index <= last:
        run = 1
        while index + run < last and tokens[index + run] == tokens[index]:
            run += 1
        if run > 1:  # a folded run, followed by a cosmetic comma as in Megatron's examples
            text += f"({tokens[index]}|)*{run}" + ("," if index + run <= last else "")
        else:
            text += tokens[index] + ("|" if index < last else "")
        index += run
    return text


def embedding_loss_layout(
    layers: int, pp: int, interleave: int, embedding: bool, loss: bool
) -> tuple[int, ...]:
    """Blocks per virtual stage under ``--account-for-embedding-in-pipeline-split`` and/or
    ``--account-for-loss-in-pipeline-split``: S = layers + [embedding] + [loss] slots, S/(p·v) per
    virtual stage, the first one block fewer with the embedding, the last with the loss
    (transformer_block.get_num_layers_to_build; S must divide by p and S/p by v)."""
    slots = layers + int(embedding) + int(loss)
    if slots % pp or (slots // pp) % interleave:
        raise InputError(
            f"pipeline layout: {layers} blocks + embedding/loss slots = {slots} must divide by "
            f"pp = {pp} and then by the interleave {interleave} (Megatron-Core's "
            "account_for_embedding/loss_in_pipeline_split)"
        )
    per_stage = slots // (pp * interleave)
    stages = [per_stage] * (pp * interleave)
    stages[0] -= int(embedding)
    stages[-1] -= int(loss)
    if min(stages) < 0:
        raise InputError(
            f"pipeline layout: {per_stage} slot per virtual stage leaves no room for the "
            "embedding and the loss on one stage"
        )
    return tuple(stages)
