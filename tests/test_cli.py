"""The command line as a user meets it: output contract, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import main

PLAN = [
    "plan",
    "--model",
    "gpt3-13b",
    "--system",
    "dgx-h100",
    "--gpus",
    "64",
    "--global-batch",
    "256",
]
EVALUATE = [
    "evaluate",
    "--model",
    "gpt3-175b",
    "--system",
    "dgx-a100-80g",
    "--gpus",
    "1024",
    "--global-batch",
    "1536",
    "--tp",
    "8",
    "--pp",
    "16",
    "--micro-batch",
    "1",
    "--interleave",
    "2",
    "--recompute",
    "selective",
    "--sequence-parallel",
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_evaluate_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *EVALUATE, "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["strategy"] == {
        "tp": 8,
        "tp_column": 1,
        "tp_depth": 1,
        "cp": 1,
        "pp": 16,
        "dp": 8,
        "ep": 1,
        "expert_tp": 0,
        "micro_batch": 1,
        "interleave": 2,
        "recompute": "selective",
        "sequence_parallel": True,
        "zero_stage": 0,
        "offload_weights": 0,
        "offload_activations": 0,
        "offload_optimizer": 0,
        "offload_weights_fraction": 1.0,
        "offload_activations_fraction": 1.0,
        "offload_optimizer_fraction": 1.0,
        "dp_overlap": True,
        "tp_overlap": False,
        "placement": "tp-cp-dp-pp",
        "recompute_layers": None,
        "stage_layers": None,
    }
    estimate = payload["estimate"]
    for key in ("step_time_s", "mfu", "hfu", "tokens_per_s", "breakdown_s", "memory_gib"):
        assert key in estimate
    assert sum(estimate["breakdown_s"].values()) == pytest.approx(estimate["step_time_s"])
    hbm = estimate["memory_gib"]["hbm"]
    assert hbm["total"] == pytest.approx(
        sum(
            hbm[k]
            for k in ("weights", "gradients", "optimizer", "activations", "logits", "reserve")
        )
    )
    assert 0 < estimate["mfu"] <= 1
    assert estimate["tokens_per_s"] == pytest.approx(1536 * 2048 / estimate["step_time_s"])


BLOOM = [
    "evaluate",
    "--model",
    "bloom-176b",
    "--system",
    "dgx-a100-80g",
    "--gpus",
    "384",
    "--global-batch",
    "2048",
    "--tp",
    "4",
]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_evaluate_uneven_stages_of_a_70_layer_model(
    capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """BLOOM's 70 layers on 12 stages (issue 12): 5 on the first and last, 6 between."""
    argv = [*BLOOM, "--pp", "12", "--stage-layers", "5,6,...,6,5", "--micro-batch", "2"]
    argv += ["--zero-stage", "1", "--sequence-parallel"]
    code, out, _ = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        payload = json.loads(out)
        assert payload["strategy"]["stage_layers"] == [5, *[6] * 10, 5]
        assert payload["estimate"]["memory_stage"]["hbm"] in ("first", "middle", "last")
    else:
        assert "stages=5,6,...,6,5" in out


def test_evaluate_tables_and_training_time(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *EVALUATE, "--train-tokens", "300e9")
    assert code == 0
    for text in (
        "Step time",
        "pipeline bubble",
        "Memory per GPU",
        "MFU",
        "time to train",
        "GPU-hours",
    ):
        assert text in out


def test_offload_tier_appears_in_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "evaluate",
        "--model",
        "mt-11t",
        "--system",
        "h100-offload-512g",
        "--gpus",
        "16384",
        "--global-batch",
        "4096",
        "--tp",
        "8",
        "--pp",
        "64",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--sequence-parallel",
        "--zero-stage",
        "1",
        "--offload-weights",
        "1",
        "--offload-activations",
        "1",
        "--offload-optimizer",
        "1",
        "--json",
    )
    assert code in (0, 3)
    memory = json.loads(out)["estimate"]["memory_gib"]
    assert memory["offload_1"]["total"] > 0
    assert memory["offload_1"]["capacity"] == 512


def test_strategy_that_does_not_fit_exits_3_and_says_by_how_much(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys,
        "evaluate",
        "--model",
        "gpt3-175b",
        "--system",
        "dgx-a100-80g",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--tp",
        "8",
    )
    assert code == 3
    assert "does not fit" in out and "over by" in out


@pytest.mark.parametrize("what", ["systems", "models"])
def test_catalog_listings(capsys: pytest.CaptureFixture[str], what: str) -> None:
    code, out, _ = run(capsys, "catalog", what)
    assert code == 0
    assert ("dgx-h100" if what == "systems" else "llama3-405b") in out


def test_catalog_show_prints_sources(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "show", "dgx-h100")
    assert code == 0
    assert "peak_tflops" in out and "datasheet" in out.lower()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["catalog", "show", "dgx-h10"], "did you mean"),
        (["catalog", "show"], "needs a name"),
        (
            ["evaluate", "--model", "gpt3-175", "--system", "dgx-h100", "--global-batch", "8"],
            "did you mean",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "8",
                "--tp",
                "0",
            ],
            "outside the allowed range 1..1048576",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "1536",
                "--gpus",
                "1000",
                "--tp",
                "8",
                "--pp",
                "16",
            ],
            "not divisible by tp·cp·pp",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "1536",
                "--gpus",
                "1024",
                "--tp",
                "8",
                "--pp",
                "16",
                "--interleave",
                "4",
            ],
            "interleave = 4 must divide",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "8",
                "--tp",
                "5",
            ],
            "tp = 5 must divide heads",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "8",
                "--pp",
                "7",
            ],
            "pp = 7 must divide layers",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "10",
                "--dp",
                "4",
            ],
            "global batch 10 must be divisible",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "8",
                "--offload-weights",
                "1",
            ],
            "offload_weights = 1",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "frontier",
                "--global-batch",
                "8",
                "--precision",
                "fp8",
            ],
            "precision",
        ),
        (
            ["evaluate", "--model", "gpt3-175b", "--system", "dgx-h100", "--global-batch", "x"],
            "not a whole number",
        ),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "8",
                "--recompute",
                "some",
            ],
            "invalid choice",
        ),
        (["plann"], "invalid choice"),
        (
            [
                "evaluate",
                "--model",
                "gpt3-175b",
                "--system",
                "dgx-h100",
                "--global-batch",
                "8",
                "--hbm-usable-fraction",
                "2",
            ],
            "--hbm-usable-fraction",
        ),
        ([*BLOOM, "--pp", "12", "--stage-layers", "5,x"], "expected whole numbers"),
        ([*BLOOM, "--pp", "12", "--stage-layers", "5,6,...,6,6"], "71 blocks, the model has 70"),
        ([*BLOOM, "--pp", "12", "--stage-layers", "5,7,5,...,5,13"], "must be equal"),
        ([*BLOOM, "--pp", "3", "--stage-layers", "5,6,...,6,5"], "4 stages given, --pp 3"),
        ([*BLOOM, "--pp", "12"], "unless stage_layers states the blocks per stage"),
        ([*EVALUATE, "--recompute-layers", "4"], "needs recompute = full"),
        ([*EVALUATE, "--offload-optimizer-fraction", "0.3"], "not a multiple of 1/8"),
        ([*EVALUATE, "--offload-optimizer-fraction", "1/2"], "needs offload_optimizer ≥ 1"),
        ([*PLAN, "--pin", "offload_optimizer_fraction=1/2"], "has no offload tier"),
        ([*PLAN, "--pin", "offload_weights_fraction=x"], "is not a fraction"),
        (
            [*EVALUATE[:-3], "--recompute", "full", "--recompute-layers", "3"],
            "multiple of interleave = 2",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err
    assert err.strip().count("\n") == 0
    assert "Traceback" not in err


def test_python_dash_m_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "planner", "catalog", "models", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert any(m["name"] == "mt-128t" for m in json.loads(result.stdout))


def test_plan_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *PLAN, "--top", "3", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["status"] == "optimal"
    strategy = payload["strategy"]
    assert strategy["tp"] * strategy["cp"] * strategy["pp"] * strategy["dp"] == 64
    for key in ("wall_time_s", "objective_step_s", "bound_step_s", "gap"):
        assert key in payload["solver"]
    assert payload["estimate"]["step_time_s"] == pytest.approx(
        payload["solver"]["objective_step_s"], rel=1e-3
    )
    steps = [a["step_time_s"] for a in payload["alternatives"]]
    assert len(steps) == 3 and steps[0] == pytest.approx(payload["estimate"]["step_time_s"])
    assert all(b >= a * (1 - 1e-6) for a, b in zip(steps, steps[1:], strict=False))


def test_plan_pins_and_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *PLAN, "--pin", "tp=2", "--pin", "recompute=full")
    assert code == 0
    assert "proven optimal" in out and "tp=2" in out and "full" in out


def test_plan_searches_context_parallelism_under_a_stated_cap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--max-cp bounds the searched cp; the JSON names the cap; a pinned cp is honoured."""
    code, out, _ = run(capsys, *PLAN, "--max-cp", "1", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["strategy"]["cp"] == 1
    assert any(cap.startswith("cp ≤ 1 (--max-cp") for cap in payload["solver"]["caps"])
    code, out, _ = run(capsys, *PLAN, "--pin", "cp=2", "--json")
    assert code == 0 and json.loads(out)["strategy"]["cp"] == 2
    code, out, _ = run(capsys, *PLAN, "--pin", "cp=2")
    assert code == 0 and "cp=2" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_evaluate_partial_recompute(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    """Megatron's block method: 2 of each stage's 6 blocks recomputed (1 per model chunk)."""
    argv = [*EVALUATE[:-3], "--recompute", "full", "--recompute-layers", "2"]
    code, out, _ = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        payload = json.loads(out)
        assert payload["strategy"]["recompute"] == "full"
        assert payload["strategy"]["recompute_layers"] == 2
        assert payload["estimate"]["mfu"] < payload["estimate"]["hfu"]
    else:
        assert "full(2/stage)" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_plan_with_a_partial_recompute_pin(
    capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    code, out, _ = run(
        capsys, *PLAN, "--pin", "recompute_layers=1", *(["--json"] if as_json else [])
    )
    assert code == 0
    if as_json:
        strategy = json.loads(out)["strategy"]
        assert (strategy["recompute"], strategy["recompute_layers"]) == ("full", 1)
    else:
        assert "full(1/stage)" in out


def test_plan_partial_recompute_with_zero3(capsys: pytest.CaptureFixture[str]) -> None:
    """Partial recompute under ZeRO-3 (Megatron-Bridge's H100 8B FP8 recipe: 5 blocks fully
    recomputed with Megatron-FSDP) is searched and priced like any other (it was refused, exit 3,
    before issue 34 item 5)."""
    argv = [*PLAN, "--pin", "recompute_layers=2", "--pin", "zero_stage=3", "--json"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    strategy = json.loads(out)["strategy"]
    assert (strategy["recompute_layers"], strategy["zero_stage"]) == (2, 3)


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_plan_states_the_stage_skew_cap(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    code, out, _ = run(capsys, *PLAN, "--max-stage-skew", "0", *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        payload = json.loads(out)
        assert any("--max-stage-skew" in cap for cap in payload["solver"]["caps"])
        assert payload["strategy"]["stage_layers"] is None
    else:
        assert "--max-stage-skew" in " ".join(out.split())


def test_plan_cp_pin_that_cannot_split_the_sequence_exits_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, *PLAN, "--seq-len", "3000", "--pin", "cp=8", "--json")
    assert code == 3
    conflicts = json.loads(out)["diagnosis"]["conflicts"]
    assert any(c["family"] == "pin:cp" and "2·cp" in c["detail"] for c in conflicts)


def test_plan_infeasible_exits_3_with_conflict(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "--model",
        "mt-128t",
        "--system",
        "dgx-a100-80g",
        "--gpus",
        "64",
        "--global-batch",
        "64",
    )
    assert code == 3
    assert "No feasible strategy" in out and "HBM fit" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([*PLAN, "--pin", "tpp=2"], "expected KNOB=VALUE"),
        ([*PLAN, "--pin", "recompute=most"], "recompute is one of"),
        ([*PLAN, "--top", "0"], "outside the allowed range 1..100"),
        ([*PLAN, "--max-cp", "0"], "--max-cp"),
        ([*PLAN, "--pin", "cp=x"], "cp takes a whole number"),
        (PLAN[:5] + PLAN[7:], "plan needs --gpus"),
    ],
)
def test_plan_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert needle in err and err.strip().count("\n") == 0


def test_example_script_runs() -> None:
    script = Path(__file__).resolve().parents[1] / "examples" / "plan_from_python.py"
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "optimal" in result.stdout


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_evaluate_offloads_a_share(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    """Half the optimizer state in host memory: the host tier holds half of what all of it
    takes there."""
    argv = [*EVALUATE, "--offload-optimizer", "1", "--json"]
    code, out, _ = run(capsys, *argv)
    whole = json.loads(out)["estimate"]["memory_gib"]["offload_1"]["optimizer"]
    argv = [*EVALUATE, "--offload-optimizer", "1", "--offload-optimizer-fraction", "1/2"]
    code, out, _ = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        payload = json.loads(out)
        assert payload["strategy"]["offload_optimizer_fraction"] == 0.5
        half = payload["estimate"]["memory_gib"]["offload_1"]["optimizer"]
        assert half == pytest.approx(whole / 2, rel=1e-2)
    else:
        assert "offload O 1/2→T1" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_plan_with_an_offload_share_pin(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    argv = ["plan", "--model", "gpt3-13b", "--system", "dgx-a100-80g", "--gpus", "64"]
    argv += ["--global-batch", "256", "--pin", "offload_optimizer_fraction=1/4"]
    code, out, _ = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        strategy = json.loads(out)["strategy"]
        assert (strategy["offload_optimizer"], strategy["offload_optimizer_fraction"]) == (1, 0.25)
    else:
        assert "O 1/4→T1" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_the_main_job_searches_offload_halves_past_a_billion(
    capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """The README's main job by default: halves of each tensor class, a space past 10⁹, proven,
    the cap stated."""
    argv = ["plan", "--model", "gpt3-175b", "--system", "dgx-a100-80g", "--gpus", "1024"]
    argv += ["--global-batch", "1536"]
    code, out, _ = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        solver = json.loads(out)["solver"]
        assert solver["status"] == "optimal" and solver["search_space"] >= 1e9
        assert any("tensor classes in steps of 1/2" in cap for cap in solver["caps"])
    else:
        assert "proven optimal" in out and "--offload-step" in out


def test_a_finer_offload_step_grows_the_space(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "gpt3-1.3b", "--system", "dgx-a100-80g", "--gpus", "8"]
    argv += ["--global-batch", "64", "--json"]
    sizes = {}
    for step in ("1", "1/2", "1/4"):
        code, out, _ = run(capsys, *argv, "--offload-step", step)
        assert code == 0
        sizes[step] = json.loads(out)["solver"]["search_space"]
    assert sizes["1"] < sizes["1/2"] < sizes["1/4"]
