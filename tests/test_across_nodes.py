"""What a stack does with its messages across nodes (issue 48): pipeline transfers as the stack
sends them, DP overlap where the stack has it, the reduction it runs, and the range a prediction
carries (planner/cost/parallel_comm.py, step.py, uncertainty.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hardware_catalog
from planner.cli import main
from planner.cost import network
from planner.cost.context import ROBUST_NETWORK_SCALE, CostContext
from planner.cost.knobs import Knobs
from planner.cost.parallel_comm import dp_collectives, pp_message_s, pp_transfers
from planner.cost.step import dp_overlap_on, evaluate_terms
from planner.cost.uncertainty import EXTRAPOLATION_PER_DOUBLING, STACK_ERROR, step_range
from planner.errors import InputError
from planner.queries.evaluate import evaluate
from planner.queries.plan import plan
from planner.specs import JobSpec, Strategy

H100 = hardware_catalog.load_system("dgx-h100")
LLAMA = hardware_catalog.load_model("llama3-8b")


def _ctx(stack: str, **job: object) -> CostContext:
    return CostContext(LLAMA, H100, JobSpec(global_batch=256, seq_len=4096, stack=stack, **job))


def test_a_serial_stacks_middle_stage_waits_on_four_transfers() -> None:
    nanotron, megatron = _ctx("nanotron"), _ctx("megatron-core")
    assert [pp_transfers(nanotron, s) for s in ("first", "middle", "last")] == [2, 4, 2]
    assert [pp_transfers(megatron, s) for s in ("first", "middle", "last")] == [2, 2, 2]
    # on the step: pp 4 across 4 nodes, where the LM head is small the middle stages bound it
    # by their extra transfers
    gpt = hardware_catalog.load_model("gpt3-1.3b")
    ctx = CostContext(gpt, H100, JobSpec(global_batch=256, seq_len=4096, stack="nanotron"))
    terms = evaluate_terms(ctx, Knobs.of(tp=8, pp=4, dp=1, micro_batch=1, zero_stage=0))
    message = float(pp_message_s(ctx, 8, 1, 32, 1, False))
    assert float(terms.pp_comm_s) == pytest.approx(256 * 4 * message, rel=1e-9)


def test_a_transfer_is_the_whole_activation_without_sp_where_the_stack_does_not_scatter() -> None:
    """b·s·h·2 bytes, over t only with SP (or Megatron's scatter/gather), plus the metadata
    messages' latencies (nanotron: 6 messages a transfer) across the network."""
    nanotron, megatron = _ctx("nanotron"), _ctx("megatron-core")
    whole = 2 * 4096 * LLAMA.hidden
    span = 32  # the pipeline spans 4 nodes
    assert float(pp_message_s(nanotron, 8, 1, span, 1, False)) == pytest.approx(
        float(network.point_to_point_s(nanotron, span, whole, 6))
    )
    assert float(pp_message_s(nanotron, 8, 1, span, 1, True)) == pytest.approx(
        float(network.point_to_point_s(nanotron, span, whole / 8, 6))
    )
    assert float(pp_message_s(megatron, 8, 1, span, 1, False)) == pytest.approx(
        float(network.point_to_point_s(megatron, span, whole / 8, 1))
    )


def test_nanotron_reduces_zero1_by_a_blocking_all_reduce_of_one_buffer() -> None:
    ctx = _ctx("nanotron")
    assert not bool(dp_overlap_on(ctx, True, 1)) and bool(dp_overlap_on(ctx, True, 0))
    assert bool(dp_overlap_on(_ctx("megatron-core"), True, 1))
    # ZeRO-0: DDP buckets of 12.5M parameters whatever the group; ZeRO-1: one buffer
    assert float(dp_collectives(ctx, 1.0e9, 32, 64, 0)) == 80
    assert float(dp_collectives(ctx, 1.0e9, 32, 64, 1)) == 1
    # the ZeRO-1 reduction is an all-reduce of the gradients (twice a reduce-scatter's bytes),
    # and none of it hides
    knobs = dict(tp=1, pp=1, dp=32, micro_batch=1)
    zero1 = evaluate_terms(ctx, Knobs.of(**knobs, zero_stage=1, dp_overlap=True))
    params = LLAMA.params
    all_reduce = network.all_reduce_s(ctx, 32, 32, 4 * params)
    gather = network.reduce_scatter_s(ctx, 32, 32, 2 * params)
    assert float(zero1.dp_comm_s) == pytest.approx(float(all_reduce + gather), rel=0.02)


def test_what_a_stack_does_not_run_is_a_clear_error_and_not_searched() -> None:
    job = JobSpec(global_batch=256, seq_len=4096, stack="nanotron")
    with pytest.raises(InputError, match="runs no interleaved pipeline schedule"):
        evaluate(LLAMA, H100, job, Strategy(tp=8, pp=4, dp=1, interleave=2))
    with pytest.raises(InputError, match="implements ZeRO up to stage 1"):
        evaluate(LLAMA, H100, job, Strategy(tp=8, pp=1, dp=4, zero_stage=2))
    result = plan(LLAMA, H100, job, 64)
    assert result.strategy.interleave == 1 and result.strategy.zero_stage <= 1


def _range(ctx: CostContext, knobs: Knobs, gpus: int):
    """step_range of ``knobs`` with its step under ``ctx`` evaluated first."""
    return step_range(ctx, knobs, gpus, float(evaluate_terms(ctx, knobs).step_time_s))


def test_the_range_widens_with_traffic_across_nodes_and_beyond_the_calibration() -> None:
    """Inside one node nothing crosses a domain: ±the stack's error. Across nodes the network
    part opens it; past the stack's calibrated GPU count the upper end grows per doubling; a
    stack with borrowed constants doubles the error."""
    core = _ctx("megatron-core")
    inside = _range(core, Knobs.of(tp=8, pp=1, dp=1, micro_batch=1), 8)
    assert inside.network_share == pytest.approx(0.0, abs=1e-12)
    assert inside.low_s == pytest.approx(inside.nominal_s * (1 - STACK_ERROR))
    assert inside.high_s == pytest.approx(inside.nominal_s * (1 + STACK_ERROR))
    across = _range(core, Knobs.of(tp=16, pp=4, dp=1, micro_batch=1), 64)
    assert across.network_share > 0.01 and len(across.reasons) == 2
    assert across.high_s > across.nominal_s * (1 + STACK_ERROR)
    huge = _range(core, Knobs.of(tp=8, pp=1, dp=4 * 11616 // 8, micro_batch=1), 4 * 11616)
    assert any("beyond the 11,616" in reason for reason in huge.reasons)
    ratio = huge.high_s / (huge.nominal_s * (1 + huge.network_share) * (1 + STACK_ERROR))
    assert ratio == pytest.approx(1 + 2 * EXTRAPOLATION_PER_DOUBLING, rel=1e-6)
    borrowed = _range(_ctx("nanotron"), Knobs.of(tp=8, pp=1, dp=1, micro_batch=1), 8)
    assert borrowed.high_s == pytest.approx(borrowed.nominal_s * (1 + 2 * STACK_ERROR))


def test_robust_plans_price_cross_node_messages_slower_and_keep_one_cost_model() -> None:
    nominal = _ctx("nanotron")
    robust = _ctx("nanotron", robust=True)
    assert nominal.network_scale == 1.0 and robust.network_scale == ROBUST_NETWORK_SCALE
    rate = [network.tier_rate(c, 1) for c in (nominal, robust)]
    assert rate[0] / rate[1] == pytest.approx(ROBUST_NETWORK_SCALE)
    assert network.tier_rate(robust, 0) == network.tier_rate(nominal, 0)
    job = JobSpec(global_batch=256, seq_len=4096, stack="nanotron", robust=True)
    result = plan(LLAMA, H100, job, 64)
    again = evaluate(LLAMA, H100, job, result.strategy)
    assert again.step_time_s == pytest.approx(result.estimate.step_time_s, rel=1e-9)
    assert result.estimate.step_range.high_s >= again.step_time_s


def test_the_range_in_the_reports(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "32"]
    argv += ["--global-batch", "256", "--stack", "nanotron", "--tp", "8", "--pp", "4"]
    assert main(argv) == 0
    assert "step time range" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    ranged = json.loads(capsys.readouterr().out)["estimate"]["step_range"]
    assert ranged["low_s"] < ranged["nominal_s"] < ranged["high_s"]
    assert np.isfinite(ranged["network_share"]) and ranged["reasons"]
    plan_argv = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "32"]
    plan_argv += ["--global-batch", "256", "--stack", "nanotron", "--robust", "--json"]
    assert main(plan_argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["status"] == "optimal" and payload["estimate"]["step_range"]
