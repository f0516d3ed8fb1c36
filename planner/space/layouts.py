"""The pipeline layouts the solver searches (Layout, stage_layouts): blocks per stage, the
middle stages equal, the first and the last no heavier and at most a stated skew lighter."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """A pipeline layout: pp stages, the middle pp − 2 with ``blocks`` blocks each, the first
    with ``lighter_first`` fewer and the last with ``last`` (≤ blocks): Megatron's
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` (a first
    stage one block lighter is ``--account-for-embedding-in-pipeline-split``). A lighter first
    stage needs a middle one (pp > 2): with two stages the lighter one is the last."""

    pp: int
    blocks: int
    last: int
    lighter_first: int = 0

    @property
    def first(self) -> int:
        """Blocks on the first stage."""
        return self.blocks - self.lighter_first

    @property
    def lightest(self) -> int:
        """Blocks on the lightest stage (partial recompute rebuilds fewer, rules' cap)."""
        return min(self.first, self.last)

    @property
    def even(self) -> bool:
        return self.blocks == self.last and not self.lighter_first

    def stage_blocks(self, stage: str) -> int:
        """Blocks on a ``stage`` ("first", "middle" or "last")."""
        return {"first": self.first, "middle": self.blocks, "last": self.last}[stage]

    def stage_layers(self) -> tuple[int, ...] | None:
        """Strategy.stage_layers: None for an even layout."""
        if self.even:
            return None
        return (self.first,) + (self.blocks,) * (self.pp - 2) + (self.last,)


MAX_FIRST_STAGE_SKEW = 1
"""A searched first stage is at most this many blocks lighter than the middle ones: Megatron's
embedding slot (--account-for-embedding-in-pipeline-split). Each lighter-first layout adds the
middle stages' DP tables and memory rows to the model; with every skew up to 4, gpt3-175b's
scale-out bandwidth query on 1,024 H100s outgrew MAX_TABLE_ENTRIES. A stated cap
(planner.space.reductions)."""


def stage_layouts(layers: int, pp: int, max_skew: int | None = None) -> list[Layout]:
    """The layouts of ``layers`` blocks over pp stages with the first and the last stage no
    heavier than the middle ones, the last at most ``max_skew`` blocks lighter and the first
    at most min(MAX_FIRST_STAGE_SKEW, max_skew) (None: any; but the layout that pp not
    dividing the layers forces is always kept): middle blocks from
    ⌈L/p⌉ while the first and the last keep at least one. A lighter last stage balances the LM
    head against blocks, a lighter first one the embedding and the micro-batches the first
    stage holds in flight (p of them under 1F1B); pp need not divide the layers."""
    if pp == 1:
        return [Layout(1, layers, layers)]
    layouts = [
        Layout(pp, blocks, last, lighter)
        for blocks in range(-(-layers // pp), (layers - 1) // (pp - 1) + 1)
        for lighter in range(blocks if pp > 2 else 1)
        for last in (layers - (pp - 1) * blocks + lighter,)
        if last <= blocks
    ]
    if max_skew is None:
        return layouts
    first_skew = min(MAX_FIRST_STAGE_SKEW, max_skew)
    return layouts[:1] + [
        x for x in layouts[1:] if x.blocks - x.last <= max_skew and x.lighter_first <= first_skew
    ]
