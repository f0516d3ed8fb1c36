"""The third fuzz round (issue 51): each reproducer it found is an input error of one line,
exit 2, naming the field, the value and what is allowed, in the table and in --json; and a
property test drives the layout-string parser, the launch readers, the reliability and stack
files and the plot loader with generated bad input, where nothing but InputError may escape.

No test here asserts a duration: what ran for minutes is bounded by structure (a layout's
unrolled length, a chart's model builds), checked by counting, not by the clock."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hardware_catalog
from planner import launch
from planner.cli import main
from planner.cli.output import degrade_to_encoding
from planner.cost.goodput import goodput_exponential
from planner.errors import InputError
from planner.queries.evaluate import as_system, evaluate
from planner.specs import JobSpec, Strategy
from planner.specs.layouts import MAX_LAYOUT_CHARS, parse_megatron_layout

BAD = 2
ROOT = Path(__file__).resolve().parents[1]
CATALOG = Path(hardware_catalog.__file__).resolve().parent
PROFILE = yaml.safe_load((CATALOG / "reliability" / "h100-llama3.yaml").read_text())
STACK = yaml.safe_load((CATALOG / "stacks" / "megatron-core.yaml").read_text())
SMALL = ["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64"]
MEGATRON = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--padded-vocab-size 128256 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 "
)
FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], *expected: str, json_too: bool = True
) -> str:
    """Run ``argv``, and again with --json (``json_too``, for the commands that have it): exit
    2, nothing on stdout, one line on stderr holding each of ``expected``; that line."""
    line = ""
    for extra in ([], ["--json"]) if json_too else ([],):
        code = main([*argv, *extra])
        out, err = capsys.readouterr()
        assert code == BAD, (argv, extra, out[-300:], err[-300:])
        assert out == ""
        assert err.startswith("planner: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err and len(err) < 600, err
        for part in expected:
            assert part in err, err
        line = err
    return line


# -- layout strings -------------------------------------------------------------------------
HUGE_LAYOUTS = ["Et*99999999999|L", "E(t|)*99999999999999999999,tL", "E(t|)*999999999,tL"]


@pytest.mark.parametrize("layout", HUGE_LAYOUTS)
def test_a_layout_that_unrolls_past_the_bound_is_refused_before_unrolling(
    layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """MemoryError, OverflowError, or a 2 GB string built for a minute, before issue 51."""
    argv = ["evaluate", *SMALL, "--tp", "1", "--pp", "4", "--stage-layers", layout]
    _refused(capsys, argv, "pipeline layout", f"more than {MAX_LAYOUT_CHARS:,} characters")


@pytest.mark.parametrize("layout", HUGE_LAYOUTS)
def test_a_megatron_layout_flag_is_bounded_too(
    layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "args.sh"
    config.write_text(
        MEGATRON + f"--pipeline-model-parallel-size 4 --pipeline-model-parallel-layout '{layout}'"
    )
    argv = ["evaluate", "--from", "megatron", str(config), "--system", "dgx-h100"]
    _refused(capsys, argv, "pipeline layout", "characters")


def test_a_layout_at_the_bound_still_reads() -> None:
    """A bound on the unrolled length, not on what real layouts say: 1,024 blocks over 512
    virtual stages unroll to well under it."""
    assert parse_megatron_layout("E(tt|)*511,ttL", 8) == (2,) * 512
    with pytest.raises(InputError, match="a multiple of pp = 3"):
        parse_megatron_layout("E(tt|)*511,ttL", 3)
    with pytest.raises(InputError, match="at most 65,536"):
        parse_megatron_layout("Et*" + "0" * 70_000 + "1|L", 1)  # long, before any int()


# -- goodput and reliability profiles -------------------------------------------------------
def _profile(tmp_path: Path, storage: dict[str, object]) -> str:
    data = json.loads(json.dumps(PROFILE))
    data["storage"].update(storage)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("write_gbps_per_node", 1e-300),
        ("read_gbps_per_node", 5e-324),
        ("host_link_gbps", 1e-12),
        ("aggregate_read_gbps", 5e-324),
    ],
)
def test_a_storage_bandwidth_too_small_for_the_goodput_model_is_refused(
    field: str, value: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1e-300 GB/s overflowed Daly's model; 5e-324 printed 'inf s' and 'nan%' with exit 0."""
    argv = ["evaluate", *SMALL, "--tp", "8", "--train-tokens", "1e11"]
    argv += ["--reliability", _profile(tmp_path, {field: value})]
    _refused(capsys, argv, f"storage.{field} = {value!r}", "greater than or equal to 0.01")


def test_the_slowest_storage_allowed_keeps_every_goodput_number_finite(tmp_path: Path) -> None:
    slowest = {key: 0.01 for key in ("write_gbps_per_node", "read_gbps_per_node")}
    slowest |= {"host_link_gbps": 0.01, "aggregate_write_gbps": 0.01, "aggregate_read_gbps": 0.01}
    path = _profile(tmp_path, slowest)
    for mode in ("sync", "async", "in-memory"):
        job = JobSpec(global_batch=64, train_tokens=1e18, reliability=path, checkpoint_mode=mode)
        strategy = Strategy(tp=8, dp=1, micro_batch=1)
        goodput = evaluate("llama3-8b", "dgx-h100", job, strategy).goodput
        assert goodput is not None
        numbers = goodput.model_dump(mode="json")
        text = json.dumps(numbers, allow_nan=False)  # raises on inf or nan
        assert 0 <= goodput.goodput <= 1 and 0 <= goodput.goodput_exponential <= 1, text


def test_daly_goodput_is_zero_where_its_exponential_overflows() -> None:
    assert goodput_exponential(10.0, 1e6, 1.0, 1e9) == 0.0
    assert 0 < goodput_exponential(3600.0, 60.0, 86400.0, 600.0) < 1


# -- power cap ------------------------------------------------------------------------------
@pytest.mark.parametrize("watts", ["5e-324", "1e-9", "349"])
@pytest.mark.parametrize("command", ["plan", "min-hardware"])
def test_a_power_cap_below_a_quarter_of_the_tdp_is_refused(
    watts: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """plan crashed on 5e-324 (INT_MIN) and called 11,470 s steps at 1e-9 W optimal."""
    argv = [command, "--model", "llama3-8b", "--system", "gb300-nvl72", "--global-batch", "64"]
    argv += ["--gpus", "16", "--power-cap-w", watts]
    argv += ["--minimize", "hbm"] if command == "min-hardware" else []
    _refused(capsys, argv, "--power-cap-w", "allowed range on system 'gb300-nvl72' is [350, ")


def test_a_spec_file_power_cap_has_the_same_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    system = as_system("dgx-h100").model_dump(mode="json")
    system["accelerator"]["power_cap_w"] = 150
    path = tmp_path / "capped.json"
    path.write_text(json.dumps(system))
    argv = ["evaluate", *SMALL[:2], "--system", str(path), *SMALL[4:], "--tp", "8"]
    _refused(capsys, argv, "power_cap_w = 150 W: allowed range is [175, 10000] W")


# -- ASCII terminals ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", *SMALL, "--top", "2"],
        ["evaluate", *SMALL, "--tp", "1", "--pp", "1", "--micro-batch", "8"],  # does not fit
        ["catalog", "show", "dgx-h100"],
    ],
    ids=["plan", "infeasible", "catalog"],
)
def test_an_ascii_terminal_gets_ascii_not_a_unicode_error(argv: list[str]) -> None:
    """'\\u2026' raised UnicodeEncodeError under PYTHONIOENCODING=ascii (any plan)."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "planner", *argv], capture_output=True, env=env, cwd=ROOT
    )
    assert done.returncode in (0, 3), done.stderr.decode(errors="replace")[-500:]
    assert b"UnicodeEncodeError" not in done.stderr and b"internal error" not in done.stderr
    done.stdout.decode("ascii")  # every byte ASCII
    done.stderr.decode("ascii")


def test_unencodable_characters_get_their_ascii_spelling() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    degrade_to_encoding(stream)
    stream.write("a … b → c × d ≤ e \u2603\n")
    stream.flush()
    assert raw.getvalue() == b"a ... b -> c x d <= e ?\n"
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    degrade_to_encoding(utf8)
    assert utf8.errors == "strict"  # a stream that can write them is left alone


# -- command-line values and messages -------------------------------------------------------
@pytest.mark.parametrize("value", ["-inf", "-1e5", "-nan", "-1"])
def test_a_negative_number_reaches_the_flags_range_check(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """'--train-tokens -inf' got argparse's 'expected one argument'."""
    argv = ["evaluate", *SMALL, "--tp", "8", "--train-tokens", value]
    _refused(capsys, argv, "argument --train-tokens: ", "allowed range is [1, 1e+18]")


@pytest.mark.parametrize(
    ("minimize", "sweep", "expected"),
    [
        ("hbm", "gpus", "invalid choice: 'gpus' (choose from 'hbm', 'offload-capacity'"),
        ("hbm", "hbm", "--sweep hbm: the quantity --minimize minimises; allowed with "),
    ],
)
def test_min_hardware_sweep_is_checked_before_any_solve(
    minimize: str, sweep: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sweep gpus failed after an 18 s solve without naming the allowed quantities."""
    argv = ["min-hardware", *SMALL, "--minimize", minimize, "--sweep", sweep]
    line = _refused(capsys, argv, expected)
    assert "step-time" in line


def test_a_study_past_the_scenario_cap_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1,000,000-scenario sweep was accepted and reported 'about 1074 h left'."""
    study = {
        "name": "huge",
        "models": ["gpt3-1.3b", "llama2-7b"],
        "systems": ["dgx-h100"],
        "gpus": [8 << n for n in range(10)],
        "global_batch": 64,
        "hardware": {"hbm_gib": [10.0 * n for n in range(1, 101)]},
        "job": {"seq_len": [1024 << n for n in range(10)]},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out)]
    line = _refused(capsys, argv, "20,000 scenarios", json_too=False)
    assert "--max-scenarios 10,000" in line and "--max-scenarios 20000" in line
    assert not out.exists()


# -- datasets -------------------------------------------------------------------------------
def _dataset(tmp_path: Path, edit) -> str:
    data = yaml.safe_load((CATALOG / "calibration" / "published_runs.yaml").read_text())
    data["runs"] = data["runs"][:2]
    edit(data["runs"])
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_repeated_or_empty_run_id_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A duplicated id was counted twice; an empty one was accepted."""

    def repeat(runs: list[dict]) -> None:
        runs[1]["id"] = runs[0]["id"]

    first = yaml.safe_load((CATALOG / "calibration" / "published_runs.yaml").read_text())
    repeated = _dataset(tmp_path, repeat)
    _refused(
        capsys,
        ["validate", "--dataset", repeated],
        f"runs.1.id = {first['runs'][0]['id']!r}: already the id of runs.0",
    )
    for empty in ("", "  "):

        def blank(runs: list[dict], empty: str = empty) -> None:
            runs[0]["id"] = empty

        path = _dataset(tmp_path, blank)
        _refused(capsys, ["validate", "--dataset", path], f"runs.0.id = {empty!r}: allowed: ")


def test_a_dataset_error_names_fields_not_pydantics_validators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'function-after[_check_experts(), ...]' stood in the location."""

    def negative(runs: list[dict]) -> None:
        runs[0]["model"]["layers"] = -3  # the bundled runs state their models inline

    line = _refused(
        capsys, ["validate", "--dataset", _dataset(tmp_path, negative)], "runs.0.model.layers = -3"
    )
    assert "function-after" not in line and "ModelSpec" not in line


# -- plot -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder of four finished rows (no sweep: rows as a sweep writes them)."""
    out = tmp_path_factory.mktemp("results")
    rows = []
    for model, params_b in (("gpt3-1.3b", 1.3), ("llama2-7b", 6.7)):
        for gpus in (8, 16):
            rows.append(
                {
                    "id": f"{model}|h100-offload-512g|{gpus}",
                    "model": model,
                    "system": "h100-offload-512g",
                    "gpus": gpus,
                    "global_batch": 64,
                    "status": "optimal",
                    "step_time_s": params_b / gpus,
                    "mfu": 0.4,
                    "tokens_per_s": 1e5,
                    "offload_gbps": 100.0,
                }
            )
    (out / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return out


def _with(results: Path, target: Path, **changes: object) -> Path:
    target.mkdir()
    rows = [json.loads(line) for line in (results / "rows.jsonl").read_text().splitlines()]
    lines = "".join(json.dumps(row | changes) + "\n" for row in rows)
    (target / "rows.jsonl").write_text(lines)
    return target


@pytest.mark.parametrize("kind", ["offload-bandwidth", "mfu-vs-gpus", "mfu-vs-model"])
@pytest.mark.parametrize(("key", "value"), [("mfu", 1e308), ("step_time_s", 1e300)])
def test_absurd_row_numbers_are_not_drawn(
    kind: str,
    key: str,
    value: float,
    results: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """mfu 1e308 raised 'Axis limits cannot be NaN or Inf' (offload-bandwidth) or was drawn."""
    folder = _with(results, tmp_path / "absurd", **{key: value})
    argv = ["plot", str(folder), "--kind", kind, "--out", str(tmp_path / "x.png")]
    expected = f"{key} = {value!r} is outside the allowed range [0, "
    _refused(capsys, argv, expected, json_too=False)
    assert not (tmp_path / "x.png").exists()


def test_an_empty_out_is_refused(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out '' wrote results/KIND.png without a word."""
    code = main(["plot", str(results), "--kind", "mfu-vs-gpus", "--out", ""])
    assert code == BAD
    assert capsys.readouterr().err.startswith("planner: error: --out '': an empty file name")
    assert not (results / "mfu-vs-gpus.png").exists()


def test_a_chart_builds_each_model_once(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mfu-vs-model rebuilt every row's model for every row: 2,000 rows, 8 million builds and
    over 60 s. Now one build per distinct model and overrides, however many rows."""
    from planner.studies import study
    from planner.studies.plots import chart

    built: list[str] = []
    real = study.scenario_model

    def counted(scenario: dict) -> object:
        built.append(scenario["model"])
        return real(scenario)

    monkeypatch.setattr(study, "scenario_model", counted)
    study._params_of.cache_clear()
    base = [json.loads(line) for line in (results / "rows.jsonl").read_text().splitlines()]
    rows = [row | {"id": f"{row['id']}|{n}"} for n in range(500) for row in base]
    folder = tmp_path / "many"
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    drawn = chart(folder, "mfu-vs-model")
    assert sorted(built) == ["gpt3-1.3b", "llama2-7b"]
    assert sum(len(line.points) for panel in drawn.panels for line in panel.lines) == 2_000
    study._params_of.cache_clear()


# -- property: generated bad input raises nothing but InputError ---------------------------
LAYOUT_TEXT = st.text(alphabet="EtLm|(),*0123456789 x", max_size=40)
NASTY_NUMBERS = ["-1", "0", "nan", "inf", "-inf", "1e400", "1.5", "abc", "", "99999999999999999999"]
MEGATRON_FLAGS = [
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-num-layers",
]
AXONN_FLAGS = [
    "--row-tensor-model-parallel-size",
    "--column-tensor-model-parallel-size",
    "--depth-tensor-model-parallel-size",
    "--num-layers-for-caching-weights-in-depth-tensor-parallel-all-gather",
    "--tensor-model-parallel-size",
]


def _flag_values(flags: list[str]) -> st.SearchStrategy[str]:
    pair = st.tuples(st.sampled_from(flags), st.sampled_from(NASTY_NUMBERS + ["1", "2", "8"]))
    return st.lists(pair, max_size=4).map(
        lambda pairs: " ".join(f"{flag} {value!r}" if value else flag for flag, value in pairs)
    )


@FUZZ
@given(text=LAYOUT_TEXT, pp=st.integers(1, 16))
def test_any_layout_string_reads_or_is_an_input_error(text: str, pp: int) -> None:
    try:
        stages = parse_megatron_layout(text, pp)
    except InputError as error:
        assert "\n" not in str(error)
        return
    assert len(stages) % pp == 0 and all(blocks >= 0 for blocks in stages)


@FUZZ
@given(
    fmt=st.sampled_from(["megatron", "axonn"]),
    flags=_flag_values(MEGATRON_FLAGS + AXONN_FLAGS),
    layout=st.one_of(st.none(), LAYOUT_TEXT),
)
def test_any_megatron_or_axonn_flags_read_or_are_an_input_error(
    fmt: str, flags: str, layout: str | None
) -> None:
    text = MEGATRON + flags
    if layout is not None:
        text += f" --pipeline-model-parallel-layout {layout!r}"
    if fmt == "axonn":
        text = text.replace("--tensor-model-parallel-size", "--row-tensor-model-parallel-size")
    try:
        launch.read(fmt, text, as_system("dgx-h100"))
    except InputError as error:
        assert "\n" not in str(error)


JUNK = st.sampled_from(
    [0, -1, 5e-324, 1e-300, 1e300, "nan", "abc", None, True, [], {}, 1.5, "1e400", 0.01]
)


@st.composite
def _edited(draw: st.DrawFn, base: dict) -> dict:
    """``base`` with up to three of its numeric fields (nested ones too) set to junk."""
    data = json.loads(json.dumps(base))
    paths = _number_paths(data)
    for path in draw(st.lists(st.sampled_from(paths), max_size=3)):
        holder = data
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = draw(JUNK)
    return data


def _number_paths(data: dict, prefix: tuple = ()) -> list[tuple]:
    paths: list[tuple] = []
    for key, value in data.items():
        if isinstance(value, dict):
            paths += _number_paths(value, (*prefix, key))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            paths.append((*prefix, key))
    return paths


@settings(FUZZ, max_examples=60)
@given(profile=_edited(PROFILE), stack=_edited(STACK), tokens=st.sampled_from([1e11, 1e18]))
def test_any_reliability_or_stack_file_evaluates_or_is_an_input_error(
    profile: dict, stack: dict, tokens: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("specs")
    (folder / "profile.json").write_text(json.dumps(profile))
    (folder / "stack.json").write_text(json.dumps(stack))
    job = JobSpec(
        global_batch=64,
        train_tokens=tokens,
        reliability=str(folder / "profile.json"),
        stack=str(folder / "stack.json"),
    )
    try:
        estimate = evaluate("llama3-8b", "dgx-h100", job, Strategy(tp=8, micro_batch=1))
    except InputError as error:
        assert "\n" not in str(error)
        return
    json.dumps(estimate.model_dump(mode="json"), allow_nan=False)


ROW_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.sampled_from([None, "", "x", True, [], {}]),
)


@settings(FUZZ, max_examples=60)
@given(
    changes=st.dictionaries(
        st.sampled_from(["mfu", "step_time_s", "gpus", "global_batch", "offload_gbps", "model"]),
        ROW_VALUES,
        max_size=3,
    ),
    kind=st.sampled_from(["mfu-vs-gpus", "mfu-vs-model", "offload-bandwidth", "breakdown"]),
)
def test_any_rows_chart_or_are_an_input_error(
    changes: dict, kind: str, results: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from planner.studies.plots import chart

    folder = tmp_path_factory.mktemp("rows")
    rows = [json.loads(line) for line in (results / "rows.jsonl").read_text().splitlines()]
    rows[0] |= changes
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    try:
        chart(folder, kind)
    except InputError as error:
        assert "\n" not in str(error)
