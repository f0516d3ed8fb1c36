"""Precision recipes (planner.specs.precision, hardware_catalog/precisions/), the sustained
clock under a power cap (AcceleratorSpec.clock_fraction) and torch.compile (JobSpec.compile):
each one's direction and formula on the one cost model."""

from __future__ import annotations

import json
from typing import get_args

import numpy as np
import pytest

import hardware_catalog
from planner.cli import main
from planner.cost.compute import (
    EAGER_RMSNORM_BYTES,
    EAGER_ROPE_BYTES,
    EAGER_SWIGLU_BYTES,
    block_times,
)
from planner.cost.context import CostContext
from planner.cost.memory import model_state
from planner.cost.precision import quantize_bytes
from planner.errors import InputError
from planner.queries.evaluate import evaluate
from planner.specs import JobSpec, Precision, Strategy

MODEL = "llama3-8b"


def ctx_for(system: str = "dgx-h100", **job: object) -> CostContext:
    fields = {"global_batch": 64, "seq_len": 4096, **job}
    return CostContext(
        hardware_catalog.load_model(MODEL), hardware_catalog.load_system(system), JobSpec(**fields)
    )


def forward_s(ctx: CostContext, tp: int = 1, sp: bool = False) -> float:
    return float(block_times(ctx, tp, 1, 0, sp).forward_s)


def test_the_catalog_names_every_recipe_a_job_accepts() -> None:
    accepted = set(get_args(Precision)) - {"fp8"}
    assert set(hardware_catalog.precision_names()) == accepted
    assert JobSpec(global_batch=1, precision="fp8").precision == "fp8-delayed"
    for name in accepted:
        assert hardware_catalog.load_precision(name).sources


def test_fp8_is_faster_than_bf16_and_current_scaling_pays_its_amax_pass() -> None:
    bf16, delayed, current = (ctx_for(precision=p) for p in ("bf16", "fp8-delayed", "fp8-current"))
    assert forward_s(delayed) < forward_s(bf16)
    # current scaling's amax pass and scale computation: Transformer Engine's measured
    # quantization time, 2.335 against 0.990 ms on the same tensors (9.43 against 4 bytes)
    fwd_d, bwd_d = quantize_bytes(delayed, 1, 1, False)
    fwd_c, bwd_c = quantize_bytes(current, 1, 1, False)
    assert float(fwd_c) == pytest.approx(9.43 / 4 * float(fwd_d))
    assert float(bwd_c) == pytest.approx(9.43 / 4 * float(bwd_d))
    extra = (float(fwd_c) - float(fwd_d)) / delayed.memory_bound_bytes_per_s
    assert forward_s(current) - forward_s(delayed) == pytest.approx(extra)
    assert quantize_bytes(bf16, 1, 1, False)[0] == 0


def test_the_fp8_gemm_rate_is_the_fp8_peak_times_its_measured_plateau_ratio() -> None:
    ctx = ctx_for(precision="fp8")
    accel = ctx.system.accelerator
    assert ctx.gemm_rate_flops == pytest.approx(1978.9e12 * accel.matmul_efficiency_scale["fp8"])
    assert ctx.bf16_rate_flops == pytest.approx(989.4e12)


def test_rowwise_casts_the_gathered_input_on_every_tp_rank() -> None:
    """torchao rowwise gathers in bf16: under TP + SP it casts t× the input a tensorwise
    recipe casts (its shard), so it is slower there."""
    stack = {"stack": "torchtitan"}
    tensorwise = ctx_for(precision="fp8-current", **stack)
    rowwise = ctx_for(precision="fp8-rowwise", **stack)
    assert forward_s(rowwise, tp=8, sp=True) > forward_s(tensorwise, tp=8, sp=True)
    assert float(quantize_bytes(rowwise, 8, 1, True)[1]) > 2 * float(
        quantize_bytes(tensorwise, 8, 1, True)[1]
    )


def test_bf16_first_and_last_blocks_scale_the_low_precision_share() -> None:
    layers = hardware_catalog.load_model(MODEL).layers
    ctx = ctx_for(precision="fp8", bf16_first_blocks=2, bf16_last_blocks=1)
    assert ctx.low_precision_share == pytest.approx((layers - 3) / layers)
    everything = ctx_for(precision="fp8", bf16_first_blocks=layers, bf16_last_blocks=0)
    assert everything.low_precision_share == 0
    assert float(block_times(everything, 1, 1, 0, False).forward_gemm_s) == pytest.approx(
        float(block_times(ctx_for(), 1, 1, 0, False).forward_gemm_s)
    )


def test_block_scaled_recipes_need_blackwell() -> None:
    with pytest.raises(InputError, match="precision = 'mxfp8'.*allowed here: bf16"):
        ctx_for(precision="mxfp8")
    with pytest.raises(InputError, match="precision = 'nvfp4'.*no fp4 peak"):
        ctx_for(precision="nvfp4")
    mxfp8 = ctx_for("gb200-nvl72", precision="mxfp8")
    nvfp4 = ctx_for("gb200-nvl72", precision="nvfp4")
    assert nvfp4.peak_flops == 10_000e12
    assert forward_s(nvfp4) < forward_s(mxfp8)


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_the_cli_refuses_a_block_scaled_recipe_on_hopper_in_one_line(
    capsys: pytest.CaptureFixture[str], precision: str
) -> None:
    argv = ["evaluate", "--model", MODEL, "--system", "dgx-h100", "--global-batch", "8"]
    code = main([*argv, "--dp", "8", "--precision", precision])
    err = capsys.readouterr().err
    assert code == 2
    assert f"job.precision = '{precision}'" in err and "allowed here" in err
    assert err.strip().count("\n") == 0


def test_json_output_names_the_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--model", MODEL, "--system", "gb200-nvl72", "--global-batch", "8"]
    assert main([*argv, "--dp", "8", "--precision", "nvfp4", "--json"]) in (0, 3)  # 3: does not fit
    assert json.loads(capsys.readouterr().out)["job"]["precision"] == "nvfp4"


def test_a_power_cap_slows_compute_by_the_measured_power_law() -> None:
    """dgx-h100 carries the measured idle power and exponent: only the power above idle
    scales with throughput, as throughput^α."""
    system = hardware_catalog.load_system("dgx-h100")
    accel = system.accelerator
    assert (accel.idle_power_w, accel.power_exponent) == (121, 2.5)
    capped = system.model_copy(
        update={"accelerator": accel.model_copy(update={"power_cap_w": 500})}
    )
    job = JobSpec(global_batch=64, seq_len=4096)
    model = hardware_catalog.load_model(MODEL)
    fraction = capped.accelerator.clock_fraction
    assert fraction == pytest.approx(((500 - 121) / (700 - 121)) ** (1 / 2.5))
    assert fraction == pytest.approx(0.844, abs=5e-4)
    full, slow = CostContext(model, system, job), CostContext(model, capped, job)
    gemm = float(block_times(full, 1, 1, 0, False).forward_gemm_s)
    assert float(block_times(slow, 1, 1, 0, False).forward_gemm_s) == pytest.approx(gemm / fraction)
    strategy = Strategy(dp=8, micro_batch=1)
    assert (
        evaluate(model, capped, job, strategy).step_time_s
        > evaluate(model, system, job, strategy).step_time_s
    )


def test_an_unmeasured_accelerator_keeps_the_cube_law_and_a_cap_at_or_above_tdp_is_free() -> None:
    accel = hardware_catalog.load_system("hgx-b200").accelerator
    assert (accel.idle_power_w, accel.power_exponent) == (0.0, 3.0)
    capped = accel.model_copy(update={"power_cap_w": 750})
    assert capped.clock_fraction == pytest.approx((750 / 1000) ** (1 / 3))
    assert accel.model_copy(update={"power_cap_w": 1200}).clock_fraction == 1.0


def test_idle_power_at_or_above_the_cap_is_refused() -> None:
    accel = hardware_catalog.load_system("dgx-h100").accelerator
    with pytest.raises(ValueError, match="idle_power_w 121 must be below power_cap_w 100"):
        type(accel).model_validate({**accel.model_dump(), "power_cap_w": 100})


def test_eager_torchtitan_pays_the_unfused_elementwise_bytes() -> None:
    compiled = ctx_for(stack="torchtitan", compile=True)
    eager = ctx_for(stack="torchtitan", compile=False)
    m = compiled.model
    sbh = 4096 * m.hidden
    query_key = m.attention_width + m.head_dim * m.kv_heads
    extra = (
        2 * EAGER_RMSNORM_BYTES * sbh
        + EAGER_ROPE_BYTES * sbh * query_key / m.hidden
        + EAGER_SWIGLU_BYTES * sbh * m.ffn_hidden / m.hidden
    ) / compiled.memory_bound_bytes_per_s
    assert forward_s(eager) - forward_s(compiled) == pytest.approx(extra)
    # Megatron-Core's kernels are fused: compile changes nothing there
    assert forward_s(ctx_for(compile=False)) == forward_s(ctx_for(compile=True))


def test_cached_fp8_weights_cost_memory_only_where_the_stack_caches_them() -> None:
    def weights(**job: object) -> float:
        ctx = ctx_for(**job)
        return float(model_state(ctx, 1, 1, ctx.model.layers, 1, 1, 0, 0, "first").weights)

    blocks = (
        hardware_catalog.load_model(MODEL).layers * hardware_catalog.load_model(MODEL).block_params
    )
    assert weights(precision="fp8") - weights() == pytest.approx(2 * blocks, rel=1e-9)
    torchtitan = {"stack": "torchtitan"}
    assert weights(precision="fp8-current", **torchtitan) == weights(**torchtitan)
    assert np.isfinite(weights(precision="fp8-rowwise"))


@pytest.mark.parametrize("precision", ["fp8", "fp8-current", "mxfp8"])
def test_every_low_precision_recipe_dispatches_experts_in_fp8(precision: str) -> None:
    """StackProfile.fp8_dispatch applies under any FP8/FP4 recipe (the ``fp8`` alias too)."""
    from planner.cost.experts import expert_traffic_s

    def traffic(recipe: str) -> float:
        ctx = CostContext(
            hardware_catalog.load_model("deepseek-v3"),
            hardware_catalog.load_system("gb200-nvl72"),
            JobSpec(global_batch=64, seq_len=4096, precision=recipe, stack="hai-llm"),
        )
        return float(expert_traffic_s(ctx, 1, 0, 8, 1, 0))

    assert traffic(precision) < traffic("bf16")
