"""The execution strategy (Strategy): the parallel factorization and every other knob the planner
chooses, with the integer codes the vectorised cost model and the search space use for its
categorical knobs."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from planner.specs import limits as lim
from planner.specs.base import Spec
from planner.specs.quantities import OFFLOAD_STEPS, is_eighths

Recompute = Literal["none", "selective", "full"]


RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
"""Integer codes of the recompute modes, as used by the vectorised cost model."""


Placement = Literal["tp-cp-dp-pp", "tp-pp-dp"]


PLACEMENT_CODES: dict[str, int] = {"tp-cp-dp-pp": 0, "tp-pp-dp": 1}
"""Rank orders (fastest-varying group first): Megatron-Core's default, and the one of
``--use-tp-pp-dp-mapping`` (no CP), which puts the pipeline inside the scale-up domain."""


OFFLOAD_KINDS = ("weights", "activations", "optimizer")
"""The tensor classes that can be offloaded: Strategy.offload_<kind> (the tier) and
Strategy.offload_<kind>_fraction (the share)."""


def offload_code(tier: int, eighths: int) -> int:
    """The integer code of "``eighths``/8 of a tensor class in offload tier ``tier``" that the
    cost model and the search space use: 0 for nothing offloaded; tier + M·(8 − eighths) for
    M = limits.MAX_MEMORY_TIERS, so that the whole class in tier k is code k."""
    return tier + lim.MAX_MEMORY_TIERS * (OFFLOAD_STEPS - eighths) if tier else 0


def offload_tier(code):
    """The tier of an offload code (int or integer array); 0: in HBM."""
    return code % lim.MAX_MEMORY_TIERS


def offload_eighths(code):
    """The eighths of the tensor class an offload code moves (int or integer array); 0 for
    code 0."""
    return (OFFLOAD_STEPS - code // lim.MAX_MEMORY_TIERS) * (code % lim.MAX_MEMORY_TIERS > 0)


class Strategy(Spec):
    """An execution strategy. Field names are the CLI flag names (``--micro-batch`` →
    ``micro_batch``). Offload fields hold a memory-tier index: 0 keeps the tensors in HBM,
    k ≥ 1 moves them to offload tier k; the ``_fraction`` fields say which share of the class
    moves (in steps of 1/8; the rest stays in HBM)."""

    tp: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    tp_column: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    """AxoNN's column (X) group: ranks a layer's input features split over (the residual
    stream's hidden dimension); 1 in Megatron's form (StackProfile.tp_form)."""
    tp_depth: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    """AxoNN's depth (Z) group: ranks the flattened local weight block is sharded over (FSDP-like,
    gathered per layer) and the micro-batch is split over; 1 in Megatron's form. The row (Y)
    group is tp / (tp_column · tp_depth)."""
    cp: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    """Context parallelism: each sequence split over cp ranks (Megatron-Core CP)."""
    pp: int = Field(default=1, gt=0, le=lim.MAX_LAYERS)
    dp: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    ep: int = Field(default=1, gt=0, le=lim.MAX_EXPERTS)
    """Expert parallelism: each MoE block's routed experts sharded over ep ranks taken from
    the tp·cp·dp ranks of a pipeline stage (Megatron-Core's ``--expert-model-parallel-size``)."""
    expert_tp: int = Field(default=0, ge=0, le=lim.MAX_GPUS)
    """Expert tensor parallelism: each expert split over this many ranks (0: tp, Megatron-Core's
    default; ``--expert-tensor-parallel-size``)."""
    micro_batch: int = Field(default=1, gt=0, le=lim.MAX_GLOBAL_BATCH)
    interleave: int = Field(default=1, gt=0, le=lim.MAX_LAYERS)
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload_weights: int = Field(default=0, ge=0, lt=lim.MAX_MEMORY_TIERS)
    offload_activations: int = Field(default=0, ge=0, lt=lim.MAX_MEMORY_TIERS)
    offload_optimizer: int = Field(default=0, ge=0, lt=lim.MAX_MEMORY_TIERS)
    offload_weights_fraction: float = 1.0
    """Share of the blocks' weights (with their gradients) in the offload tier: each block's
    tensors split, the share streamed, the rest resident (DeepSpeed ZeRO-Offload++'s
    ``ratio``)."""
    offload_activations_fraction: float = 1.0
    offload_optimizer_fraction: float = 1.0
    dp_overlap: bool = True
    tp_overlap: bool = False
    recompute_layers: int | None = Field(default=None, gt=0, le=lim.MAX_LAYERS)
    """With ``recompute = "full"``: only this many blocks of each stage are recomputed, the
    others store their activations (Megatron's ``--recompute-method block
    --recompute-num-layers``, which counts per model chunk: recompute_layers / interleave).
    None: every block."""
    placement: Placement = "tp-cp-dp-pp"
    """The order the groups take over the ranks, fastest first: a TP group is t consecutive
    GPUs; then CP, DP, PP (default: a DP group spans t·cp·dp GPUs, the pipeline all of them) or
    PP before DP (``tp-pp-dp``: the pipeline spans t·pp GPUs, a DP group all of them)."""
    stage_layers: tuple[int, ...] | None = None
    """Blocks on each pipeline stage, first to last (None: layers / pp on every stage).
    pp entries: one per rank (Megatron's ``--decoder-first-pipeline-num-layers``,
    ``--decoder-last-pipeline-num-layers``: the first and the last free, the stages between them
    equal; with interleave v each rank's blocks split evenly over its v model chunks). pp·v
    entries: one per virtual stage in pipeline order, virtual stage j·pp + r being model chunk j
    of rank r (Megatron-Core's ``--pipeline-model-parallel-layout``, which may leave the first or
    last virtual stage with 0 blocks: the embedding or the loss slot alone; planner.specs.layouts
    reads the layout strings and the embedding/loss accounting)."""

    @field_validator(*(f"offload_{kind}_fraction" for kind in OFFLOAD_KINDS))
    @classmethod
    def _eighths(cls, value: float) -> float:
        if not is_eighths(value):
            raise ValueError(f"a fraction in steps of 1/{OFFLOAD_STEPS}: 0.125, 0.25, ..., 1")
        return value

    def offload_codes(self) -> dict[str, int]:
        """offload_<kind> → its offload code (offload_code)."""
        return {
            f"offload_{kind}": offload_code(
                getattr(self, f"offload_{kind}"),
                round(getattr(self, f"offload_{kind}_fraction") * OFFLOAD_STEPS),
            )
            for kind in OFFLOAD_KINDS
        }

    @field_validator("stage_layers")
    @classmethod
    def _stage_layers_positive(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and (
            not value or min(value) < 0 or max(value) > lim.MAX_LAYERS or sum(value) < 1
        ):
            raise ValueError(f"every stage holds 0..{lim.MAX_LAYERS} blocks, some at least 1")
        return value

    def virtual_stages(self) -> tuple[int, ...] | None:
        """Blocks per virtual stage in pipeline order (pp·v entries; virtual stage j·pp + r is
        chunk j of rank r), from stage_layers of pp·v entries as given, or of pp entries with
        each rank's blocks split evenly over its v chunks (Megatron-Core's
        get_num_layers_to_build, rounding down where v does not divide them); None when
        stage_layers is unset."""
        if self.stage_layers is None:
            return None
        p, v = self.pp, self.interleave
        if len(self.stage_layers) == p * v:
            return self.stage_layers
        return tuple(self.stage_layers[r] // v for _ in range(v) for r in range(p))

    def rank_blocks(self) -> tuple[int, ...] | None:
        """Blocks each pipeline rank holds over its model chunks (None: even layout)."""
        if self.stage_layers is None:
            return None
        if len(self.stage_layers) == self.pp:
            return self.stage_layers
        stages = self.virtual_stages()
        return tuple(sum(stages[r :: self.pp]) for r in range(self.pp))

    def chunk_blocks(self) -> int:
        """The most blocks one virtual stage (model chunk) holds; 0 for an even layout or
        without interleaving (the cost model then takes blocks / v)."""
        if self.stage_layers is None or self.interleave == 1:
            return 0
        return max(self.virtual_stages())

    def stage_blocks(self, layers: int) -> tuple[int, int, int]:
        """(first, middle, last) rank block counts, middle the most loaded rank between them
        (the first's when pp ≤ 2)."""
        ranks = self.rank_blocks()
        if ranks is None:
            even = layers // self.pp
            return even, even, even
        first, last = ranks[0], ranks[-1]
        middle = max(ranks[1:-1]) if len(ranks) > 2 else first
        return first, middle, last

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def tp_row(self) -> int:
        """AxoNN's row (Y) group: tp / (tp_column · tp_depth) (tp itself in Megatron's form)."""
        return max(1, self.tp // (self.tp_column * self.tp_depth))

    @property
    def axonn_grid(self) -> bool:
        """Whether the strategy uses AxoNN's grid beyond Megatron's form (X·Z > 1)."""
        return self.tp_column * self.tp_depth > 1

    @property
    def expert_tp_size(self) -> int:
        """Ranks each expert is split over (expert_tp, or tp when 0)."""
        return self.expert_tp or self.tp

    def product_text(self) -> str:
        """The GPU count as its factors, e.g. ``tp·pp·dp = 8·16·8 = 1024`` (cp when > 1)."""
        names, values = ["tp", "pp", "dp"], [self.tp, self.pp, self.dp]
        if self.cp > 1:
            names.insert(1, "cp")
            values.insert(1, self.cp)
        return f"{'·'.join(names)} = {'·'.join(map(str, values))} = {self.gpus}"

    def describe(self) -> str:
        """A compact one-line description, e.g. ``tp=8 pp=16 dp=8 mb=1 v=2 selective+SP``."""
        parts = [f"tp={self.tp}"]
        if self.axonn_grid:
            parts[0] += f"(X{self.tp_column}·Y{self.tp_row}·Z{self.tp_depth})"
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        parts += [f"pp={self.pp}", f"dp={self.dp}", f"mb={self.micro_batch}"]
        if self.interleave > 1:
            parts.append(f"v={self.interleave}")
        if self.stage_layers is not None:
            parts.append("stages=" + _layout_text(self.stage_layers))
        recompute = self.recompute
        if self.recompute_layers is not None:
            recompute += f"({self.recompute_layers}/stage)"
        parts.append(recompute + ("+SP" if self.sequence_parallel else ""))
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.expert_tp and self.expert_tp != self.tp:
            parts.append(f"etp={self.expert_tp}")
        if self.zero_stage:
            parts.append(f"ZeRO-{self.zero_stage}")
        offloaded = [
            f"{kind[0].upper()}{_eighths_text(getattr(self, f'offload_{kind}_fraction'))}"
            f"→T{getattr(self, f'offload_{kind}')}"
            for kind in OFFLOAD_KINDS
            if getattr(self, f"offload_{kind}")
        ]
        if offloaded:
            parts.append("offload " + ",".join(offloaded))
        if self.placement != "tp-cp-dp-pp":
            parts.append(f"order={self.placement}")
        if not self.dp_overlap:
            parts.append("no-dp-overlap")
        if self.tp_overlap:
            parts.append("tp-overlap")
        return " ".join(parts)


def _eighths_text(fraction: float) -> str:
    """ "" for 1, else `` 3/8`` style (in lowest terms)."""
    if fraction == 1:
        return ""
    eighths = round(fraction * OFFLOAD_STEPS)
    common = math.gcd(eighths, OFFLOAD_STEPS)
    return f" {eighths // common}/{OFFLOAD_STEPS // common}"


def _layout_text(stage_layers: tuple[int, ...]) -> str:
    """``6,6,...,6,4`` style: the first, the repeated middle (once, with an ellipsis), the last;
    runs as ``2x35,3,2x3,1`` when the stages between the first and the last differ."""
    if len(stage_layers) <= 4:
        return ",".join(map(str, stage_layers))
    if len(set(stage_layers[1:-1])) > 1:
        runs: list[list[int]] = []
        for blocks in stage_layers:
            if runs and runs[-1][0] == blocks:
                runs[-1][1] += 1
            else:
                runs.append([blocks, 1])
        return ",".join(f"{b}x{n}" if n > 1 else str(b) for b, n in runs)
    first, middle, last = stage_layers[0], stage_layers[1], stage_layers[-1]
    return f"{first},{middle},...,{middle},{last}"
