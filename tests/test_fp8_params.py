"""Parameters kept in fp8 (JobSpec.fp8_params: Megatron-Core --fp8-param-gather, Megatron-Bridge
MixedPrecisionConfig.fp8_param_gather): the held block weights and the ZeRO/FSDP parameter
all-gathers at the recipe's param_bytes, the cached copy less the parameter itself."""

from __future__ import annotations

import json

import pytest

import hardware_catalog
from planner.cli import main
from planner.cost.context import CostContext
from planner.cost.memory import model_state, stage_params
from planner.cost.parallel_comm import dp_comm_times_s
from planner.errors import InputError
from planner.specs import JobSpec

MODEL = "llama3-8b"


def ctx_for(system: str = "dgx-h100", **job: object) -> CostContext:
    fields = {"global_batch": 64, "seq_len": 4096, **job}
    return CostContext(
        hardware_catalog.load_model(MODEL), hardware_catalog.load_system(system), JobSpec(**fields)
    )


def _weights(system: str = "dgx-h100", zero: int = 1, **job: object) -> float:
    ctx = ctx_for(system, **job)
    return float(model_state(ctx, 1, 1, ctx.model.layers, 8, zero, 0, 0, "first").weights)


def _blocks_params(dp: int = 1) -> float:
    model = hardware_catalog.load_model(MODEL)
    return model.layers * model.block_params / dp


@pytest.mark.parametrize(("system", "precision"), [("dgx-h100", "fp8"), ("gb200-nvl72", "mxfp8")])
def test_fp8_parameters_replace_the_bf16_weight_by_one_of_the_cached_copies(
    system: str, precision: str
) -> None:
    """fp8 tensorwise: 2 (bf16) + 2 (fp8 + transpose) → 1 + 1 per block parameter; MXFP8:
    2 + 2·(1 + 1/32) → 2·(1 + 1/32): the bf16 weight is gone either way, the fp32 master
    (optimizer) and the gradients stay."""
    plain = _weights(system, precision=precision)
    kept = _weights(system, precision=precision, fp8_params=True)
    assert plain - kept == pytest.approx(2 * _blocks_params(), rel=1e-9)
    recipe = hardware_catalog.load_precision(precision)
    bf16 = _weights(system)
    assert kept - bf16 == pytest.approx((recipe.weight_copy_bytes - 2) * _blocks_params(), abs=1)
    ctx, ctx_kept = (
        ctx_for(system, precision=precision),
        ctx_for(system, precision=precision, fp8_params=True),
    )
    full = model_state(ctx, 1, 1, ctx.model.layers, 8, 1, 0, 0, "first")
    less = model_state(ctx_kept, 1, 1, ctx.model.layers, 8, 1, 0, 0, "first")
    assert float(full.optimizer) == float(less.optimizer)
    assert float(full.gradients) == float(less.gradients)


def test_zero3_shards_and_gathered_blocks_are_held_in_fp8() -> None:
    plain = _weights(zero=3, precision="fp8-current")
    kept = _weights(zero=3, precision="fp8-current", fp8_params=True)
    assert kept < plain
    assert plain - kept > 2 * _blocks_params(8)  # the shards and the gathered blocks


@pytest.mark.parametrize("zero", [1, 3])
def test_the_parameter_all_gather_moves_fp8_bytes_and_the_reduction_does_not_change(
    zero: int,
) -> None:
    """ZeRO-1: the once-per-step parameter all-gather carries (1·blocks + 2·embedding/head)
    instead of 2·(blocks + embedding/head); the gradient reduce-scatter is unchanged."""

    def times(**job: object):
        ctx = ctx_for(precision="fp8", **job)
        params = stage_params(ctx, 1, 1, ctx.model.layers, "first")
        return params, dp_comm_times_s(ctx, params, ctx.model.layers, 8, 8, zero, 0)

    params, plain = times()
    _, kept = times(fp8_params=True)
    blocks, extra = float(params.blocks), float(params.extra)
    ratio = (blocks + 2 * extra) / (2 * (blocks + extra))
    if zero == 1:
        assert float(kept.before_forward_s) == pytest.approx(
            ratio * float(plain.before_forward_s), rel=1e-9
        )
        assert float(kept.after_backward_s) == float(plain.after_backward_s)
    else:
        assert float(kept.per_micro_batch_s) < float(plain.per_micro_batch_s)
    assert float(kept.latency_per_step_s) == float(plain.latency_per_step_s)


@pytest.mark.parametrize("precision", ["bf16", "fp8-rowwise", "nvfp4"])
def test_fp8_params_needs_a_recipe_that_keeps_parameters(precision: str) -> None:
    system = "gb200-nvl72" if precision == "nvfp4" else "dgx-h100"
    with pytest.raises(InputError, match="job.fp8_params = true"):
        ctx_for(system, precision=precision, fp8_params=True)


def test_the_cli_refuses_fp8_params_with_bf16_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["evaluate", "--model", MODEL, "--system", "dgx-h100", "--global-batch", "8"]
    code = main([*argv, "--dp", "8", "--fp8-params"])
    err = capsys.readouterr().err
    assert code == 2
    assert "job.fp8_params = true" in err and "allowed with fp8_params" in err
    assert err.strip().count("\n") == 0


def test_json_output_carries_fp8_params(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--model", MODEL, "--system", "dgx-h100", "--global-batch", "8"]
    argv += ["--dp", "8", "--zero-stage", "1", "--precision", "fp8", "--json"]
    assert main([*argv, "--fp8-params"]) in (0, 3)
    kept = json.loads(capsys.readouterr().out)
    assert kept["job"]["fp8_params"] is True
    assert main(argv) in (0, 3)
    plain = json.loads(capsys.readouterr().out)
    assert plain["job"]["fp8_params"] is False
    hbm, hbm_plain = kept["estimate"]["memory_gib"]["hbm"], plain["estimate"]["memory_gib"]["hbm"]
    assert hbm["weights"] < hbm_plain["weights"]


@pytest.mark.parametrize("capacity_gib", [0.25, 16])
def test_the_solver_matches_the_oracle_with_fp8_parameters(capacity_gib: float) -> None:
    """The solver's tables read the same model_state / dp_comm_times_s (ONE cost model): its
    optimum is the raw oracle's and its objective the evaluation of its plan."""
    from tests.conftest import gpt_model, simple_system
    from tests.test_planner import assert_solver_matches_oracle

    model = gpt_model(
        hidden=512, heads=8, layers=6, kv_heads=2, ffn_hidden=2048, vocab=32000, seq_len=512
    )
    system = simple_system(
        memory_tiers=[dict(name="HBM", capacity_gib=capacity_gib, bandwidth_gbps=2000)],
        network_tiers=[
            dict(name="nvlink", domain_gpus=4, bandwidth_gbps=300, latency_us=2, efficiency=0.8),
            dict(name="ib", bandwidth_gbps=5, latency_us=5, efficiency=0.8),
        ],
    )
    job = JobSpec(global_batch=16, hbm_reserve_gib=0.01, precision="fp8-current", fp8_params=True)
    assert_solver_matches_oracle(model, system, job, 8)
