"""Fuzzing the two doors a user comes in by: argument lists for every subcommand (hardware
overrides and stack profiles included), and model, system, stack, study and dataset files
(malformed YAML/JSON, wrong types, negative, zero, subnormal, tiny and huge values, true/false
for numbers, unknown fields, YAML alias bombs, ``!!python/object`` tags).

Whatever comes in, planner answers with a documented exit code (0 ok, 2 bad input, 3
infeasible, 4 time limit; never 1, an internal error, or an escaped exception), a bad input with
exactly one line on stderr, a ``--json`` answer as strict JSON (no ``Infinity`` or ``NaN``);
inputs that take over 10 s are counted in the totals, not failed (no test asserts a duration).
CI runs a small derandomized share; ``python
benchmarks/fuzz.py`` runs thousands of examples and prints the totals
(``PLANNER_FUZZ_EXAMPLES`` sets the count, ``PLANNER_FUZZ_TOTALS`` a JSON file for the totals).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import hardware_catalog
from planner.accuracy.validation import load_dataset
from planner.cli import main

EXAMPLES = int(os.environ.get("PLANNER_FUZZ_EXAMPLES", "40"))
MAX_RUN_S = 10.0
TOTALS: Counter[str] = Counter()

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    # No "explain" phase: it replays the failure under a tracer, which makes deep inputs slow
    # and would report a time-out the input never caused.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)

PLAIN = ["1", "2", "4", "8", "16", "64", "96", "1024", "4096", "0.5", "0.9", "1.5"]
NASTY = [
    "0", "-1", "3", "7", "65536", "1e-9", "1e9", "1e30", "1e400", "-1e400", "inf", "-inf", "nan",
    "9223372036854775807", "99999999999999999999999999", "1048576", "1048577", "0x10", "1_000",
    "", " ", "abc", "٣", "5e-324", "1e-300", "2.2e-308", "1e-12", "-0.0", "0.05",
]  # fmt: skip
NUMBERS = PLAIN * 4 + NASTY
"""Values for numeric flags: mostly ordinary (so that runs get past validation into the
solver), else edge, huge, non-finite and not numbers at all."""

MODELS = ["gpt3-1.3b", "llama3-8b", "gpt3-175b", "megatron-1t", "mt-128t"] * 3 + ["nope", ""]
SYSTEMS = ["dgx-h100", "dgx-a100-80g", "h100-offload-512g", "frontier", "mi300x"] * 3 + ["nope"]

PROBLEM_FLAGS = {
    "--gpus": NUMBERS,
    "--global-batch": NUMBERS,
    "--seq-len": NUMBERS,
    "--precision": ["bf16", "fp8", "fp4"],
    "--grad-dtype": ["fp32", "bf16", "int8"],
    "--attention": ["flash", "materialized", "x"],
    "--train-tokens": NUMBERS,
    "--hbm-reserve-gib": NUMBERS,
    "--hbm-usable-fraction": NUMBERS,
    "--expert-imbalance": NUMBERS,
    "--stack": ["megatron-core", "calculon", "deepspeed", "torchtitan", "nope", ""],
    "--hbm-gib": NUMBERS,
    "--offload-gib": NUMBERS,
    "--offload-gbps": NUMBERS,
    "--scale-up-gbps": NUMBERS,
    "--scale-up-domain": NUMBERS,
    "--scale-out-gbps": NUMBERS,
}
STRATEGY_FLAGS = {
    "--tp": NUMBERS,
    "--pp": NUMBERS,
    "--dp": NUMBERS,
    "--micro-batch": NUMBERS,
    "--interleave": NUMBERS,
    "--recompute": ["none", "selective", "full", "all"],
    "--zero-stage": ["0", "1", "2", "3", "4", "-1"],
    "--offload-weights": NUMBERS,
    "--offload-activations": NUMBERS,
    "--offload-optimizer": NUMBERS,
}
PIN_KNOBS = ("tp", "cp", "pp", "dp", "micro_batch", "zero_stage", "recompute", "x")
PINS = [f"{k}={v}" for k in PIN_KNOBS for v in ("0", "1", "3", "8", "full", "1e400")]
PINS += [f"tp={n}" for n in NUMBERS] + ["tp", "=8", "sequence_parallel=maybe"]
TARGET_FLAGS = {"--max-step-time": NUMBERS, "--min-mfu": NUMBERS}
SWITCHES = ["--json", "--sequence-parallel", "--no-dp-overlap", "--tp-overlap"]


def _flags(table: dict[str, list[str]]) -> st.SearchStrategy[list[str]]:
    pairs = st.lists(
        st.sampled_from(sorted(table)).flatmap(
            lambda flag: st.sampled_from(table[flag]).map(lambda value: [flag, value])
        ),
        max_size=4,
    )
    return pairs.map(lambda chunks: [token for chunk in chunks for token in chunk])


def _problem(command: str, extra: dict[str, list[str]]) -> st.SearchStrategy[list[str]]:
    return st.tuples(
        st.sampled_from(MODELS),
        st.sampled_from(SYSTEMS),
        st.sampled_from(["8", "64", "1024"] * 8 + NUMBERS),
        st.sampled_from(["64", "1536"] * 8 + NUMBERS),
        _flags({**PROBLEM_FLAGS, **extra}),
        st.lists(st.sampled_from(SWITCHES), max_size=2),
    ).map(
        lambda t: (
            [command, "--model", t[0], "--system", t[1], "--gpus", t[2]]
            + ["--global-batch", t[3], *t[4], *t[5]]
        )
    )


PLAN = _problem(
    "plan", {**TARGET_FLAGS, "--top": NUMBERS, "--max-micro-batch": NUMBERS, "--pin": PINS}
)
MIN_HARDWARE = st.tuples(
    _problem("min-hardware", {**TARGET_FLAGS, "--max-days": NUMBERS, "--max-gpus": NUMBERS}),
    st.sampled_from(["gpus", "hbm", "offload-capacity", "scale-out-bandwidth", "cost", "x"]),
).map(lambda t: [*t[0], "--minimize", t[1]])
ARGV = st.one_of(
    st.lists(st.sampled_from(["catalog", "systems", "models", "show", "dgx-h100", "x", "--json"])),
    _problem("evaluate", STRATEGY_FLAGS),
    PLAN,
    PLAN,
    MIN_HARDWARE,
    MIN_HARDWARE,
    st.lists(st.sampled_from(["validate", "calibrate", "--system", "dgx-h100", "--free", "x"])),
    st.lists(st.text(max_size=12), max_size=4),
)


def _check(argv: list[str], capsys: pytest.CaptureFixture[str], context: str = "") -> None:
    started = time.perf_counter()
    code = main(argv)
    elapsed_s = time.perf_counter() - started
    out, err = capsys.readouterr()
    TOTALS[f"exit {code}"] += 1
    TOTALS["inputs"] += 1
    assert code in (0, 2, 3, 4), (argv, context, err)
    assert "Traceback" not in out + err, (argv, context)
    if code == 2:
        assert err.startswith("planner: error: ") and err.count("\n") == 1, (argv, context, err)
    elif "--json" in argv and out.strip():
        json.loads(out, parse_constant=_not_json)  # Infinity / NaN are not JSON
    if elapsed_s > MAX_RUN_S:  # counted for benchmarks/fuzz.py; no test asserts a duration
        TOTALS[f"over {MAX_RUN_S:g} s"] += 1


def _not_json(constant: str) -> None:
    raise AssertionError(f"{constant} in a --json answer")


def _limited(argv: list[str]) -> list[str]:
    """Solving commands get a short solver time limit (a 60 s default would be by design)."""
    if argv and argv[0] in ("plan", "min-hardware"):
        return [*argv, "--time-limit", "2"]
    return argv


@FUZZ_SETTINGS
@given(argv=ARGV)
def test_any_argument_list(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _check(_limited(argv), capsys)


# -- files ---------------------------------------------------------------------------------
JUNK_VALUES = st.one_of(
    st.sampled_from([0, -1, -1e30, 1e30, 10**30, 2**63, float("nan"), "", "x", None, True]),
    st.sampled_from([[], {}, [1, 2], {"a": 1}, "inf", "1e400", 0.5, 3]),
    st.sampled_from([5e-324, 1e-300, "5e-324", 1e-12, -0.0, 0.009, False, 1, 2]),
)
RAW_FILES = [
    "a: [1, 2\n",
    "{not: json",
    "- just\n- a list\n",
    "hidden: !!python/object/apply:os.system ['true']\n",
    "? complex key\n: value\n",
    "\x00\x01\x02",
    "a: &a ['x','x','x','x','x','x','x','x','x','x']\n"
    + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdef", "bcdefg", strict=True)
    )
    + "name: *g\n",
    "[" * 5000 + "]" * 5000,
]


def _mutations(base: dict) -> st.SearchStrategy[dict]:
    """A valid spec with one to three fields replaced, removed or added (nested ones too)."""

    def mutate(data: dict, edits: list[tuple[int, int, object]]) -> dict:
        data = copy.deepcopy(data)
        for where, action, shared in edits:
            value = copy.deepcopy(shared)  # a junk value may be drawn again: never alias it
            target = data
            for _ in range(where % 3):  # sometimes reach into a nested mapping or list
                nested = [v for v in target.values() if isinstance(v, dict | list)]
                if not nested:
                    break
                child = nested[where % len(nested)]
                target = child if isinstance(child, dict) else (child[0] if child else {})
                if not isinstance(target, dict):
                    break
            if not isinstance(target, dict) or not target:
                continue
            key = sorted(target)[where % len(target)]
            if action == 0:
                target[key] = value
            elif action == 1:
                del target[key]
            else:
                target[f"unknown_{key}"] = value
        return data

    edits = st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 2), JUNK_VALUES), min_size=1, max_size=3
    )
    return edits.map(lambda e: mutate(base, e))


STUDY = {
    "name": "fuzz",
    "models": ["gpt3-1.3b"],
    "systems": ["dgx-h100"],
    "gpus": [8],
    "global_batch": 64,
}


@pytest.fixture(scope="module")
def bases() -> dict[str, dict]:
    dataset = load_dataset().model_dump(mode="json", exclude_defaults=True)
    return {
        "model": hardware_catalog.load_model("gpt3-1.3b").model_dump(mode="json"),
        "system": hardware_catalog.load_system("dgx-h100").model_dump(mode="json"),
        "stack": hardware_catalog.load_stack("megatron-core").model_dump(mode="json"),
        "study": STUDY,
        "dataset": {**dataset, "runs": dataset["runs"][:2]},
    }


def _command(kind: str, path: Path, out: Path, solve: bool) -> list[str]:
    """The command that reads a ``kind`` file: for model, system and stack files, evaluate (a
    fixed strategy) or, with ``solve``, plan (the numbers reach the solver's tables)."""
    problem = ["--gpus", "8", "--global-batch", "64", "--json"]
    problem += ["--time-limit", "2"] if solve else ["--dp", "8"]
    command = "plan" if solve else "evaluate"
    if kind == "model":
        return [command, "--model", str(path), "--system", "dgx-h100", *problem]
    if kind == "system":
        return [command, "--model", "gpt3-1.3b", "--system", str(path), *problem]
    if kind == "stack":
        stack = ["--stack", str(path)]
        return [command, "--model", "gpt3-1.3b", "--system", "dgx-h100", *stack, *problem]
    if kind == "study":
        return ["sweep", str(path), "--out", str(out)]
    return ["validate", "--dataset", str(path)]


@FUZZ_SETTINGS
@given(
    kind=st.sampled_from(["model", "system", "stack", "study", "dataset"]),
    data=st.data(),
    suffix=st.sampled_from([".yaml", ".json"]),
    solve=st.booleans(),
)
def test_any_spec_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bases: dict[str, dict],
    kind: str,
    data: st.DataObject,
    suffix: str,
    solve: bool,
) -> None:
    if data.draw(st.booleans()):
        text = data.draw(st.sampled_from(RAW_FILES))
    else:
        content = data.draw(_mutations(bases[kind]))
        text = json.dumps(content) if suffix == ".json" else yaml.safe_dump(content)
    path = tmp_path / f"{kind}{suffix}"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / f"out-{TOTALS['inputs']}"  # a folder per study: one resumes only its own
    _check(_command(kind, path, out, solve), capsys, context=text[:300])


def teardown_module() -> None:
    """Write the totals where benchmarks/fuzz.py asked for them."""
    target = os.environ.get("PLANNER_FUZZ_TOTALS")
    if target:
        Path(target).write_text(json.dumps(dict(TOTALS)), encoding="utf-8")


# -- the number classes of issue 40, one reproducer each -----------------------------------------
PROBLEM = ["--model", "gpt3-1.3b", "--system", "dgx-a100-80g", "--global-batch", "64"]
PLAN_16 = ["plan", *PROBLEM, "--gpus", "16"]
EVALUATE_16 = ["evaluate", *PROBLEM, "--gpus", "16", "--dp", "16"]
BAD_FLAGS = [
    ([*PLAN_16, "--scale-up-gbps", "5e-324"], "--scale-up-gbps"),
    ([*EVALUATE_16, "--scale-out-gbps", "1e-300"], "--scale-out-gbps"),
    ([*PLAN_16, "--hbm-usable-fraction", "1e-300"], "--hbm-usable-fraction"),
    ([*PLAN_16, "--hbm-gib", "2.2e-308"], "--hbm-gib"),
    ([*EVALUATE_16, "--offload-gib", "64", "--offload-gbps", "1e-300"], "--offload-gbps"),
]
BAD_FILES = [
    ("stack", "gemm_efficiency: 5e-324", "gemm_efficiency"),
    ("stack", "gemm_efficiency: 1.0e-300", "gemm_efficiency"),
    ("stack", "hbm_usable_fraction: 1.0e-300", "hbm_usable_fraction"),
    ("stack", "dp_bucket_params: 1.0e-300", "dp_bucket_params"),
    ("stack", "attention_efficiency: true", "attention_efficiency"),
    ("stack", "layer_overhead_us: .inf", "layer_overhead_us"),
    ("model", "layers: true", "layers"),
    ("model", "vocab: false", "vocab"),
    ("system", "network_tiers: [{name: ib, bandwidth_gbps: 1.0e-300}]", "bandwidth_gbps"),
    ("system", "memory_tiers: [{name: HBM, capacity_gib: 80, bandwidth_gbps: 2000, "
     "efficiency: 5e-324}]", "efficiency"),
    ("system", "memory_tiers: [{name: HBM, capacity_gib: 1.0e-300, bandwidth_gbps: 2000}]",
     "capacity_gib"),
]  # fmt: skip


def _spec_file(tmp_path: Path, kind: str, line: str) -> Path:
    """A catalog spec (gpt3-1.3b, dgx-a100-80g or megatron-core) with ``line`` replacing the
    field it names."""
    base = {
        "model": hardware_catalog.load_model("gpt3-1.3b"),
        "system": hardware_catalog.load_system("dgx-a100-80g"),
        "stack": hardware_catalog.load_stack("megatron-core"),
    }[kind].model_dump(mode="json", exclude={"aliases"})
    base.update(yaml.safe_load(line))
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(base), encoding="utf-8")
    return path


@pytest.mark.parametrize("as_json", [[], ["--json"]])
@pytest.mark.parametrize(("argv", "field"), BAD_FLAGS)
def test_tiny_numbers_in_flags_are_one_line_errors(
    argv: list[str], field: str, as_json: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, *as_json]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "allowed range is [" in err


@pytest.mark.parametrize("as_json", [[], ["--json"]])
@pytest.mark.parametrize(("kind", "line", "field"), BAD_FILES)
def test_tiny_or_boolean_numbers_in_spec_files_are_one_line_errors(
    tmp_path: Path,
    kind: str,
    line: str,
    field: str,
    as_json: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(_spec_file(tmp_path, kind, line))
    model = path if kind == "model" else "gpt3-1.3b"
    system = path if kind == "system" else "dgx-a100-80g"
    stack = ["--stack", path] if kind == "stack" else []
    argv = ["plan", "--model", model, "--system", system, "--gpus", "16", "--global-batch", "64"]
    assert main([*argv, *stack, "--time-limit", "5", *as_json]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planner: error: ") and err.count("\n") == 1
    assert field in err


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_a_plan_past_the_solvers_time_range_is_an_input_error(
    tmp_path: Path, as_json: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One-second network latencies and 10k-parameter DP buckets (under every ZeRO stage),
    each inside its range, together make a step of ~10^9 s, past the cap of the solver's time
    tables: the answer is refused (the objective and the evaluation disagree) rather than
    called optimal."""
    tiers = hardware_catalog.load_system("dgx-a100-80g").model_dump()["network_tiers"]
    slow = [{**tier, "latency_us": 1e6} for tier in tiers]
    system = _spec_file(tmp_path, "system", json.dumps({"network_tiers": slow}))
    buckets = "{dp_bucket_params: 10000, dp_bucket_params_per_rank: 0, "
    buckets += "zero3_collective_unit: bucket}"
    stack = _spec_file(tmp_path, "stack", buckets)
    argv = ["plan", "--model", "gpt3-175b", "--system", str(system), "--stack", str(stack)]
    argv += ["--gpus", "1024", "--global-batch", "1536", "--pin", "dp=128", *as_json]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "beyond the range the solver's tables hold" in err


def test_json_answers_hold_no_infinity(capsys: pytest.CaptureFixture[str]) -> None:
    """What --json prints is strict JSON: a non-finite number, at any depth, is null."""
    from planner.cli.output import print_json

    print_json({"step_time_s": float("inf"), "rows": [{"mfu": float("nan")}, 1.5], "n": 3})
    printed = json.loads(capsys.readouterr().out, parse_constant=_not_json)
    assert printed == {"step_time_s": None, "rows": [{"mfu": None}, 1.5], "n": 3}


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
def test_a_non_finite_step_time_is_an_input_error_not_an_answer() -> None:
    """Were a number outside the ranges to reach the cost model (here a stack built without
    validation), the estimate refuses the infinite step time it gives."""
    from planner.cost.context import CostContext
    from planner.cost.estimate import build_estimate
    from planner.cost.knobs import Knobs
    from planner.cost.step import evaluate_terms
    from planner.errors import InputError
    from planner.specs import JobSpec, StackProfile

    fields = hardware_catalog.load_stack("megatron-core").model_dump()
    stack = StackProfile.model_construct(**{**fields, "gemm_efficiency": 5e-324})
    model, system = (
        hardware_catalog.load_model("gpt3-1.3b"),
        hardware_catalog.load_system("dgx-h100"),
    )
    ctx = CostContext(model, system, JobSpec(global_batch=64), stack=stack)
    terms = evaluate_terms(ctx, Knobs.of(dp=8))
    with pytest.raises(InputError, match="not a finite positive time"):
        build_estimate(ctx, terms, 8, [])


@pytest.mark.parametrize("as_json", [[], ["--json"]])
@pytest.mark.parametrize("measured", ["1e400", "5e-324", "NaN"])
def test_a_measured_step_time_out_of_range_is_a_one_line_error(
    tmp_path: Path, measured: str, as_json: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = load_dataset().model_dump(mode="json", exclude_defaults=True)
    run = {**dataset["runs"][0], "measured_step_time_s": "MEASURED"}
    path = tmp_path / "runs.json"
    text = json.dumps({**dataset, "runs": [run]}).replace('"MEASURED"', measured)
    path.write_text(text, encoding="utf-8")
    assert main(["validate", "--dataset", str(path), *as_json]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "measured_step_time_s" in err
