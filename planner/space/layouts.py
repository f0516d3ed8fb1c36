"""The pipeline layouts the solver searches (Layout): blocks per stage, the middle stages
equal, the first and the last no heavier and at most a stated skew lighter (stage_layouts);
and, for an interleaved schedule, Megatron-Core's embedding and loss slots, which split the
layers plus one slot for each into equal virtual stages (slot_layouts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """A pipeline layout: pp stages, the middle pp − 2 with ``blocks`` blocks each, the first
    with ``lighter_first`` fewer and the last with ``last`` (≤ blocks): Megatron's
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` (a first
    stage one block lighter is ``--account-for-embedding-in-pipeline-split``). A lighter first
    stage needs a middle one (pp > 2): with two stages the lighter one is the last.

    ``interleave`` > 1: a slot layout (slot_layouts), searched with that interleave only: the
    pp·v virtual stages hold blocks / v each, the first one ``lighter_first`` fewer and the
    last one blocks − last fewer. 0: any interleave that divides every stage's blocks (equal
    chunks; the solver interleaves even layouts only)."""

    pp: int
    blocks: int
    last: int
    lighter_first: int = 0
    interleave: int = 0

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

    def chunk(self, interleave: int) -> int:
        """The most blocks one virtual stage holds under ``interleave``."""
        return self.blocks // interleave

    def stage_layers(self) -> tuple[int, ...] | None:
        """Strategy.stage_layers: None for an even layout; pp·v virtual stages for a slot
        layout."""
        if self.even:
            return None
        if self.interleave:
            virtual = [self.chunk(self.interleave)] * (self.pp * self.interleave)
            virtual[0] -= self.lighter_first
            virtual[-1] -= self.blocks - self.last
            return tuple(virtual)
        return (self.first,) + (self.blocks,) * (self.pp - 2) + (self.last,)

    def admits(self, interleave: int) -> bool:
        """Whether the solver pairs this layout with ``interleave``: a slot layout its own only;
        any other every layout at v = 1, and at v > 1 an even layout of pp > 1 whose blocks
        per stage v divides (Megatron's virtual stages split equal stages)."""
        if self.interleave:
            return interleave == self.interleave
        if interleave == 1:
            return True
        return self.even and self.pp > 1 and self.blocks % interleave == 0


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
    # the first and the last keep a block: (p − 1)·blocks < L, or with a lighter first
    # (p > 2) (p − 2)·blocks ≤ L − 2
    most = (layers - 1) // (pp - 1) if pp == 2 else (layers - 2) // (pp - 2)
    layouts = [
        Layout(pp, blocks, last, lighter)
        for blocks in range(-(-layers // pp), most + 1)
        for lighter in range(blocks if pp > 2 else 1)
        for last in (layers - (pp - 1) * blocks + lighter,)
        if 1 <= last <= blocks
    ]
    if max_skew is None:
        return layouts
    first_skew = min(MAX_FIRST_STAGE_SKEW, max_skew)
    return layouts[:1] + [
        x for x in layouts[1:] if x.blocks - x.last <= max_skew and x.lighter_first <= first_skew
    ]


def slot_layouts(layers: int, pp: int, interleave: int, max_skew: int) -> list[Layout]:
    """Megatron-Core's interleaved layouts with embedding and/or loss slots
    (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split;
    transformer_block.get_num_layers_to_build): S = layers + [embedding] + [loss] slots over
    pp·v equal virtual stages of S/(p·v), the first one block fewer with the embedding, the
    last with the loss (planner.specs.layouts.embedding_loss_layout), where p·v divides S
    and every rank keeps a block; each slot counts as a stage one block lighter, within
    stage_layouts' skews. None without a pipeline or interleaving."""
    if pp < 2 or interleave < 2:
        return []
    first_skew = min(MAX_FIRST_STAGE_SKEW, max_skew)
    layouts = []
    for embedding, loss in ((1, 0), (0, 1), (1, 1)):
        slots = layers + embedding + loss
        if slots % (pp * interleave) or embedding > first_skew or loss > max_skew:
            continue
        per_rank = slots // pp
        if per_rank - max(embedding, loss) >= 1 and per_rank // interleave >= max(embedding, loss):
            layouts.append(Layout(pp, per_rank, per_rank - loss, embedding, interleave))
    return layouts


def with_slot_interleaves(
    interleaves: tuple[int, ...],
    layers: int,
    pp_values: tuple[int, ...],
    max_interleave: int | None,
    max_skew: int,
) -> tuple[int, ...]:
    """``interleaves`` and the interleaves v > 1 (at most ``max_interleave``; None: any) some
    slot layout of a pp in ``pp_values`` uses (p·v divides the layers plus one or two slots),
    in increasing order."""
    slots = {
        v
        for v in range(2, layers + 3)
        if v <= (max_interleave or v)
        and any(slot_layouts(layers, p, v, max_skew) for p in pp_values)
    }
    return tuple(sorted({*interleaves, *slots}))


def searched_layouts(
    layers: int, pp_values: tuple[int, ...], interleaves: tuple[int, ...], max_skew: int
) -> tuple[Layout, ...]:
    """The layouts a space indexes: per pp, stage_layouts within the skew, then the slot
    layouts of each interleave v > 1 in ``interleaves``."""
    return tuple(
        layout
        for p in pp_values
        for layout in [
            *stage_layouts(layers, p, max_skew),
            *(slot for v in interleaves for slot in slot_layouts(layers, p, v, max_skew)),
        ]
    )
