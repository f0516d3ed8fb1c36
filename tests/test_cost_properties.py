"""Properties of the cost model over random problems (hypothesis)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware_catalog
from planner.cli import main
from planner.cost.context import CostContext
from planner.cost.knobs import Knobs
from planner.cost.memory import StageParams
from planner.cost.network import RING_BASE_LATENCY_S
from planner.cost.parallel_comm import dp_collectives, dp_comm_times_s
from planner.cost.step import evaluate_terms
from planner.specs import OFFLOAD_KINDS, JobSpec, offload_code
from planner.specs.hardware import override_system
from planner.specs.quantities import OFFLOAD_STEPS
from tests.conftest import gpt_model, simple_system

BANDWIDTH_FIELDS = ("hbm", "offload", "scale_up", "scale_out")


@st.composite
def problems(draw):
    """A small random problem and a valid strategy for it."""
    heads = draw(st.sampled_from([8, 16, 32]))
    head_dim = draw(st.sampled_from([32, 64, 128]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4, 8, heads) if heads % h == 0]))
    layers = draw(st.sampled_from([4, 8, 12, 16]))
    model = gpt_model(
        hidden=heads * head_dim,
        heads=heads,
        kv_heads=kv_heads,
        layers=layers,
        ffn_hidden=4 * heads * head_dim,
        ffn_kind=draw(st.sampled_from(["gelu", "swiglu"])),
        seq_len=draw(st.sampled_from([512, 1024, 2048])),
        dropout=draw(st.booleans()),
    )
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if heads % t == 0]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if layers % p == 0]))
    dp = draw(st.sampled_from([1, 2, 4, 8]))
    mb = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.sampled_from([1, 2, 4, 8]))
    v = draw(st.sampled_from([v for v in (1, 2) if (layers // pp) % v == 0 and (v == 1 or pp > 1)]))
    if v > 1:
        n = max(n, pp)
    knobs = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        interleave=v,
        recompute=draw(st.sampled_from([0, 1, 2])),
        sequence_parallel=draw(st.booleans()),
        zero_stage=draw(st.integers(0, 3)),
        offload_weights=draw(st.sampled_from([0, 1])),
        offload_activations=draw(st.sampled_from([0, 1])),
        offload_optimizer=draw(st.sampled_from([0, 1])),
        dp_overlap=draw(st.booleans()),
        tp_overlap=draw(st.booleans()),
    )
    job = JobSpec(
        global_batch=dp * mb * n, attention=draw(st.sampled_from(["flash", "materialized"]))
    )
    return model, job, knobs


def scaled_system(factor: float, which: str):
    hbm, off, up, out = (factor if which == name else 1.0 for name in BANDWIDTH_FIELDS)
    return simple_system(
        memory_tiers=[
            dict(name="HBM", capacity_gib=80, bandwidth_gbps=3000 * hbm),
            dict(name="offload", capacity_gib=512, bandwidth_gbps=100 * off),
        ],
        network_tiers=[
            dict(name="nvlink", domain_gpus=8, bandwidth_gbps=450 * up, latency_us=3),
            dict(name="ib", bandwidth_gbps=50 * out, latency_us=5),
        ],
    )


@settings(max_examples=150, deadline=None)
@given(problems(), st.sampled_from(BANDWIDTH_FIELDS), st.floats(1.0, 10.0))
def test_more_bandwidth_never_makes_a_step_slower(problem, which, factor) -> None:
    model, job, knobs = problem
    slow = evaluate_terms(CostContext(model, scaled_system(1.0, which), job), Knobs.of(**knobs))
    fast = evaluate_terms(CostContext(model, scaled_system(factor, which), job), Knobs.of(**knobs))
    assert float(fast.step_time_s) <= float(slow.step_time_s) * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_mfu_is_in_zero_one(problem) -> None:
    model, job, knobs = problem
    terms = evaluate_terms(CostContext(model, simple_system(), job), Knobs.of(**knobs))
    assert 0 < float(terms.mfu) <= 1
    assert float(terms.mfu) <= float(terms.hfu) <= 1


@settings(max_examples=150, deadline=None)
@given(problems())
def test_breakdown_adds_up_to_the_step(problem) -> None:
    model, job, knobs = problem
    terms = evaluate_terms(CostContext(model, simple_system(), job), Knobs.of(**knobs))
    total = sum(float(v) for v in terms.breakdown().values())
    assert abs(total / float(terms.step_time_s) - 1) < 1e-9
    assert all(float(v) >= 0 for v in terms.breakdown().values())


@settings(max_examples=150, deadline=None)
@given(problems(), st.integers(0, 2))
def test_more_zero_sharding_never_uses_more_memory(problem, stage) -> None:
    model, job, knobs = problem
    ctx = CostContext(model, simple_system(), job)
    less = evaluate_terms(ctx, Knobs.of(**{**knobs, "zero_stage": stage}))
    more = evaluate_terms(ctx, Knobs.of(**{**knobs, "zero_stage": stage + 1}))
    assert float(more.hbm_bytes) <= float(less.hbm_bytes) * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_more_tensor_parallelism_never_uses_more_memory(problem) -> None:
    model, job, knobs = problem
    if model.heads % (2 * knobs["tp"]) or model.ffn_hidden % (2 * knobs["tp"]):
        return
    ctx = CostContext(model, simple_system(), job)
    less = evaluate_terms(ctx, Knobs.of(**knobs))
    more = evaluate_terms(ctx, Knobs.of(**{**knobs, "tp": 2 * knobs["tp"]}))
    assert float(more.hbm_bytes) <= float(less.hbm_bytes) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(problems(), min_size=2, max_size=30))
def test_vectorised_evaluation_equals_scalar_element_by_element(batch) -> None:
    model, job, _ = batch[0]
    ctx = CostContext(model, simple_system(), job)
    valid = [
        k
        for m, j, k in batch
        if model.heads % k["tp"] == 0
        and model.layers % k["pp"] == 0
        and (model.layers // k["pp"]) % k["interleave"] == 0
        and (k["interleave"] == 1 or k["pp"] > 1)
    ]
    if not valid:
        return
    arrays = {name: np.array([k[name] for k in valid]) for name in valid[0]}
    vector = evaluate_terms(ctx, Knobs.of(**arrays))
    for i, knobs in enumerate(valid):
        scalar = evaluate_terms(ctx, Knobs.of(**knobs))
        assert float(vector.step_time_s[i]) == float(scalar.step_time_s)
        assert float(vector.hbm_bytes[i]) == float(scalar.hbm_bytes)
        assert float(vector.offload_bytes(1)[i]) == float(scalar.offload_bytes(1))
        for name, value in scalar.breakdown().items():
            assert float(vector.breakdown()[name][i]) == float(value)


@settings(max_examples=60, deadline=None)
@given(problems())
def test_partial_recompute_lies_between_none_and_full(problem) -> None:
    """r fully recomputed blocks per stage: r = 0 is recompute none, r = the stage's blocks is
    full; in between, step time rises and HBM falls with r (ZeRO ≤ 2, no offloading: the
    space partial recompute is modelled in)."""
    model, job, knobs = problem
    knobs = {
        **knobs,
        "zero_stage": min(knobs["zero_stage"], 2),
        "offload_weights": 0,
        "offload_activations": 0,
        "offload_optimizer": 0,
    }
    ctx = CostContext(model, simple_system(), job)
    blocks = model.layers // knobs["pp"]

    def terms(code: int, r: int):
        return evaluate_terms(ctx, Knobs.of(**{**knobs, "recompute": code, "recompute_layers": r}))

    none, full = terms(0, 0), terms(2, 0)
    assert float(terms(0, blocks).step_time_s) == pytest.approx(float(full.step_time_s))
    assert float(terms(0, blocks).hbm_bytes) == pytest.approx(float(full.hbm_bytes))
    assert float(terms(0, blocks).hfu) == pytest.approx(float(full.hfu))
    previous = none
    for r in range(1, blocks + 1):
        current = terms(0, r)
        assert float(current.step_time_s) >= float(previous.step_time_s) * (1 - 1e-12)
        if r > 1:  # the first recomputed block adds the rebuilt block's working memory
            assert float(current.hbm_bytes) <= float(previous.hbm_bytes) * (1 + 1e-12)
        previous = current


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from(OFFLOAD_KINDS), st.sampled_from([1.0, 0.05]))
def test_an_offloaded_share_scales_memory_linearly_and_traffic_monotonically(
    problem, kind, link_factor
) -> None:
    """Offloading q eighths of a tensor class: on every stage the offload tier holds q of what
    offloading it all puts there and HBM moves linearly between keeping it all and offloading it
    all, and the step (exposed link traffic) never falls as q grows."""
    model, job, knobs = problem
    knobs = {**knobs, **{f"offload_{k}": 0 for k in OFFLOAD_KINDS}}
    ctx = CostContext(model, scaled_system(link_factor, "offload"), job)

    def terms(eighths: int):
        code = offload_code(1, eighths)
        return evaluate_terms(ctx, Knobs.of(**{**knobs, f"offload_{kind}": code}))

    kept, moved = terms(0), terms(OFFLOAD_STEPS)
    previous = kept
    for eighths in range(1, OFFLOAD_STEPS + 1):
        q = eighths / OFFLOAD_STEPS
        current = terms(eighths)
        for now, none, full in zip(current.stages, kept.stages, moved.stages, strict=True):
            assert float(now.offloaded[0]) == pytest.approx(q * float(full.offloaded[0]))
            expected_hbm = (1 - q) * float(none.hbm_total) + q * float(full.hbm_total)
            assert float(now.hbm_total) == pytest.approx(expected_hbm, rel=1e-9)
        assert float(current.step_time_s) >= float(previous.step_time_s) * (1 - 1e-12)
        previous = current


def test_zero2_dp_traffic_is_not_hidden_twice_in_one_window() -> None:
    """Regression (found by the property above): ZeRO-2 gathers the weights before the forward
    and reduce-scatters every micro-batch. With the forward window counted for both, offloading
    more weights (a longer stall, so a longer window) made the step shorter: 386 → 380 µs from
    two to three eighths offloaded. The reduce-scatter now hides under the backward only. (The
    stack without per-block overhead, as when the case was found: megatron-core's fitted
    overhead lengthens the forward until it hides every weight's offload.)"""
    model = gpt_model(hidden=256, layers=4, heads=8, kv_heads=1, ffn_hidden=1024, seq_len=512)
    stack = hardware_catalog.load_stack("megatron-core").model_copy(
        update={"layer_overhead_us": 0.0, "memory_bound_efficiency": 1.0}
    )
    ctx = CostContext(model, scaled_system(1.0, "offload"), JobSpec(global_batch=4), stack=stack)
    knobs = dict(tp=1, pp=1, dp=4, micro_batch=1, recompute=0, zero_stage=2, dp_overlap=True)
    steps = [
        float(
            evaluate_terms(ctx, Knobs.of(**knobs, offload_weights=offload_code(1, e))).step_time_s
        )
        for e in range(OFFLOAD_STEPS + 1)
    ]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(steps, steps[1:], strict=False))
    assert steps[-1] > steps[0]  # offloading every weight at this bandwidth does cost time


def _dp_comm(
    stack: str,
    dp: int,
    zero_stage: int,
    params: float = 1.3e9,
    blocks: int = 24,
    pp: int = 1,
    recompute: int = 0,
):
    ctx = CostContext(
        gpt_model(), hardware_catalog.load_system("dgx-h100"), JobSpec(global_batch=dp, stack=stack)
    )
    per_block = params / blocks
    stage = StageParams(
        blocks=np.asarray(params),
        block=np.asarray(per_block),
        extra=np.asarray(0.0),
        experts=np.asarray(0.0),
        expert_block=np.asarray(0.0),
    )
    return ctx, dp_comm_times_s(ctx, stage, blocks, 8 * dp, dp, zero_stage, recompute, pp=pp)


def test_per_layer_zero3_units_recompute_inside_the_gathered_block() -> None:
    """Megatron-FSDP (megatron-core's ZeRO-3 unit, one per layer) recomputes a block inside its
    backward, whose weights are gathered already, as FSDP does: full recompute adds no third
    gather; DeepSpeed's ZeRO-3 (buckets) gathers again for the recompute."""
    _, none = _dp_comm("megatron-core", 8, 3)
    _, full = _dp_comm("megatron-core", 8, 3, recompute=2)
    assert float(full.per_micro_batch_s) == pytest.approx(float(none.per_micro_batch_s))
    _, none = _dp_comm("deepspeed", 8, 3)
    _, full = _dp_comm("deepspeed", 8, 3, recompute=2)
    assert float(full.per_micro_batch_s) > float(none.per_micro_batch_s)


def test_torchtitans_zero3_under_pp_moves_each_unit_once_per_step() -> None:
    """FSDP2 under PP reshards nothing during the step (zero3_unsharded_under_pp): each unit is
    gathered once before the first forward and its gradients reduce-scattered once after the
    last backward, the bytes of ZeRO-1's pattern; without PP, or where the stack reshards
    (megatron-core), ZeRO-3 moves them every micro-batch."""
    _, once = _dp_comm("torchtitan", 8, 3, pp=4)
    _, sharded = _dp_comm("torchtitan", 8, 3, pp=1)
    _, megatron = _dp_comm("megatron-core", 8, 3, pp=4)
    assert float(once.per_micro_batch_s) == 0.0 and float(once.latency_per_micro_batch_s) == 0.0
    assert float(once.before_forward_s) > 0.0 and float(once.after_backward_s) > 0.0
    assert float(sharded.before_forward_s) == float(sharded.after_backward_s) == 0.0
    # per micro-batch: the reduce-scatter and the forward and backward gathers
    reduce, gather = float(once.after_backward_s), float(once.before_forward_s)
    assert float(sharded.per_micro_batch_s) == pytest.approx(reduce + 2 * gather)
    assert float(sharded.latency_per_micro_batch_s) == pytest.approx(
        1.5 * float(once.latency_per_step_s)
    )
    assert float(megatron.per_micro_batch_s) > 0.0 and float(megatron.before_forward_s) == 0.0


@pytest.mark.parametrize(
    "stack, dp, expected",
    [
        ("llm-foundry", 512, 25),  # FSDP: one per block and one root unit
        ("torchtitan", 64, 25),
        ("megatron-core", 8, 33),  # ⌈1.3e9 / 40e6⌉ buckets
        ("megatron-core", 512, 3),  # ⌈1.3e9 / (512 · 1e6)⌉
        ("deepspeed", 512, 3),  # ⌈1.3e9 / 5e8⌉
        ("megatron-lm-2022", 512, 1),  # the whole buffer
    ],
)
def test_dp_collectives_follow_the_stacks_unit(stack: str, dp: int, expected: int) -> None:
    ctx, _ = _dp_comm(stack, dp, 1)
    assert float(dp_collectives(ctx, 1.3e9, 24, dp)) == expected


@pytest.mark.parametrize("zero_stage, expected", [(0, 33), (1, 33), (2, 33), (3, 25)])
def test_megatron_cores_zero3_collectives_are_megatron_fsdps_layer_units(
    zero_stage: int, expected: int
) -> None:
    """Megatron-Core's ZeRO-3 is Megatron-FSDP: one collective per transformer layer (its FSDP
    unit) and one for the embedding/head, however many parameters a layer holds; its DDP and
    distributed optimizer keep ⌈1.3e9 / 40e6⌉ buckets (the stack's zero3_collective_unit)."""
    ctx, _ = _dp_comm("megatron-core", 8, zero_stage)
    assert float(dp_collectives(ctx, 1.3e9, 24, 8, zero_stage)) == expected
    _, comm = _dp_comm("megatron-core", 8, 3)
    ring = 7 * ctx.system.network_tiers[1].latency_us * 1e-6  # 8 ranks on 64 GPUs: 8 nodes
    base = RING_BASE_LATENCY_S  # NCCL's, once per collective
    assert float(comm.latency_per_micro_batch_s) == pytest.approx(3 * 25 * (ring + base))


@pytest.mark.parametrize("zero_stage, once, per_mb", [(0, 2, 0), (1, 2, 0), (2, 1, 1), (3, 0, 3)])
def test_every_dp_collective_pays_one_ring_latency(zero_stage, once, per_mb) -> None:
    """(g − 1)·α per ring pass, α of the InfiniBand tier, and NCCL's base latency once per
    collective: the 512 ranks sit one per node (span 8·512), so every hop crosses nodes; an
    all-reduce is two passes of one collective; ZeRO-3 gathers twice and reduces once per
    micro-batch (no recompute)."""
    ctx, comm = _dp_comm("llm-foundry", 512, zero_stage)
    ring = 511 * ctx.system.network_tiers[1].latency_us * 1e-6
    base = RING_BASE_LATENCY_S
    collectives_once = 1 if zero_stage == 0 else once
    expected_once = 25 * (once * ring + collectives_once * base)
    assert float(comm.latency_per_step_s) == pytest.approx(expected_once)
    assert float(comm.latency_per_micro_batch_s) == pytest.approx(per_mb * 25 * (ring + base))


def test_fsdp_steps_grow_with_the_ring_at_a_fixed_per_gpu_batch() -> None:
    """MPT-1b-like FSDP (ZeRO-2, one micro-batch per step): the transfers hide under the passes
    at every GPU count, the latencies do not, so 128 → 512 GPUs adds 384 ring steps to each of
    the 2·25 collectives, each at the InfiniBand hop's latency (a ring that leaves its node
    pays the network's per-step overhead on every hop; network.py) — the llm-foundry H100
    table's pattern; it measured 0.557 → 0.617 s."""
    model = gpt_model(hidden=2048, layers=24, heads=16, ffn_hidden=8192, vocab=50368)
    system = hardware_catalog.load_system("dgx-h100")
    steps = {}
    for gpus in (128, 512):
        job = JobSpec(global_batch=12 * gpus, stack="llm-foundry")
        knobs = Knobs.of(tp=1, pp=1, dp=gpus, micro_batch=12, zero_stage=2, dp_overlap=True)
        steps[gpus] = evaluate_terms(CostContext(model, system, job), knobs)
    alpha = system.network_tiers[1].latency_us * 1e-6
    growth = float(steps[512].step_time_s - steps[128].step_time_s)
    assert growth == pytest.approx(2 * 25 * 384 * alpha, rel=0.02)
    expected = 2 * 25 * (127 * alpha + RING_BASE_LATENCY_S)
    assert float(steps[128].dp_comm_s) == pytest.approx(expected, rel=1e-6)


def test_the_dp_collective_unit_is_in_the_stack_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "show", "llm-foundry", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["dp_collective_unit"] == "block"
    assert "MPTBlock" in shown["sources"]["dp_collective_unit"]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("dp_collective_unit", "layer", "Input should be 'block', 'bucket' or 'buffer'"),
        ("dp_bucket_params", -5, "Input should be greater than or equal to 10000"),
        ("dp_bucket_params", 1e-300, "Input should be greater than or equal to 10000"),
        ("dp_bucket_params_per_rank", -1, "Input should be greater than or equal to 0"),
    ],
)
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_bad_dp_collective_field_is_a_one_line_error(
    tmp_path, capsys: pytest.CaptureFixture[str], field, value, message, json_flag
) -> None:
    stack = tmp_path / "mine.yaml"
    stack.write_text(f"name: mine\n{field}: {value}\n")
    argv = ["evaluate", "--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8"]
    argv += ["--global-batch", "64", "--stack", str(stack), *json_flag]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{field} = " in err and message in err


def _pipeline_terms(scale_out_gbps: float, pp_overlap: bool):
    """gpt3-175b with tp 8, pp 8, v 2 on 64 A100s (the pipeline spans the scale-out tier)
    under megatron-core, whose P2P overlaps compute, or the same profile without it."""
    stack = hardware_catalog.load_stack("megatron-core").model_copy(
        update={"pp_overlap": pp_overlap}
    )
    system = override_system(
        hardware_catalog.load_system("dgx-a100-80g"), {"scale_out_gbps": scale_out_gbps}
    )
    ctx = CostContext(
        hardware_catalog.load_model("gpt3-175b"), system, JobSpec(global_batch=16), stack=stack
    )
    return evaluate_terms(ctx, Knobs.of(tp=8, pp=8, dp=1, interleave=2, recompute="full"))


@pytest.mark.parametrize("scale_out_gbps", [400.0, 25.0, 1.0, 0.1])
def test_overlapped_pipeline_messages_hide_only_under_the_passes(scale_out_gbps: float) -> None:
    """Overlapped P2P shows the excess of the messages over the passes they run under: never
    more than sending them in turn, never less than that minus the stage's compute, and a
    slower link never makes the step faster (issue 40: it was free on any link)."""
    overlapped = _pipeline_terms(scale_out_gbps, pp_overlap=True)
    in_turn = _pipeline_terms(scale_out_gbps, pp_overlap=False)
    shown, sent = float(overlapped.pp_comm_s), float(in_turn.pp_comm_s)
    passes = sum(
        float(overlapped.breakdown()[name])
        for name in ("forward", "backward", "recompute", "offload")
    )
    assert 0.0 <= shown <= sent
    assert shown >= sent - passes - 1e-12
    faster = _pipeline_terms(scale_out_gbps * 4, pp_overlap=True)
    assert float(overlapped.step_time_s) >= float(faster.step_time_s)
    assert sum(float(x) for x in overlapped.breakdown().values()) == pytest.approx(
        float(overlapped.step_time_s), rel=1e-9
    )


def test_a_slow_pipeline_link_shows_through_the_overlap() -> None:
    """At the slowest link allowed the messages outlast the passes, so the overlapped stack
    pays for them and the step is slower than on InfiniBand."""
    slow, fast = _pipeline_terms(0.1, pp_overlap=True), _pipeline_terms(25.0, pp_overlap=True)
    assert float(slow.pp_comm_s) > 0.0
    assert float(slow.step_time_s) >= float(fast.step_time_s) + float(slow.pp_comm_s)


def test_the_plan_charges_the_overlapped_pipeline_messages_as_evaluated() -> None:
    """The CP-SAT encoding of the shown P2P excess is the cost model's: on a slow scale-out link
    with interleaving pinned, the solver's objective is the evaluated step time, which pays
    for the messages."""
    from planner.queries.plan import plan

    system = override_system(hardware_catalog.load_system("dgx-a100-80g"), {"scale_out_gbps": 0.1})
    result = plan("gpt3-175b", system, JobSpec(global_batch=16), 64, pins={"interleave": 2})
    assert result.status == "optimal" and result.strategy.interleave == 2
    assert result.estimate.breakdown_s["pp_comm"] > 0.0
    assert result.solver.objective_step_s == pytest.approx(result.estimate.step_time_s, rel=1e-3)
