"""FLOP counts against the closed forms of Narayanan et al. SC21 (eq. 3)."""

from __future__ import annotations

import pytest

from hardware_catalog import load_model
from planner.cost.context import CostContext
from planner.cost.flops import model_flops_per_step, recompute_flops_per_step
from planner.specs import JobSpec
from tests.conftest import gpt_model, simple_system


def narayanan_flops(batch: int, s: int, layers: int, h: int, vocab: int) -> float:
    return 72 * batch * s * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * layers * h))


@pytest.mark.parametrize(
    "name", ["gpt3-1.3b", "gpt3-13b", "gpt3-175b", "megatron-22b", "megatron-530b", "megatron-1t"]
)
def test_model_flops_match_narayanan_for_gpt_shapes(name: str) -> None:
    model = load_model(name)
    ctx = CostContext(model, simple_system(), JobSpec(global_batch=1536))
    expected = narayanan_flops(1536, model.seq_len, model.layers, model.hidden, model.vocab)
    assert model_flops_per_step(ctx) == pytest.approx(expected, rel=0.01)


def test_recompute_flops() -> None:
    model = gpt_model()
    b, s, h, layers = 8, model.seq_len, model.hidden, model.layers
    materialized = CostContext(
        model, simple_system(), JobSpec(global_batch=b, attention="materialized")
    )
    block_forward = 24 * b * s * h**2 + 4 * b * s**2 * h
    assert recompute_flops_per_step(materialized, 0) == 0
    assert recompute_flops_per_step(materialized, 2) == pytest.approx(layers * block_forward)
    assert recompute_flops_per_step(materialized, 1) == pytest.approx(layers * 4 * b * s**2 * h)
    flash = CostContext(model, simple_system(), JobSpec(global_batch=b, attention="flash"))
    assert recompute_flops_per_step(flash, 1) == 0


def test_gqa_and_swiglu_shrink_and_grow_the_right_matrices() -> None:
    mha = gpt_model(ffn_kind="gelu")
    gqa = gpt_model(kv_heads=4)
    swiglu = gpt_model(ffn_kind="swiglu", ffn_hidden=2816)
    h, f = 1024, 4096
    assert mha.block_params - gqa.block_params == 2 * h * (h - 4 * 64) + 2 * (h - 4 * 64)
    assert swiglu.block_params - mha.block_params == (3 * h * 2816 + 2 * 2816) - (2 * h * f + f)
