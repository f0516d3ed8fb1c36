"""AxoNN's tensor parallelism end to end: Megatron-AxoNN's launch format (emit and read back),
evaluate's grid flags, --pin on the grid knobs, and the plan report's TP form (table and JSON)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import launch
from planner.cli import main
from planner.errors import InputError
from planner.queries.evaluate import as_model, as_system, evaluate
from planner.space.rules import strategy_violations
from planner.specs import JobSpec, Strategy

OK = 0
BAD = 2
SYSTEM = "dgx-a100-80g"
JOB = JobSpec(global_batch=64, stack="axonn")


@st.composite
def axonn_strategies(draw) -> tuple:
    """A valid strategy of llama2-7b or gpt3-1.3b on 16 GPUs under the axonn stack."""
    model = as_model(draw(st.sampled_from(["llama2-7b", "gpt3-1.3b"])))
    tp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    column = draw(st.sampled_from([d for d in (1, 2, 4) if tp % d == 0]))
    depth = draw(st.sampled_from([d for d in (1, 2, 4, 8) if (tp // column) % d == 0]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if tp * p <= 16]))
    strategy = Strategy(
        tp=tp,
        tp_column=column,
        tp_depth=depth,
        pp=pp,
        dp=16 // (tp * pp),
        micro_batch=draw(st.sampled_from([1, 2, 4, 8])),
        recompute=draw(st.sampled_from(["none", "full"])),
        zero_stage=draw(st.sampled_from([0, 1])),
        tp_overlap=draw(st.booleans()),
        dp_overlap=False,
        placement="tp-pp-dp",
    )
    job = JobSpec(global_batch=64, seq_len=draw(st.sampled_from([2048, 4096])), stack="axonn")
    system = as_system(SYSTEM)
    if strategy_violations(model, system, job, strategy, 16):
        strategy = Strategy(tp=2, pp=2, dp=4, micro_batch=2, placement="tp-pp-dp", dp_overlap=False)
    return model, job, strategy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(axonn_strategies())
def test_emit_then_read_gives_the_grid_back(problem: tuple) -> None:
    """emit axonn → read: the same strategy (grid, overlap, rank order), job and step time."""
    model, job, strategy = problem
    system = as_system(SYSTEM)
    emitted = launch.emit("axonn", model, system, job, strategy)
    assert emitted.notes == [], emitted.notes
    back = launch.read("axonn", emitted.text, system)
    assert back.strategy == strategy
    assert back.job["stack"] == "axonn" and back.unsupported == []
    theirs = evaluate(back.model, system, job.model_copy(update=back.job), back.strategy)
    assert theirs.step_time_s == evaluate(model, system, job, strategy).step_time_s


def test_the_configuration_uses_megatron_axonns_argument_names() -> None:
    model, system = as_model("llama2-7b"), as_system(SYSTEM)
    strategy = Strategy(
        tp=16, tp_column=2, tp_depth=4, dp=1, micro_batch=4, tp_overlap=True, dp_overlap=False
    )
    text = launch.emit(
        "axonn", model, system, JOB, strategy.model_copy(update={"placement": "tp-pp-dp"})
    ).text
    for line in (
        "--row-tensor-model-parallel-size 2",
        "--column-tensor-model-parallel-size 2",
        "--depth-tensor-model-parallel-size 4",
        "--overlap-axonn-comm",
        "--overlap-axonn-reduce-scatter",
        "--overlap-axonn-all-gather",
        "--num-layers-for-caching-weights-in-depth-tensor-parallel-all-gather 0",
        "--use-flash-attn",
    ):
        assert line in text, line
    for flag in ("--tensor-model-parallel-size", "--overlap-grad-reduce", "--tp-comm-overlap"):
        assert flag not in text


def test_a_cached_layer_count_is_noted() -> None:
    model, system = as_model("llama2-7b"), as_system(SYSTEM)
    strategy = Strategy(tp=8, tp_depth=4, dp=2, micro_batch=4, placement="tp-pp-dp")
    text = launch.emit("axonn", model, system, JOB, strategy).text
    text = text.replace("all-gather 0", "all-gather 25")
    back = launch.read("axonn", text, system)
    assert back.strategy.tp_depth == 4 and back.strategy.tp_row == 2
    assert any("costed as 0" in note for note in back.notes)


def _axonn_text(old: str, new: str) -> str:
    """An emitted Megatron-AxoNN configuration (tp 8 = row 2 · depth 4) with ``old`` replaced."""
    model, system = as_model("llama2-7b"), as_system(SYSTEM)
    strategy = Strategy(tp=8, tp_depth=4, dp=2, micro_batch=4, placement="tp-pp-dp")
    text = launch.emit("axonn", model, system, JOB, strategy).text
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize("value", ["-1", "nan", "abc", "1e400", "1.5", ""])
def test_a_cached_layer_count_that_is_no_whole_number_is_refused(value: str) -> None:
    """Issue 51: -1, nan, abc, 1e400 and 1.5 were all noted as "costed as 0"."""
    text = _axonn_text("all-gather 0", f"all-gather {value}".rstrip())
    with pytest.raises(InputError, match="caching-weights-in-depth-tensor-parallel-all-gather"):
        launch.read("axonn", text, as_system(SYSTEM))


@pytest.mark.parametrize("value", ["abc", "nan", "1e400", "-1", "1.5", "4"])
def test_a_tensor_parallel_size_beside_the_grid_must_be_its_product(value: str) -> None:
    """Issue 51: Megatron's --tensor-model-parallel-size was dropped whatever it said; now it is
    read as Megatron's reader reads it and must equal row·column·depth (8 here)."""

    def stated(tp: str) -> str:
        return _axonn_text("--row-tensor", f"--tensor-model-parallel-size {tp} --row-tensor")

    with pytest.raises(InputError, match="--tensor-model-parallel-size = ") as error:
        launch.read("axonn", stated(value), as_system(SYSTEM))
    assert "\n" not in str(error.value)
    if value in ("4", "-1"):
        assert "contradicts the AxoNN grid row·column·depth = 2·1·4 = 8" in str(error.value)
    good = launch.read("axonn", stated("8"), as_system(SYSTEM))
    assert good.strategy.tp == 8 and good.strategy.tp_depth == 4


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == OK
    return json.loads(capsys.readouterr().out)


PROBLEM = ["--model", "llama2-7b", "--system", SYSTEM, "--gpus", "16", "--global-batch", "64"]
PROBLEM += ["--stack", "axonn", "--max-micro-batch", "16"]


def test_evaluate_takes_the_grid_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", *PROBLEM[:-2], "--tp", "8", "--tp-column", "2", "--tp-depth", "2"]
    argv += ["--placement", "tp-pp-dp", "--no-dp-overlap", "--micro-batch", "4"]
    payload = _json(capsys, argv)
    assert payload["strategy"]["tp_column"] == 2 and payload["strategy"]["tp_depth"] == 2
    tp = payload["estimate"]["tensor_parallel"]
    assert tp["form"] == "axonn-3d"
    assert (tp["column"]["ranks"], tp["row"]["ranks"], tp["depth"]["ranks"]) == (2, 2, 2)
    assert tp["depth"]["span_gpus"] == 8 and tp["depth"]["collectives_s_per_step"] > 0
    assert main(argv) == OK
    out = capsys.readouterr().out
    assert "Tensor parallelism: AxoNN 3D grid" in out and "Z depth" in out


def test_a_grid_under_a_megatron_stack_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", *PROBLEM[:-4], "--tp", "8", "--tp-depth", "2", "--micro-batch", "4"]
    assert main(argv) == BAD
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tp_column = 1, tp_depth = 2" in err


def test_plan_reports_the_winning_form_and_pins_work(capsys: pytest.CaptureFixture[str]) -> None:
    best = _json(capsys, ["plan", *PROBLEM])
    assert best["status"] == "optimal"
    forms = best["tp_forms"]
    assert forms["winner"] in ("axonn-3d", "megatron-1d")
    assert best["estimate"]["tensor_parallel"]["form"] == forms["winner"]
    pinned = _json(capsys, ["plan", *PROBLEM, "--pin", "tp_column=1", "--pin", "tp_depth=1"])
    assert pinned["strategy"]["tp_column"] == 1 and pinned["strategy"]["tp_depth"] == 1
    assert pinned["estimate"]["step_time_s"] >= best["estimate"]["step_time_s"]
    if forms["winner"] == "axonn-3d":
        assert forms["megatron_step_time_s"] == pytest.approx(pinned["estimate"]["step_time_s"])
    depth = _json(capsys, ["plan", *PROBLEM, "--pin", "tp_depth=2"])
    assert depth["strategy"]["tp_depth"] == 2
    assert main(["plan", *PROBLEM]) == OK
    assert "TP form:" in capsys.readouterr().out


def test_plan_emit_axonn_reads_back_as_the_plan(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_json = _json(capsys, ["plan", *PROBLEM, "--emit", "axonn"])
    assert plan_json["status"] == "optimal"
    assert not any(note.startswith("read back") for note in plan_json["launch"]["notes"])
    path = tmp_path / "plan.axonn"
    path.write_text(plan_json["launch"]["text"], encoding="utf-8")
    back = _json(capsys, ["evaluate", "--from", "axonn", str(path), "--system", SYSTEM])
    assert back["strategy"] == plan_json["strategy"]
    assert back["estimate"]["step_time_s"] == plan_json["estimate"]["step_time_s"]


def test_plan_emit_axonn_needs_the_axonn_stack(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --stack, --emit axonn plans under axonn (issue 50); another stack is refused."""
    argv = ["plan", *PROBLEM[:-4], "--emit", "axonn"]
    assert main(argv) == OK
    assert "stack: axonn" in capsys.readouterr().out
    assert main([*argv, "--stack", "megatron-core"]) == BAD
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--stack axonn" in err


def test_min_hardware_floor_covers_the_grid() -> None:
    """gpu_seconds_floor is a lower bound over AxoNN's grid too (the grid's norms on h/X of
    s·b/Z tokens can be faster than Megatron's replicated ones)."""
    from planner.cost.context import CostContext
    from planner.queries.gpu_count import gpu_seconds_floor
    from planner.space.search_space import build_search_space

    model, system = as_model("gpt3-13b"), as_system(SYSTEM)
    job = JobSpec(global_batch=64, stack="axonn")
    ctx = CostContext(model, system, job)
    space = build_search_space(model, system, job, 256)
    floor = gpu_seconds_floor(ctx, space)
    strategy = Strategy(
        tp=8,
        tp_depth=2,
        pp=8,
        dp=4,
        micro_batch=2,
        interleave=5,
        zero_stage=1,
        tp_overlap=True,
        dp_overlap=False,
        placement="tp-pp-dp",
    )
    assert floor <= 256 * evaluate(model, system, job, strategy).step_time_s
