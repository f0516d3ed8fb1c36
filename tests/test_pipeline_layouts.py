"""Interleaved pipelines with unequal virtual stages (issue 34 item 5) and what interleaving
costs beyond the ideal bubble (item 6): Megatron-Core's layouts read and written, the slowest
rank and the largest chunk priced, and the published direction of interleaving's gain."""

from __future__ import annotations

import pytest

from planner import launch
from planner.accuracy.validation import load_dataset, predict_step_s
from planner.cost.context import CostContext
from planner.cost.knobs import Knobs
from planner.cost.parallel_comm import group_spans, pp_message_s
from planner.cost.step import evaluate_terms
from planner.errors import InputError
from planner.queries.evaluate import as_model, as_system, evaluate
from planner.space.rules import strategy_violations
from planner.specs import JobSpec, Strategy
from planner.specs.layouts import (
    embedding_loss_layout,
    megatron_layout_text,
    parse_megatron_layout,
)

RECIPE_70B = "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"
"""Megatron-Bridge's H100 70B FP8 recipe layout (current_runs.yaml, 26.04.01 row)."""


def test_the_recipe_layout_string_reads_as_megatron_core_unrolls_it() -> None:
    stages = parse_megatron_layout(RECIPE_70B, 8)
    assert len(stages) == 40 and sum(stages) == 80
    assert stages == (2,) * 35 + (3,) + (2,) * 3 + (1,)
    assert parse_megatron_layout(megatron_layout_text(stages), 8) == stages


@pytest.mark.parametrize(
    ("text", "why"),
    [("Et|tm|tL", "unknown layer"), ("tt|ttL", "embedding E must open"), ("Et|t|tL", "pp = 2")],
)
def test_bad_layout_strings_are_one_line_errors(text: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        parse_megatron_layout(text, 2)


def test_embedding_and_loss_slots_as_the_405b_recipes_count_them() -> None:
    assert embedding_loss_layout(126, 8, 8, True, True) == (1,) + (2,) * 62 + (1,)
    assert embedding_loss_layout(126, 8, 4, True, True) == (3,) + (4,) * 30 + (3,)
    assert embedding_loss_layout(126, 16, 8, True, True) == (0,) + (1,) * 126 + (0,)
    with pytest.raises(InputError, match="must divide"):
        embedding_loss_layout(126, 8, 3, True, True)


def test_ranks_hold_their_chunks() -> None:
    s = Strategy(tp=8, pp=8, dp=8, interleave=8, stage_layers=(1,) + (2,) * 62 + (1,))
    assert s.rank_blocks() == (15,) + (16,) * 6 + (15,)
    assert s.stage_blocks(126) == (15, 16, 15) and s.chunk_blocks() == 2
    # pp entries with interleaving: each rank split evenly over its chunks (Megatron's
    # --decoder-first/last-pipeline-num-layers with virtual stages).
    ranks = Strategy(pp=4, interleave=2, stage_layers=(4, 6, 6, 4))
    assert ranks.virtual_stages() == (2, 3, 3, 2, 2, 3, 3, 2) and ranks.chunk_blocks() == 3


def _job(batch: int = 512) -> JobSpec:
    return JobSpec(global_batch=batch, seq_len=8192, precision="fp8")


def test_uneven_interleaved_layouts_evaluate_and_the_rules_say_why_not() -> None:
    model, system = as_model("llama3-405b"), as_system("dgx-h100")
    layout = (1,) + (2,) * 62 + (1,)
    s = Strategy(
        tp=8,
        cp=2,
        pp=8,
        dp=8,
        interleave=8,
        stage_layers=layout,
        sequence_parallel=True,
        zero_stage=1,
    )
    assert strategy_violations(model, system, _job(), s) == []
    estimate = evaluate(model, system, _job(), s)
    assert estimate.step_time_s > 0
    wrong = s.model_copy(update=dict(stage_layers=(2,) * 63))
    assert any("stages, pp = 8" in p for p in strategy_violations(model, system, _job(), wrong))
    uneven_ranks = s.model_copy(update=dict(interleave=2, stage_layers=(15,) + (16,) * 6 + (15,)))
    assert any(
        "must divide by it" in p for p in strategy_violations(model, system, _job(), uneven_ranks)
    )


def test_an_even_list_of_virtual_stages_is_the_even_layout() -> None:
    """The same cost whether the equal chunks are spelled out or left to layers / (p·v)."""
    model, system = as_model("llama3-70b"), as_system("dgx-h100")
    even = Strategy(tp=4, pp=4, dp=2, interleave=5, sequence_parallel=True)
    spelled = even.model_copy(update=dict(stage_layers=(4,) * 20))
    a, b = evaluate(model, system, _job(64), even), evaluate(model, system, _job(64), spelled)
    assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-12)


def test_the_bubble_follows_the_largest_chunk_and_the_slowest_rank() -> None:
    """Moving one block between two chunks of the same rank leaves every rank's load and so the
    steady state alone; the bubble grows with the largest chunk: (p − 1)·T·c_max/k."""
    model, system = as_model("llama3-70b"), as_system("dgx-h100")
    job = _job(64)
    even = Strategy(tp=4, pp=4, dp=2, interleave=5, sequence_parallel=True)
    skewed = list((4,) * 20)
    skewed[0], skewed[4] = 3, 5  # rank 0: chunks 0 and 1
    ctx = CostContext(model, system, job)
    a = evaluate_terms(ctx, Knobs.from_strategy(even))
    b = evaluate_terms(
        ctx, Knobs.from_strategy(even.model_copy(update=dict(stage_layers=tuple(skewed))))
    )
    per_mb = (a.step_time_s - a.bubble_s - a.dp_comm_s - a.optimizer_s) / a.micro_batches
    assert float(b.bubble_s - a.bubble_s) == pytest.approx(
        float(3 * per_mb * (5 - 4) / 20), rel=1e-9
    )
    # a rank with one more block is the pipeline's bottleneck
    heavy = list((4,) * 20)
    heavy[1], heavy[2] = 5, 3  # rank 1 gains, rank 2 loses
    c = evaluate_terms(
        ctx, Knobs.from_strategy(even.model_copy(update=dict(stage_layers=tuple(heavy))))
    )
    assert float(c.step_time_s) > float(a.step_time_s)


def test_fill_and_drain_messages_of_the_interleaved_schedule() -> None:
    """Bubble = (p − 1)/v·T + 2·(p·(v − 1) + [overlap]·(p − 1))·M (planner/cost/interleave.py);
    at v = 1 the 1F1B bubble is (p − 1)·T."""
    model, system = as_model("gpt3-175b"), as_system("dgx-a100-80g")
    for stack, hidden in (("megatron-lm-2022", False), ("megatron-core", True)):
        job = JobSpec(global_batch=96, stack=stack)
        ctx = CostContext(model, system, job)
        for v in (1, 2, 4):
            s = Strategy(tp=8, pp=12, dp=1, interleave=v)
            t = evaluate_terms(ctx, Knobs.from_strategy(s))
            per_mb = (t.step_time_s - t.bubble_s - t.dp_comm_s - t.optimizer_s) / t.micro_batches
            span = group_spans(8, 1, 12, 1, 0)[1]
            m = pp_message_s(ctx, 8, 1, span, 1)
            hops = 0 if v == 1 else 2 * (12 * (v - 1) + (11 if hidden else 0))
            expected = 11 / v * per_mb + hops * m
            assert float(t.bubble_s) == pytest.approx(float(expected), rel=1e-9), (stack, v)


def test_interleaving_gains_as_narayanan_et_al_report() -> None:
    """Narayanan et al. SC21 §5.3.2, Fig. 12 (GPT-3 175B, 96 A100s, tp 8, pp 12, batch 12-60):
    the interleaved schedule (with the scatter/gather optimisation, which planner's messages
    always have) is faster than the non-interleaved one at every batch size, and the gap closes
    as the batch grows (smaller bubble of the default schedule; more P2P traffic per sample in
    the interleaved one). The abstract's gain: 10+ %. The figure's values are not transcribed in
    this repository, so the test checks the stated direction, the trend, and a gain of ≥ 10 % at
    the smallest batch falling under 15 % at the largest."""
    model, system = as_model("gpt3-175b"), as_system("dgx-a100-80g")
    gains = []
    for batch in (12, 24, 36, 48, 60):
        job = JobSpec(global_batch=batch, stack="megatron-lm-2022")
        times = [
            evaluate(model, system, job, Strategy(tp=8, pp=12, dp=1, interleave=v)).step_time_s
            for v in (1, 2)
        ]
        gains.append(times[0] / times[1] - 1)
    assert all(g > 0 for g in gains)
    assert all(a > b for a, b in zip(gains, gains[1:], strict=False))
    assert gains[0] >= 0.10 and gains[-1] < 0.15


def test_megatron_layout_flags_round_trip() -> None:
    model, system = as_model("llama3-70b"), as_system("dgx-h100")
    job = JobSpec(global_batch=256, seq_len=8192)
    s = Strategy(
        tp=4,
        pp=8,
        dp=2,
        interleave=5,
        sequence_parallel=True,
        zero_stage=1,
        stage_layers=parse_megatron_layout(RECIPE_70B, 8),
    )
    emitted = launch.emit("megatron", model, system, job, s)
    assert "--pipeline-model-parallel-layout" in emitted.text
    back = launch.read("megatron", emitted.text, system)
    assert back.strategy.stage_layers == s.stage_layers and back.strategy.interleave == 5
    slots = emitted.text.replace(
        f"--pipeline-model-parallel-layout '{megatron_layout_text(s.stage_layers)}'",
        "--num-virtual-stages-per-pipeline-rank 5 --account-for-embedding-in-pipeline-split "
        "--account-for-loss-in-pipeline-split",
    )
    assert slots != emitted.text
    with pytest.raises(InputError, match="must divide"):
        launch.read("megatron", slots, system)  # 82 slots over 8 ranks


def test_torchtitans_interleaved_405b_gain_over_1f1b() -> None:
    """torchtitan's Llama 3.1 405B on 512 H100s (benchmarks/llama3_h100_202412_torchtitan.md,
    Table 5; current_runs.yaml): the same job under 1F1B (stages 15,16x6,15) and interleaved 1F1B
    (v 2, virtual stages 7,8x14,7) measured 40.96 s and 32.0 s, a 1.28x gain. Both are predicted
    ~35 % fast (the 500 W cap, current_runs.md); their ratio is within 5 %."""
    path = "hardware_catalog/calibration/current_runs.yaml"
    runs = {run.id: run for run in load_dataset(path).runs}
    pair = [
        runs[f"torchtitan-2412-llama3.1-405b-512gpu-{kind}"] for kind in ("1f1b", "interleaved")
    ]
    measured = pair[0].measured_step_time_s / pair[1].measured_step_time_s
    predicted = [predict_step_s(run) for run in pair]
    assert measured == pytest.approx(1.28, abs=0.005)
    assert predicted[0] / predicted[1] == pytest.approx(measured, rel=0.05)


def test_torchtitan_virtual_stage_layout_round_trips() -> None:
    """torchtitan's interleaved 405B layout: layers_per_stage 8 with first/last_stage_less_layers
    1 over 16 virtual stages (generate_split_points), written and read back."""
    model, system = as_model("llama3-405b"), as_system("dgx-h100")
    s = Strategy(
        tp=8,
        pp=8,
        dp=8,
        micro_batch=4,
        interleave=2,
        recompute="full",
        sequence_parallel=True,
        zero_stage=3,
        stage_layers=(7,) + (8,) * 14 + (7,),
    )
    emitted = launch.emit("torchtitan", model, system, JobSpec(global_batch=256), s)
    assert "pipeline_parallel_first_stage_less_layers = 1" in emitted.text
    back = launch.read("torchtitan", emitted.text, system)
    assert back.strategy.stage_layers == s.stage_layers and back.strategy.interleave == 2
