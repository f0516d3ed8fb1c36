"""Minimum-hardware answers against exhaustive search over the hardware domain."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constraints import build_plan_model
from constraints.target import PerformanceTarget
from constraints.variables import MAX_TABLE_ENTRIES
from planner.cli import main
from planner.cost.context import CostContext
from planner.cost.memory import memory_floor_gpus
from planner.queries.bandwidth import bandwidth_grid, with_bandwidth_levels
from planner.queries.evaluate import as_model, as_system, evaluate
from planner.queries.gpu_count import gpu_seconds_floor
from planner.queries.min_hardware import min_hardware
from planner.queries.pareto import _up_to_4_digits, pareto
from planner.queries.plan import Plan, plan
from planner.space.search_space import build_search_space
from planner.specs import JobSpec, Strategy
from planner.specs.hardware import with_quantity, with_tier_capacity
from tests.conftest import gpt_model, simple_system

MODEL = gpt_model(hidden=1024, layers=8, heads=16, ffn_hidden=4096, seq_len=1024)
JOB = JobSpec(global_batch=32, hbm_reserve_gib=0.1)


def system(hbm_gib: float = 4.0, **overrides):
    """A small H100-like system with a 64 GiB offload tier at 20 GB/s and `hbm_gib` of HBM."""
    fields = dict(
        gpus_per_node=2,
        max_gpus=64,
        gpu_hour_usd=2.0,
        memory_tiers=[
            dict(name="HBM", capacity_gib=hbm_gib, bandwidth_gbps=2000),
            dict(name="host", capacity_gib=64, bandwidth_gbps=20),
        ],
    )
    fields.update(overrides)
    return simple_system(**fields)


def feasible(sys, gpus, target, job=JOB) -> bool:
    return plan(MODEL, sys, job, gpus, target=target, diagnose=False).strategy is not None


def test_fewest_gpus_is_minimal_over_all_node_multiples() -> None:
    sys = system()
    fastest_on_8 = plan(MODEL, sys, JOB, 8, diagnose=False).estimate.step_time_s
    target = PerformanceTarget(max_step_s=fastest_on_8 * 0.6)
    result = min_hardware(MODEL, sys, JOB, "gpus", target=target)
    assert result.status == "optimal" and result.minimum is not None
    least = int(result.minimum.value)
    assert feasible(sys, least, target)
    assert result.minimum.estimate.step_time_s <= target.max_step_s * (1 + 1e-9)
    for count in range(2, least, 2):
        assert not feasible(sys, count, target), count
    assert result.minimum.below_status == "infeasible"


@pytest.mark.parametrize(
    ("quantity", "tier", "step", "hbm_gib"),
    [("hbm", 0, 0.1, 1.0), ("offload-capacity", 1, 1.0, 0.6)],
)
def test_least_capacity_fits_and_one_step_less_does_not(quantity, tier, step, hbm_gib) -> None:
    sys = system(hbm_gib)
    result = min_hardware(MODEL, sys, JOB, quantity, gpus=2)
    assert result.status == "optimal" and result.minimum is not None
    value = result.minimum.value

    def with_capacity(gib):
        tiers = [
            t.model_copy(update={"capacity_gib": gib}) if i == tier else t
            for i, t in enumerate(sys.memory_tiers)
        ]
        return sys.model_copy(update={"memory_tiers": tuple(tiers)})

    assert feasible(with_capacity(value), 2, None)
    assert not feasible(with_capacity(round(value - step, 4)), 2, None)
    assert result.minimum.below_status == "infeasible"


@pytest.mark.parametrize(
    ("quantity", "knob"),
    [("offload-bandwidth", "offload_bw"), ("scale-out-bandwidth", "scale_out_bw")],
)
def test_least_bandwidth_on_its_grid(quantity, knob) -> None:
    sys = system(1.0)
    gpus = 16
    infinite = plan(
        MODEL, with_quantity(sys, quantity, 1e5), JOB, gpus, diagnose=False
    ).estimate.step_time_s
    target = PerformanceTarget(max_step_s=infinite / 0.8)
    result = min_hardware(
        MODEL, sys, JOB, quantity, gpus=gpus, target=target, bandwidth_range_gbps=(0.5, 500)
    )
    assert result.status == "optimal" and result.minimum is not None
    grid = bandwidth_grid(0.5, 500)
    level = grid.index(result.minimum.value)
    assert feasible(with_quantity(sys, quantity, grid[level]), gpus, target)
    for lower in grid[:level]:
        assert not feasible(with_quantity(sys, quantity, lower), gpus, target), lower


def test_least_cost_matches_exhaustive_search() -> None:
    sys = system()
    job = JOB.model_copy(update={"train_tokens": 1e9})
    result = min_hardware(MODEL, sys, job, "cost")
    assert result.minimum is not None
    costs = []
    for count in range(2, 65, 2):
        found = plan(MODEL, sys, job, count, diagnose=False)
        if found.strategy is not None:
            costs.append(found.estimate.training.gpu_hours * sys.gpu_hour_usd)
    assert result.minimum.value == pytest.approx(min(costs), rel=1e-3)


def test_unreachable_goal_gets_a_diagnosis() -> None:
    result = min_hardware(MODEL, system(), JOB, "gpus", target=PerformanceTarget(min_mfu=0.99))
    assert result.status == "infeasible" and result.minimum is None
    assert result.diagnosis is not None and result.diagnosis.conflicts


def test_pareto_front_is_non_dominated() -> None:
    sys = system(1.0)
    front = pareto(MODEL, sys, JOB, "hbm", "offload-capacity", gpus=2)
    assert front
    for a, b in zip(front, front[1:], strict=False):
        assert a.second < b.second and a.first > b.first


MIN_HARDWARE = [
    "min-hardware",
    "--model",
    "gpt3-1.3b",
    "--system",
    "dgx-h100",
    "--global-batch",
    "256",
]


def test_cli_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            *MIN_HARDWARE,
            "--minimize",
            "gpus",
            "--max-step-time",
            "1",
            "--json",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    minimum = payload["minimum"]
    assert minimum["quantity"] == "gpus" and minimum["unit"] == "GPUs" and minimum["proven"]
    strategy = minimum["strategy"]
    assert strategy["tp"] * strategy["cp"] * strategy["pp"] * strategy["dp"] == minimum["value"]
    assert minimum["estimate"]["step_time_s"] <= 1.0
    assert minimum["below"]["status"] == "infeasible"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--minimize", "hbm"], "needs --gpus"),
        (["--minimize", "offload-capacity", "--gpus", "8"], "no offload tier"),
        (["--minimize", "cost"], "no gpu_hour_usd"),
        (["--minimize", "gpus", "--max-days", "3"], "--max-days needs --train-tokens"),
        (
            ["--minimize", "scale-out-bandwidth", "--gpus", "8", "--bandwidth-range", "100", "10"],
            "--bandwidth-range = 100 10: allowed 0.1 ≤ LOW < HIGH",
        ),
    ],
)
def test_cli_bad_requests(capsys: pytest.CaptureFixture[str], argv, needle) -> None:
    code = main(
        [
            *MIN_HARDWARE,
            *argv,
        ]
    )
    assert code == 2
    assert needle in capsys.readouterr().err


def _minimum_is_exact(model, sys, job, gpus, quantity, target) -> None:
    """plan at the reported minimum meets the goal; one grid step below it does not."""
    tier, step = (0, 0.1) if quantity == "hbm" else (1, 1.0)
    result = min_hardware(model, sys, job, quantity, gpus=gpus, target=target)
    if result.minimum is None:
        assert result.status == "infeasible"
        return
    value = result.minimum.value
    at = plan(model, with_tier_capacity(sys, tier, value), job, gpus, target=target, diagnose=False)
    assert at.strategy is not None, (quantity, value)
    below = round(value - step, 6)
    if below >= (step if quantity == "hbm" else 0.0):  # the grids' lowest: 0.1 / 0 GiB
        under = with_tier_capacity(sys, tier, below)
        assert plan(model, under, job, gpus, target=target, diagnose=False).strategy is None
        assert result.minimum.below_value == below


@settings(max_examples=8, deadline=None)
@given(
    layers=st.sampled_from([4, 8, 12]),
    hidden=st.sampled_from([512, 1024, 2048]),
    gpus=st.sampled_from([2, 4, 8]),
    quantity=st.sampled_from(["hbm", "offload-capacity"]),
    mfu=st.one_of(st.none(), st.floats(0.05, 0.6)),
)
def test_min_hardware_agrees_with_plan_on_random_queries(layers, hidden, gpus, quantity, mfu):
    model = gpt_model(hidden=hidden, layers=layers, heads=16, ffn_hidden=4 * hidden, seq_len=1024)
    target = PerformanceTarget(min_mfu=mfu) if mfu else None
    _minimum_is_exact(model, system(0.6 if quantity != "hbm" else 4.0), JOB, gpus, quantity, target)


def test_least_hbm_above_two_tib_agrees_with_plan() -> None:
    """Regression: memory tables were clipped at 2 TiB when the HBM family was relaxed, so the
    query answered 2,160 GiB for mt-128t, which plan refuted (it needs 2,927 GiB)."""
    from hardware_catalog import load_model, load_system

    job = JobSpec(global_batch=4096)
    target = PerformanceTarget(min_mfu=0.4)
    model, sys = load_model("mt-128t"), load_system("h100-offload-512g")
    result = min_hardware(model, sys, job, "hbm", gpus=16384, target=target)
    assert result.status == "optimal" and result.minimum.value > 2048
    _minimum_is_exact(model, sys, job, 16384, "hbm", target)


def test_unreachable_target_says_the_best_reachable() -> None:
    """An MFU no amount of HBM reaches is named as unreachable, with the best MFU there is
    (it used to say "no strategy fits even without the target", which was false)."""
    sys = system()
    result = min_hardware(MODEL, sys, JOB, "hbm", gpus=8, target=PerformanceTarget(min_mfu=0.99))
    assert result.status == "infeasible"
    details = [c.detail for c in result.diagnosis.conflicts if c.family == "target"]
    assert details and details[0].startswith("unreachable here")
    best = re.search(r"MFU (\d+\.\d)%", details[0])
    assert best and 0 < float(best.group(1)) < 99


def test_gpu_counts_are_integers_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["min-hardware", "--model", "gpt3-1.3b", "--system", "dgx-h100", "--global-batch", "64"]
        + ["--minimize", "gpus", "--max-step-time", "5", "--json"]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    assert isinstance(payload["minimum"]["value"], int)


def test_every_memory_total_is_the_sum_of_its_rows() -> None:
    """Each tier's rows (weights, gradients, optimizer, activations, ...) add up to its total,
    also when the first stage loads HBM most and the last loads the offload tier most."""
    from hardware_catalog import load_model, load_system

    job = JobSpec(global_batch=4096)
    result = plan(
        load_model("mt-128t"),
        load_system("h100-offload-512g"),
        job,
        16384,
        diagnose=False,
        pins={"pp": 32},
    )
    estimates = [result.estimate] if result.estimate else []
    sys = system(0.6)
    for mb in (1, 2):
        from planner.queries.evaluate import evaluate
        from planner.specs import Strategy

        estimates.append(
            evaluate(
                MODEL,
                sys,
                JOB,
                Strategy(pp=2, dp=1, micro_batch=mb, offload_optimizer=1, offload_activations=1),
            )
        )
    for estimate in estimates:
        for tier, rows in estimate.memory_gib.items():
            parts = {
                k: v
                for k, v in rows.items()
                if k not in ("total", "capacity", "usable", "headroom")
            }
            assert sum(parts.values()) == pytest.approx(rows["total"]), (tier, rows)


def test_least_hbm_agrees_with_plan_where_the_query_rounds_memory_coarser() -> None:
    """Regression: 1,000 layers on 1,000 GPUs make the query's memory unit 64 KiB (its need may
    reach 64 TiB) while plan's at the answer is 1 KiB. With a strategy's need 20 KiB under the
    1.1 GiB grid point, the query answered 1.2 GiB (proven), yet plan fits at 1.1 GiB."""
    model = gpt_model(hidden=4096, layers=1000, heads=4, ffn_hidden=16384, seq_len=1024, vocab=1024)
    sys = system(4.0, gpus_per_node=8, max_gpus=1024)
    lean = Strategy(
        tp=4,
        dp=250,
        recompute="full",
        sequence_parallel=True,
        zero_stage=3,
        offload_weights=1,
        offload_activations=1,
        offload_optimizer=1,
    )
    job = JobSpec(global_batch=4000, hbm_reserve_gib=0.1, hbm_usable_fraction=0.95)
    need_gib = evaluate(model, sys, job, lean).memory_gib["hbm"]["total"]
    grid_point = 1.1
    reserve = 0.1 + grid_point * job.hbm_usable_fraction - need_gib - 20 / 2**20
    job = job.model_copy(update={"hbm_reserve_gib": reserve})
    minimum = min_hardware(model, sys, job, "hbm", gpus=1000).minimum
    assert minimum is not None and minimum.value <= grid_point  # plan fits `lean` there
    assert minimum.below_value == round(minimum.value - 0.1, 6)
    assert minimum.below_status == "infeasible"


@pytest.fixture
def spec_args(tmp_path):
    """CLI arguments naming MODEL and a system (``system(hbm_gib, **fields)``) as spec files."""

    def args(hbm_gib: float = 4.0, **fields) -> list[str]:
        model_file, system_file = tmp_path / "model.json", tmp_path / "system.json"
        model_file.write_text(json.dumps(MODEL.model_dump(mode="json")))
        system_file.write_text(json.dumps(system(hbm_gib, **fields).model_dump(mode="json")))
        return ["min-hardware", "--model", str(model_file), "--system", str(system_file)] + [
            "--global-batch",
            "32",
            "--hbm-reserve-gib",
            "0.1",
        ]

    return args


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def test_cli_unreachable_goal_says_what_and_the_best_reached(
    capsys: pytest.CaptureFixture[str], spec_args
) -> None:
    """Issue 10, item 6: the goal is named unreachable with the best MFU reachable, in the
    table and under ``unreachable`` in JSON (the diagnosis's target conflict has it as value)."""
    argv = spec_args() + ["--gpus", "8", "--minimize", "hbm", "--min-mfu", "0.99"]
    code, out = _run(capsys, argv)
    text = " ".join(out.split())
    assert code == 3
    assert "(MFU ≥ 99.0%) is unreachable: the best plan at 65536 GiB of HBM per GPU" in text
    shown = re.search(r"is unreachable: .*? reaches MFU (\d+\.\d)%", text)
    code, out = _run(capsys, [*argv, "--json"])
    payload = json.loads(out)
    assert code == 3 and payload["status"] == "infeasible"
    unreachable = payload["unreachable"]
    assert 0 < unreachable["best_mfu"] < 0.99
    assert shown and shown.group(1) == f"{unreachable['best_mfu'] * 100:.1f}"
    strategy = unreachable["strategy"]
    assert strategy["tp"] * strategy["pp"] * strategy["dp"] == 8
    (target,) = [c for c in payload["diagnosis"]["conflicts"] if c["family"] == "target"]
    assert target["unit"] == "MFU" and target["value"] == pytest.approx(unreachable["best_mfu"])


def test_cli_counts_are_ints_and_large_values_have_no_exponent(
    capsys: pytest.CaptureFixture[str], spec_args
) -> None:
    """Issue 10, item 7: a GPU count in a diagnosis is an int in JSON (it was 4.0), and a
    minimum of millions prints in full in the table (it was 7.11901e+06)."""
    argv = spec_args(0.3) + ["--gpus", "2", "--minimize", "offload-capacity", "--json"]
    code, out = _run(capsys, argv)
    (fewest,) = [r for r in json.loads(out)["diagnosis"]["relaxations"] if r["quantity"] == "gpus"]
    assert code == 3 and fewest["value"] == 4 and isinstance(fewest["value"], int)
    argv = spec_args(gpu_hour_usd=1e6) + ["--minimize", "cost", "--train-tokens", "1e10"]
    code, out = _run(capsys, argv)
    shown = re.search(r"least cost: (\S+) USD", out)
    code, out = _run(capsys, [*argv, "--json"])
    value = json.loads(out)["minimum"]["value"]
    assert code == 0 and value > 1e6
    assert shown and shown.group(1) == f"{value:.0f}"


def test_cli_memory_columns_name_their_stage(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 10, item 8: mt-128t's minimum-HBM plan loads HBM most on the last stage and the
    offload tier on the first (in-flight activations): each column says whose rows it lists
    (the table's title said "last pipeline stage" for both), and its rows add up to its total."""
    argv = [
        *("evaluate", "--model", "mt-128t", "--system", "h100-offload-512g", "--gpus", "16384"),
        *("--global-batch", "4096", "--tp", "8", "--pp", "32", "--micro-batch", "1"),
        *("--interleave", "15", "--recompute", "full", "--sequence-parallel", "--zero-stage", "1"),
        *("--offload-activations", "1", "--offload-optimizer", "1"),
    ]
    code, out = _run(capsys, argv)
    assert code == 3  # 80 GiB of HBM is far too little; the table is printed all the same
    header = next(line for line in out.splitlines() if "stage" in line and "item" in line)
    assert header.index("last stage") < header.index("first stage")
    code, out = _run(capsys, [*argv, "--json"])
    estimate = json.loads(out)["estimate"]
    assert estimate["memory_stage"] == {"hbm": "last", "offload_1": "first"}
    offload = estimate["memory_gib"]["offload_1"]
    rows = ("weights", "gradients", "optimizer", "activations")
    assert sum(offload[k] for k in rows) == pytest.approx(offload["total"])


def test_a_bandwidth_query_tabulates_only_what_the_bandwidth_moves() -> None:
    """The DP ring latencies do not depend on the bandwidth: a scale-out query tabulates only
    the transfers over its levels. gpt3-175b on 1,024 H100s over the default 81 levels needed
    more than MAX_TABLE_ENTRIES when the latencies carried the levels too (and the levels'
    tables were counted twice)."""
    model, system, job = as_model("gpt3-175b"), as_system("dgx-h100"), JobSpec(global_batch=1536)
    current = system.network_tiers[-1].bandwidth_gbps
    grid = bandwidth_grid(current / 64, current * 16)  # min_hardware's default range
    ctx = CostContext(model, system, job)
    space = build_search_space(model, system, job, 1024, {})
    plain = build_plan_model(ctx, space)
    built = build_plan_model(ctx, with_bandwidth_levels(space, "scale_out_bw", grid))
    assert len(grid) == 81
    assert built.variables.entries <= MAX_TABLE_ENTRIES
    latency = [v for v in built.model.Proto().variables if v.name.startswith("dp_latency")]
    plain_latency = [v for v in plain.model.Proto().variables if v.name.startswith("dp_latency")]
    assert latency and [tuple(v.domain) for v in latency] == [
        tuple(v.domain) for v in plain_latency
    ]


# -- fewest GPUs against plan one node below (issue 40) ----------------------------------------

LLAMA3_405B_60_DAYS_S = 60 * 86400 * 2048 * 8192 / 15e12
"""llama3-405b's step-time bound for 15T tokens of 2,048 × 8,192 in 60 days (5.8 s)."""


@pytest.mark.parametrize(
    ("model", "batch", "step_s", "plan_found", "uneven"),
    [
        ("gpt3-175b", 1536, 10.0, 704, True),
        # 20,480 on uneven stages, then 21,504 on pp 21 after the Hopper cuDNN 9.19.1 curve;
        # 16,384 since plan searches Megatron's embedding and loss slots (pp 16, v 8)
        ("llama3-405b", 2048, LLAMA3_405B_60_DAYS_S, 16384, True),
    ],
    ids=["gpt3-175b-10s", "llama3-405b-60-days"],
)
def test_fewest_gpus_meets_the_goal_and_one_node_less_does_not(
    model: str, batch: int, step_s: float, plan_found: int, uneven: bool
) -> None:
    """Issue 40: min-hardware answered 768 and 21,504 GPUs "proven" while plan met the goal on
    704 and 20,480 with uneven stage layouts. The answer is at most what plan found, plan meets
    the goal there and proves that it cannot one node below (the next smaller candidate)."""
    job, target = JobSpec(global_batch=batch), PerformanceTarget(max_step_s=step_s)
    result = min_hardware(model, "dgx-h100", job, "gpus", target=target)
    assert result.status == "optimal" and result.minimum.proven
    least = result.minimum.value
    assert least <= plan_found and least % 8 == 0
    at = plan(model, "dgx-h100", job, least, target=target, diagnose=False)
    assert at.strategy is not None and at.estimate.step_time_s <= step_s
    below = plan(model, "dgx-h100", job, least - 8, target=target, diagnose=False)
    assert below.status == "infeasible"
    assert result.minimum.below_value == least - 8 and result.minimum.below_status == "infeasible"
    assert (result.minimum.strategy.stage_layers is not None) == uneven  # uneven stages found


def test_fewest_gpus_minimal_with_uneven_stages_on_a_small_model() -> None:
    """Every node multiple below the answer fails plan on a 7-layer model, whose pipelines of
    2, 3, 4 and 6 stages are uneven (the free-count space searched pp dividing 7 only)."""
    model = gpt_model(hidden=1024, layers=7, heads=16, ffn_hidden=4096, seq_len=1024)
    sys = system()
    fastest_on_8 = plan(model, sys, JOB, 8, diagnose=False).estimate.step_time_s
    target = PerformanceTarget(max_step_s=fastest_on_8 * 0.5)
    result = min_hardware(model, sys, JOB, "gpus", target=target)
    assert result.status == "optimal" and result.minimum.proven
    least = int(result.minimum.value)
    assert plan(model, sys, JOB, least, target=target, diagnose=False).strategy is not None
    for count in range(2, least, 2):
        assert plan(model, sys, JOB, count, target=target, diagnose=False).strategy is None, count


def test_the_compute_floor_is_below_every_plan() -> None:
    """gpu_seconds_floor bounds GPUs × step time of the fastest plan at every GPU count (the
    proof that no count below the floor meets a step-time goal rests on it), on a 7-layer
    model whose pipelines are uneven; on 2 GPUs the fastest plan is within 20 % of it."""
    model = gpt_model(hidden=1024, layers=7, heads=16, ffn_hidden=4096, seq_len=1024)
    sys = system(hbm_gib=80.0)
    space = build_search_space(model, sys, JOB, None, max_gpus=64, gpu_multiple=2)
    floor_s = gpu_seconds_floor(CostContext(model, sys, JOB), space)
    products = {}
    for count in [*range(2, 33, 2), 48, 64]:
        found = plan(model, sys, JOB, count, diagnose=False)
        if found.strategy is not None:  # 10, 14, ... GPUs: no tp·pp·dp multiplies to them
            products[count] = count * found.estimate.step_time_s
    assert min(products.values()) >= floor_s
    assert products[2] < 1.2 * floor_s


def test_a_spent_work_budget_is_unknown_not_proven() -> None:
    """With too little work to refute or find any count, the answer is unknown, and the limit
    that stopped it is named; never a proof."""
    job, target = JobSpec(global_batch=1536), PerformanceTarget(max_step_s=10.0)
    result = min_hardware("gpt3-175b", "dgx-h100", job, "gpus", target=target, work_limit=1e-3)
    assert result.status in ("unknown", "feasible")
    assert result.minimum is None or not result.minimum.proven
    assert result.stopped_by == "work limit"


BAD_GOALS = [
    (["--minimize", "gpus", "--min-mfu", "1e-300"], "--min-mfu"),
    (["--minimize", "gpus", "--max-step-time", "5e-324"], "--max-step-time"),
    (["--minimize", "gpus", "--train-tokens", "1e-300", "--max-days", "1"], "--train-tokens"),
    (["--minimize", "gpus", "--train-tokens", "15e12", "--max-days", "5e-324"], "--max-days"),
    (["--minimize", "gpus", "--train-tokens", "1e18", "--max-days", "0.001"], "--max-days"),
    (
        ["--minimize", "scale-out-bandwidth", "--gpus", "8", "--bandwidth-range", "5e-324", "1"],
        "--bandwidth-range",
    ),
    (
        ["--minimize", "scale-out-bandwidth", "--gpus", "8", "--bandwidth-range", "1", "5000"],
        "--bandwidth-range",
    ),
]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
@pytest.mark.parametrize(("argv", "flag"), BAD_GOALS, ids=[a[-2] + a[-1] for a, _ in BAD_GOALS])
def test_cli_tiny_goals_are_one_line_input_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, as_json: bool
) -> None:
    """Issue 40: subnormal goals overflowed (OverflowError, exit 1); now exit 2 with one line
    naming the flag, its value and the allowed range."""
    code = main([*MIN_HARDWARE, *argv, *(["--json"] if as_json else [])])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not captured.out
    assert flag in lines[0] and "allowed" in lines[0] and "Traceback" not in captured.err


def test_cli_fewest_gpus_says_how_smaller_counts_were_refuted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*MIN_HARDWARE, "--minimize", "gpus", "--max-step-time", "1"]
    code, out = _run(capsys, argv)
    assert code == 0 and "evidence: multiples of" in " ".join(out.split())
    code, out = _run(capsys, [*argv, "--json"])
    payload = json.loads(out)
    minimum = payload["minimum"]
    assert code == 0 and minimum["evidence"].startswith("multiples of")
    assert minimum["unrefuted"] == [] and payload["stopped_by"] is None
    assert 0 <= payload["work_units"] <= 60


@given(st.floats(1e-6, 1e9))
def test_sweep_caps_round_up_never_below_the_corner(value: float) -> None:
    """A front's caps are rounded to 4 significant digits upwards: rounded down, the tightest
    cap fell below the corner's own requirement (9.834 s for gpt3-175b's 9.8345 s on 704 GPUs)
    and the front's first point was 720 GPUs, not 704."""
    cap = _up_to_4_digits(value)
    assert value <= cap <= value * (1 + 1e-3) and cap == float(f"{cap:.4g}")


def test_an_mfu_above_the_compute_floor_is_refuted_at_once() -> None:
    """An MFU no GPU count reaches by compute alone is infeasible without planning every count
    (the diagnosis at the top of a 1,048,576-GPU domain searched fixes for 51 s): the
    conflict names the goal."""
    job, target = JobSpec(global_batch=1536), PerformanceTarget(min_mfu=0.99)
    result = min_hardware("gpt3-175b", "dgx-h100", job, "gpus", target=target)
    assert result.status == "infeasible" and result.minimum is None
    assert [c.family for c in result.diagnosis.conflicts] == ["target"]
    assert result.work_units < 5
    assert not result.diagnosis.fixes_searched and not result.diagnosis.relaxations


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_conflict_only_diagnosis_says_no_fix_was_searched(
    capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Min-hardware's diagnosis at the domain's top names the conflict only: the report says
    the fixes were not searched for, not that none was found."""
    from planner.cli import main

    argv = ["min-hardware", "--model", "gpt3-175b", "--system", "dgx-h100"]
    argv += ["--global-batch", "1536", "--minimize", "gpus", "--min-mfu", "0.99"]
    code = main([*argv, *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    assert code == 3
    if as_json:
        assert json.loads(out)["diagnosis"]["fixes_searched"] is False
    else:
        assert "were not searched for" in out and "No single change" not in out


def test_a_count_whose_plan_ran_out_leaves_the_answer_unproven(monkeypatch) -> None:
    """A count whose plan ran out of work is neither refuted nor skipped: the least count
    found after it is the answer, not proven, and the count is listed as unrefuted."""
    import planner.queries.hardware_query as module

    sys = system()
    fastest_on_8 = plan(MODEL, sys, JOB, 8, diagnose=False).estimate.step_time_s
    target = PerformanceTarget(max_step_s=fastest_on_8 * 0.6)
    planned: list[int] = []

    def recording(*args, **kwargs):
        planned.append(args[3])
        return plan(*args, **kwargs)

    monkeypatch.setattr(module, "plan", recording)
    exact = min_hardware(MODEL, sys, JOB, "gpus", target=target).minimum
    assert exact.proven and planned[0] < exact.value
    cut_short = planned[0]  # refuted by plan in the exact run

    def running_out(*args, **kwargs):
        if args[3] == cut_short:
            return Plan(status="unknown", strategy=None, estimate=None, solver=None)
        return plan(*args, **kwargs)

    monkeypatch.setattr(module, "plan", running_out)
    result = min_hardware(MODEL, sys, JOB, "gpus", target=target)
    minimum = result.minimum
    assert result.status == "feasible" and not minimum.proven
    assert minimum.value == exact.value and minimum.unrefuted == [cut_short]
    assert "1 unknown (plan ran out of budget)" in minimum.evidence


def test_least_cost_with_uneven_stages_matches_exhaustive_search() -> None:
    """The least cost's free-count model searches every pp plan's fixed counts do: on a 5-layer
    model in 0.4 GiB of HBM it finds the exhaustive search's cheapest plan and layout (a free
    count's pp over the layers' divisors (1, 5) once left out pp 2 with 3,2 blocks)."""
    model = gpt_model(hidden=1024, layers=5, heads=16, ffn_hidden=4096, seq_len=1024)
    sys = system(0.4, memory_tiers=[dict(name="HBM", capacity_gib=0.4, bandwidth_gbps=2000)])
    job = JOB.model_copy(update={"train_tokens": 1e9})
    result = min_hardware(model, sys, job, "cost")
    assert result.status == "optimal"
    costs = []
    for count in range(2, 65, 2):
        found = plan(model, sys, job, count, diagnose=False)
        if found.strategy is not None:
            cost = found.estimate.training.gpu_hours * sys.gpu_hour_usd
            costs.append((cost, found.strategy.stage_layers))
    cheapest, layout = min(costs, key=lambda item: item[0])
    assert result.minimum.value == pytest.approx(cheapest, rel=1e-3)
    # the same layout as the exhaustive search's cheapest (pp 2 with 3,2 blocks before the
    # stack's logits took 2 bytes; now pp 1 with partial recompute)
    assert result.minimum.strategy.stage_layers == layout


@pytest.mark.parametrize("hbm_gib", [0.2, 0.6])
def test_the_memory_floor_is_below_every_count_that_fits(hbm_gib: float) -> None:
    """memory_floor_gpus bounds the GPU counts any strategy fits on (the proof that no count
    below it fits rests on it): plan finds no strategy below it."""
    sys = system(
        hbm_gib, memory_tiers=[dict(name="HBM", capacity_gib=hbm_gib, bandwidth_gbps=2000)]
    )
    floor = memory_floor_gpus(CostContext(MODEL, sys, JOB))
    fits = [n for n in range(2, 65, 2) if plan(MODEL, sys, JOB, n, diagnose=False).strategy]
    assert floor > 2 and fits and min(fits) >= floor


def test_a_sweep_shares_one_work_budget(monkeypatch) -> None:
    """Issue 40: `--sweep ... --time-limit 5` ran 31-37 s, every query of the front with the
    whole limit. Each query now gets what the ones before it left."""
    import planner.queries.pareto as module

    calls: list[tuple[float, float]] = []

    def recording(*args, **kwargs):
        result = min_hardware(*args, **kwargs)
        calls.append((kwargs["work_limit"], result.work_units))
        return result

    monkeypatch.setattr(module, "min_hardware", recording)
    front = pareto(MODEL, system(1.0), JOB, "hbm", "offload-capacity", gpus=2, work_limit=30.0)
    assert front and len(calls) > 2
    spent = 0.0
    for limit, units in calls:
        assert limit == pytest.approx(30.0 - spent)
        spent += units
    assert spent > 0
