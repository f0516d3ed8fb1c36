"""torchtitan's tensor-parallel extras: the all-gathers its per-op selective recompute runs
again, and the layout copies of sequence-parallel collectives on the sequence dimension
(planner/cost/parallel_comm.py recomputed_tp_gathers, sp_layout_copy_s)."""

from __future__ import annotations

import numpy as np
import pytest

import hardware_catalog
from planner.cost.context import ACTIVATION_BYTES, CostContext
from planner.cost.network import all_gather_s
from planner.cost.parallel_comm import recomputed_tp_gathers, sp_layout_copy_s
from planner.cost.step import block_pieces
from planner.specs import JobSpec


def _ctx(stack_name: str = "torchtitan", precision: str = "bf16", **updates) -> CostContext:
    stack = hardware_catalog.load_stack(stack_name).model_copy(update=updates)
    job = JobSpec(global_batch=96, seq_len=8192, precision=precision, stack=stack_name)
    return CostContext(
        hardware_catalog.load_model("llama3-8b"),
        hardware_catalog.load_system("dgx-h100"),
        job,
        stack=stack,
    )


def _pieces(ctx: CostContext, recompute: int, tp: int = 8, sp: bool = True, overlap=False):
    return block_pieces(ctx, tp, 12, recompute, sp, overlap, False, False)


def test_only_torchtitans_op_policy_regathers_under_selective() -> None:
    titan = _ctx()
    assert list(recomputed_tp_gathers(titan, np.array([0, 1, 2]))) == [0.0, 1.0, 0.0]
    megatron = _ctx("megatron-core")
    assert list(recomputed_tp_gathers(megatron, np.array([0, 1, 2]))) == [0.0, 0.0, 0.0]


def test_selective_recompute_adds_two_gathers_per_block() -> None:
    """Under the op policy the TP term grows by the attention's and the FFN's all-gather over
    recompute none (copies off, to see the communication alone)."""
    ctx = _ctx(sp_layout_copies=False)
    extra = float(_pieces(ctx, 1).tp_exposed_s - _pieces(ctx, 0).tp_exposed_s)
    nbytes = ACTIVATION_BYTES * 12 * ctx.seq_len * ctx.model.hidden
    assert extra == pytest.approx(2 * float(all_gather_s(ctx, 8, 8, nbytes)), rel=1e-9)
    other = _ctx(sp_layout_copies=False, selective_policy="attention_core")
    assert float(_pieces(other, 1).tp_exposed_s) == pytest.approx(
        float(_pieces(other, 0).tp_exposed_s), rel=1e-12
    )


@pytest.mark.parametrize(("recompute", "copies"), [(0, 8), (1, 10), (2, 12)])
def test_layout_copies_count_every_collective(recompute: int, copies: int) -> None:
    """One read and one write of the whole b·s·h tensor per collective: 4 per pass of a dense
    block, 2 more gathers under the op policy's selective recompute, a third pass under
    full recompute."""
    ctx = _ctx()
    tensor = ACTIVATION_BYTES * 12 * ctx.seq_len * ctx.model.hidden
    expected = copies * 2 * tensor / ctx.memory_bound_bytes_per_s
    got = sp_layout_copy_s(ctx, 8, 12, recompute, True, 2)
    assert float(got) == pytest.approx(expected, rel=1e-9)
    with_copies = _pieces(ctx, recompute).tp_exposed_s
    without = _pieces(_ctx(sp_layout_copies=False), recompute).tp_exposed_s
    assert float(with_copies - without) == pytest.approx(expected, rel=1e-9)


def test_no_copies_without_sp_at_tp1_or_on_megatron() -> None:
    ctx = _ctx()
    assert float(sp_layout_copy_s(ctx, 8, 12, 0, False, 2)) == 0.0
    assert float(sp_layout_copy_s(ctx, 1, 12, 0, True, 2)) == 0.0
    assert float(sp_layout_copy_s(_ctx("megatron-core"), 8, 12, 0, True, 2)) == 0.0


def test_fp8_tensorwise_gathers_copy_one_byte() -> None:
    """Under a recipe that gathers the cast shard (torchao tensorwise), a gather's copy moves
    1-byte elements; the reduce-scatters stay in bf16: 4 bf16 + 4 fp8 copies per block."""
    ctx = _ctx(precision="fp8-current")
    elements = 12 * ctx.seq_len * ctx.model.hidden
    expected = 2 * (4 * 2 + 4 * 1) * elements / ctx.memory_bound_bytes_per_s
    assert float(sp_layout_copy_s(ctx, 8, 12, 0, True, 2)) == pytest.approx(expected, rel=1e-9)
