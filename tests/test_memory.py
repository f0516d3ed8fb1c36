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


def _titan_state(unsharded_under_pp: bool, pp: int, dp: int, stage: str, zero: int = 3):
    """torchtitan's model state for llama3-8b at tp 2 with 8 blocks on the stage, with the
    stack's ``zero3_unsharded_under_pp`` as given."""
    import hardware_catalog
    from planner.cost.memory import model_state

    stack = hardware_catalog.load_stack("torchtitan")
    stack = stack.model_copy(update={"zero3_unsharded_under_pp": unsharded_under_pp})
    ctx = CostContext(
        hardware_catalog.load_model("llama3-8b"),
        hardware_catalog.load_system("dgx-h100"),
        JobSpec(global_batch=64, stack="torchtitan"),
        stack=stack,
    )
    state = model_state(ctx, 2, pp, 8, dp, zero, 0, 0, stage)
    return ctx, stage_params(ctx, 2, pp, 8, stage), state


@pytest.mark.parametrize("stage", ["first", "middle", "last"])
def test_torchtitan_under_pp_holds_the_stages_whole_weights_and_gradients(stage: str) -> None:
    """FSDP2 under PP (StackProfile.zero3_unsharded_under_pp): every unit of the stage stays
    gathered and its gradients accumulate unsharded, so ZeRO-3 at p > 1 holds e·P_stage of
    weights and g·P_stage of gradients (P_stage: the rank's blocks and embedding/head, whole),
    beside the sharded optimizer state; without the flag, the shards and two gathered blocks
    (the root unit gathered: zero3_root_gathered). At p = 1, at d = 1 and under ZeRO-1 the flag
    changes nothing."""
    dp, blocks = 8, 8
    ctx, params, held = _titan_state(True, 4, dp, stage)
    _, _, resharded = _titan_state(False, 4, dp, stage)
    whole, block, extra = float(params.total), float(params.block), float(params.extra)
    e, g = 2, ctx.grad_bytes
    assert g == 4  # torchtitan's reduce dtype: fp32
    assert float(held.weights) == pytest.approx(e * whole)
    assert float(held.gradients) == pytest.approx(g * whole)
    assert float(held.optimizer) == pytest.approx(float(resharded.optimizer))
    # what the flag adds: the gathered rest of the blocks beyond the two the double buffer
    # holds, and the gradients' unsharded rest beyond the shards
    added = float(held.weights) - float(resharded.weights)
    assert added == pytest.approx(e * (blocks - 2) * block * (1 - 1 / dp))
    assert float(resharded.weights) == pytest.approx(
        e * (whole / dp + 2 * block * (1 - 1 / dp) + extra * (1 - 1 / dp))
    )
    assert float(held.gradients) - float(resharded.gradients) == pytest.approx(
        g * whole * (1 - 1 / dp)
    )
    for pp, d, zero in ((1, dp, 3), (4, 1, 3), (4, dp, 1)):
        _, _, on = _titan_state(True, pp, d, stage, zero)
        _, _, off = _titan_state(False, pp, d, stage, zero)
        assert (float(on.weights), float(on.gradients)) == (
            float(off.weights),
            float(off.gradients),
        ), (pp, d, zero)


def test_a_checkpoint_writes_the_shards_not_the_stages_unsharded_copies() -> None:
    """goodput's checkpoint state is the resharded one: the flag moves the step's peak only."""
    import hardware_catalog
    from planner.cost.goodput import state_bytes_per_gpu
    from planner.specs import Strategy

    stack = hardware_catalog.load_stack("torchtitan")
    strategy = Strategy(tp=2, pp=4, dp=8, micro_batch=1, zero_stage=3)
    states = []
    for flag in (True, False):
        ctx = CostContext(
            hardware_catalog.load_model("llama3-8b"),
            hardware_catalog.load_system("dgx-h100"),
            JobSpec(global_batch=64, stack="torchtitan"),
            stack=stack.model_copy(update={"zero3_unsharded_under_pp": flag}),
        )
        states.append(state_bytes_per_gpu(ctx, strategy))
    assert states[0] == states[1]
