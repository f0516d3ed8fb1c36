"""The knobs of a strategy as the vectorised cost model reads them (Knobs): one value or one numpy
array per knob, so that one call evaluates one strategy or a whole table of them; categorical
knobs as their integer codes, the stage layout as first, middle and last block counts."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from planner.specs import OFFLOAD_KINDS, PLACEMENT_CODES, RECOMPUTE_CODES, Strategy

LAYOUT_FIELDS = ("first_blocks", "middle_blocks", "last_blocks")


FRACTION_FIELDS = {f"offload_{kind}_fraction" for kind in OFFLOAD_KINDS}
"""Strategy fields that Knobs folds into the offload codes."""


@dataclass(frozen=True)
class Knobs:
    """Strategy knobs as numpy arrays that broadcast together (recompute as 0/1/2 codes)."""

    tp: np.ndarray
    tp_column: np.ndarray
    """AxoNN's column group X (1: Megatron's form; Strategy.tp_column)."""
    tp_depth: np.ndarray
    """AxoNN's depth group Z (1: Megatron's form; Strategy.tp_depth)."""
    cp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    expert_tp: np.ndarray
    """Ranks each expert is split over; 0: tp (Strategy.expert_tp)."""
    micro_batch: np.ndarray
    interleave: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    zero_stage: np.ndarray
    offload_weights: np.ndarray
    """Offload codes (specs.offload_code: tier and share; k is the whole class in tier k)."""
    offload_activations: np.ndarray
    offload_optimizer: np.ndarray
    dp_overlap: np.ndarray
    tp_overlap: np.ndarray
    placement: np.ndarray
    """Rank order code (specs.PLACEMENT_CODES): 0 TP, CP, DP, PP; 1 TP, PP, DP."""
    recompute_layers: np.ndarray
    """Blocks per stage fully recomputed (at most the stage's), the others following
    ``recompute``; 0: every block follows it. Strategy(recompute="full", recompute_layers=r)
    is recompute 0 (none) with r here."""
    first_blocks: np.ndarray
    """Blocks on the first stage; 0: layers / pp (an even layout). Likewise the two below."""
    middle_blocks: np.ndarray
    last_blocks: np.ndarray
    chunk_blocks: np.ndarray
    """The most blocks on one virtual stage of an interleaved uneven layout
    (Strategy.chunk_blocks); 0: blocks / v (an even split of each rank over its chunks)."""

    @classmethod
    def of(cls, **values: object) -> Knobs:
        """Knobs from arrays or scalars; omitted knobs take the Strategy defaults (an even
        layout for the stage blocks)."""
        defaults = {
            **Strategy().model_dump(exclude=FRACTION_FIELDS),
            **dict.fromkeys(LAYOUT_FIELDS, 0),
            "recompute_layers": 0,
            "chunk_blocks": 0,
        }
        merged = {name.name: values.get(name.name, defaults[name.name]) for name in fields(cls)}
        unknown = set(values) - set(merged)
        if unknown:
            raise TypeError(f"unknown knobs: {sorted(unknown)}")
        if isinstance(merged["recompute"], str):
            merged["recompute"] = RECOMPUTE_CODES[merged["recompute"]]
        if isinstance(merged["placement"], str):
            merged["placement"] = PLACEMENT_CODES[merged["placement"]]
        return cls(**{name: np.asarray(value) for name, value in merged.items()})

    @classmethod
    def from_strategy(cls, strategy: Strategy) -> Knobs:
        values = strategy.model_dump(exclude={"stage_layers", "recompute_layers", *FRACTION_FIELDS})
        values.update(strategy.offload_codes())
        if strategy.recompute_layers is not None:
            values.update(recompute="none", recompute_layers=strategy.recompute_layers)
        if strategy.stage_layers is not None:
            first, middle, last = strategy.stage_blocks(sum(strategy.stage_layers))
            values.update(first_blocks=first, middle_blocks=middle, last_blocks=last)
            values.update(chunk_blocks=strategy.chunk_blocks())
        return cls.of(**values)

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name.name: getattr(self, name.name) for name in fields(self)}
