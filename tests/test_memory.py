"""Activation and model-state memory against Korthikanti et al. 2022 and the ZeRO paper."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.context import CostContext
from planner.cost.knobs import Knobs
from planner.cost.memory import block_activation_bytes, stage_memory, stage_params
from planner.specs import JobSpec
from tests.conftest import gpt_model, simple_system

S, B, H, A = 2048, 2, 1024, 16


def materialized_ctx() -> CostContext:
    return CostContext(
        gpt_model(), simple_system(), JobSpec(global_batch=64, attention="materialized")
    )


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_activations_match_korthikanti_equations(t: int) -> None:
    ctx = materialized_ctx()
    sbh = S * B * H
    core = 5 * A * S / H
    none_no_sp = block_activation_bytes(ctx, t, B, 0, False)
    assert none_no_sp == pytest.approx(sbh * (10 + 24 / t + core / t))
    none_sp = block_activation_bytes(ctx, t, B, 0, True)
    assert none_sp == pytest.approx(sbh * (34 + core) / t)
    selective_sp = block_activation_bytes(ctx, t, B, 1, True)
    assert selective_sp == pytest.approx(sbh * 34 / t)
    selective_no_sp = block_activation_bytes(ctx, t, B, 1, False)
    assert selective_no_sp == pytest.approx(sbh * (10 + 24 / t))
    assert block_activation_bytes(ctx, t, B, 2, False) == pytest.approx(2 * sbh)
    assert block_activation_bytes(ctx, t, B, 2, True) == pytest.approx(2 * sbh / t)


def test_no_parallelism_is_34_plus_5as_over_h() -> None:
    ctx = materialized_ctx()
    assert block_activation_bytes(ctx, 1, B, 0, False) == pytest.approx(
        S * B * H * (34 + 5 * A * S / H)
    )


def test_flash_attention_drops_the_score_term() -> None:
    flash = CostContext(gpt_model(), simple_system(), JobSpec(global_batch=64))
    assert block_activation_bytes(flash, 1, B, 0, False) == pytest.approx(S * B * H * 34)


def _state(ctx: CostContext, zero: int, dp: int) -> tuple[float, float, float]:
    knobs = Knobs.of(tp=2, pp=2, dp=dp, micro_batch=1, zero_stage=zero).as_dict()
    blocks = ctx.model.layers / 2
    memory = stage_memory(ctx, knobs, np.asarray(64 / dp), np.asarray(blocks), "first")
    return float(memory.weights), float(memory.gradients), float(memory.optimizer)


def test_zero_stages_shard_the_right_state_by_dp() -> None:
    ctx = materialized_ctx()
    dp = 8
    params = float(stage_params(ctx, 2, 2, ctx.model.layers / 2, "first").total)
    w0, g0, o0 = _state(ctx, 0, dp)
    assert (w0, g0, o0) == pytest.approx(
        (2 * params, 4 * params, ctx.optimizer_bytes_per_param * params)
    )
    w1, g1, o1 = _state(ctx, 1, dp)
    assert (w1, g1, o1) == pytest.approx((w0, g0, o0 / dp))
    w2, g2, o2 = _state(ctx, 2, dp)
    assert (w2, g2, o2) == pytest.approx((w0, g0 / dp, o0 / dp))
    w3, g3, o3 = _state(ctx, 3, dp)
    assert (g3, o3) == pytest.approx((g0 / dp, o0 / dp))
    first = stage_params(ctx, 2, 2, ctx.model.layers / 2, "first")
    # the unit in use and the prefetched next, gathered: the two largest of the stage's
    # blocks and its embedding
    units = sorted([float(first.block)] * int(ctx.model.layers / 2) + [float(first.extra)])
    gathered = (units[-1] + units[-2]) * (1 - 1 / dp)
    assert w3 == pytest.approx(2 * (params / dp + gathered))
    assert w3 < w2


def test_first_stage_holds_p_micro_batches_and_interleave_adds_its_factor() -> None:
    ctx = materialized_ctx()
    per_block = float(block_activation_bytes(ctx, 1, 1, 1, False))
    layers, p = 8, 4

    def first_stage_activations(v: int) -> float:
        knobs = Knobs.of(pp=p, dp=1, micro_batch=1, interleave=v, recompute=1).as_dict()
        blocks = np.asarray(layers / p)
        return float(stage_memory(ctx, knobs, np.asarray(64.0), blocks, "first").activations)

    assert first_stage_activations(1) == pytest.approx(layers / p * per_block * p)
    assert first_stage_activations(2) == pytest.approx(layers * per_block * (1 + (p - 1) / (p * 2)))


def test_uneven_stages_put_the_most_activations_where_blocks_times_in_flight_peaks() -> None:
    """5,6,...,6,5 on 12 stages: the second stage (6 blocks, 11 in flight) out-stores the first
    (5 blocks, 12 in flight); the HBM need is the most loaded of the three stage kinds."""
    from planner.cost.step import evaluate_terms
    from planner.specs import Strategy

    ctx = CostContext(gpt_model(layers=70), simple_system(), JobSpec(global_batch=64))
    layout = (5, *[6] * 10, 5)
    strategy = Strategy(pp=12, micro_batch=1, dp=1, stage_layers=layout)
    terms = evaluate_terms(ctx, Knobs.from_strategy(strategy))
    per_block = float(block_activation_bytes(ctx, 1, 1, 0, False))
    assert float(terms.first_stage.activations) == pytest.approx(5 * 12 * per_block)
    assert float(terms.middle_stage.activations) == pytest.approx(6 * 11 * per_block)
    totals = [float(stage.hbm_total) for stage in terms.stages]
    assert float(terms.hbm_bytes) == pytest.approx(max(totals))


def test_the_share_of_hbm_a_plan_may_fill_is_the_stacks_unless_the_job_says() -> None:
    """Calculon fills all of HBM; the framework stacks keep 5 % headroom; a job's value wins."""
    from planner.cost.context import CostContext
    from planner.specs import JobSpec
    from tests.conftest import gpt_model, simple_system

    def fraction(**job: object) -> float:
        return CostContext(
            gpt_model(), simple_system(), JobSpec(global_batch=8, **job)
        ).hbm_usable_fraction

    assert fraction() == 0.95
    assert fraction(stack="calculon") == 1.0
    assert fraction(stack="calculon", hbm_usable_fraction=0.8) == 0.8
