"""Every path a user can take through the CLI: each command × each outcome (ok, bad input,
infeasible, time limit) × table and ``--json``. Each run must exit with the documented code,
print no traceback, and, with ``--json``, print exactly one JSON object with the documented keys
(bad input: one line on stderr, nothing on stdout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import main

SMALL = ["--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64"]
HUGE = ["--model", "megatron-1t", "--system", "dgx-a100-80g", "--gpus", "16", "--global-batch"]
HUGE += ["64"]
INSTANT = ["--time-limit", "0.000001"]
"""A time limit that ends the search before its first solution."""

OK, BAD, INFEASIBLE, TIME_LIMIT = 0, 2, 3, 4

CASES: dict[str, tuple[list[str], int, tuple[str, ...]]] = {
    # name: (argv without --json, exit code, keys of the --json object)
    "catalog ok": (["catalog", "show", "dgx-h100"], OK, ("name", "accelerator")),
    "catalog bad": (["catalog", "show", "dgx-h1000"], BAD, ()),
    "evaluate ok": (["evaluate", *SMALL, "--dp", "8"], OK, ("strategy", "estimate")),
    "evaluate bad": (["evaluate", *SMALL, "--tp", "3"], BAD, ()),
    "evaluate infeasible": (
        ["evaluate", *HUGE, "--tp", "8", "--pp", "2"],
        INFEASIBLE,
        ("strategy", "estimate"),
    ),
    "plan ok": (["plan", *SMALL], OK, ("status", "strategy", "estimate", "solver")),
    "plan bad": (["plan", *SMALL, "--pin", "tp=0"], BAD, ()),
    "plan infeasible": (["plan", *HUGE], INFEASIBLE, ("status", "diagnosis")),
    "plan time limit": (["plan", *SMALL, *INSTANT], TIME_LIMIT, ("status", "solver")),
    "min-hardware ok": (["min-hardware", *SMALL, "--minimize", "hbm"], OK, ("status", "minimum")),
    "min-hardware bad": (["min-hardware", *SMALL, "--minimize", "hbm", "--max-days", "1"], BAD, ()),
    "min-hardware infeasible": (
        ["min-hardware", *SMALL, "--minimize", "hbm", "--max-step-time", "1e-6"],
        INFEASIBLE,
        ("status", "diagnosis"),
    ),
    "min-hardware time limit": (
        ["min-hardware", *SMALL, "--minimize", "hbm", *INSTANT],
        TIME_LIMIT,
        ("status",),
    ),
    "validate bad": (["validate", "--dataset", "no-such-file.yaml"], BAD, ()),
    "validate network ok": (["validate", "--network"], OK, ("curves", "modelled", "left_out")),
    "validate network bad": (["validate", "--network", "--dataset", "no-such.yaml"], BAD, ()),
    "validate network with cross-validate": (
        ["validate", "--network", "--cross-validate"],
        BAD,
        (),
    ),
    "calibrate bad": (["calibrate", "--system", "dgx-h100", "--free", "nonsense"], BAD, ()),
}


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
@pytest.mark.parametrize("name", list(CASES))
def test_each_command_and_outcome(
    capsys: pytest.CaptureFixture[str], name: str, as_json: bool
) -> None:
    argv, expected, keys = CASES[name]
    code = main([*argv, "--json"] if as_json else argv)
    out, err = capsys.readouterr()
    assert code == expected, (out, err)
    assert "Traceback" not in out + err
    if expected == BAD:
        assert out == ""
        assert err.startswith("planner: error: ") and err.count("\n") == 1
        return
    assert err == ""
    if as_json:
        payload = json.loads(out)
        assert set(keys) <= set(payload), sorted(payload)
    else:
        assert out.strip() and not out.lstrip().startswith("{")


def test_sweep_and_plot_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sweep: ok (an infeasible scenario is a row, not a failure), bad study; plot: ok, bad."""
    study = {
        "name": "paths",
        "models": ["gpt3-1.3b", "megatron-1t"],
        "systems": ["dgx-h100"],
        "gpus": [8],
        "global_batch": 64,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == OK
    statuses = sorted(json.loads(line)["status"] for line in (out / "rows.jsonl").open())
    assert statuses == ["infeasible", "optimal"]
    path.write_text(yaml.safe_dump({**study, "gpus": [0]}))
    assert main(["sweep", str(path), "--out", str(out)]) == BAD
    assert main(["plot", str(tmp_path / "missing"), "--kind", "mfu-vs-gpus"]) == BAD
    pytest.importorskip("matplotlib")
    assert main(["plot", str(out), "--kind", "mfu-vs-gpus"]) == OK
    assert "Traceback" not in "".join(capsys.readouterr())
