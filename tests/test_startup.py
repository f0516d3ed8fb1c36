"""Commands load only what they need: no OR-Tools (nor pandas, which it pulls in) for the
commands that never solve, and matplotlib only inside ``plot`` (issue 17: a CLI called in a
loop pays every import on every call)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("ortools", "pandas", "matplotlib")
NO_COST_MODEL = ("help", "catalog", "bad input")
"""Commands that never evaluate a strategy: numpy (the cost model's) stays unloaded too."""

COMMANDS = {
    "help": ["--help"],
    "catalog": ["catalog", "systems"],
    "evaluate": [
        "evaluate", "--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8",
        "--global-batch", "64", "--dp", "8",
    ],
    "bad input": ["plan", "--model", "gpt3-1.3b"],
}  # fmt: skip

PROBE = """
import sys
from planner.cli import main
try:
    code = main({argv!r}, own_process={own_process!r})
except SystemExit as exit:
    code = exit.code
print('EXIT', code)
loaded = sorted({{name.split('.')[0] for name in sys.modules}} & set({heavy!r}))
print('LOADED', ','.join(loaded))
"""


@pytest.mark.parametrize("name", list(COMMANDS))
def test_command_does_not_import_the_solver_or_plotting(name: str) -> None:
    heavy = (*HEAVY, "numpy") if name in NO_COST_MODEL else HEAVY
    probe = PROBE.format(argv=COMMANDS[name], own_process=False, heavy=heavy)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert loaded == "LOADED", (name, loaded, done.stderr[-500:])


def test_plan_does_load_the_solver() -> None:
    """The probe can fail: plan imports OR-Tools when it solves (with pandas, called as a
    library)."""
    argv = ["plan", "--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8"]
    probe = PROBE.format(argv=[*argv, "--global-batch", "64"], own_process=False, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-2:] == ["EXIT 0", "LOADED ortools,pandas"]


LEAN_PROBE = """
import sys
from planner.cli import cpsat_import
{setup}
used = cpsat_import.import_cp_model_without_pandas()
from ortools.sat.python import cp_model
model = cp_model.CpModel()
x = model.NewIntVar(0, 9, "x")
model.Add(x >= 4)
model.Minimize(x)
solver = cp_model.CpSolver()
status = solver.Solve(model)
print("USED", used, "PANDAS", "pandas" in sys.modules, "X", solver.Value(x))
import pandas
print("REAL", hasattr(pandas, "DataFrame"))
"""


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("", "USED True PANDAS False X 4"),
        ("import pandas", "USED False PANDAS True X 4"),  # loaded already: left as it is
        # a cp_model that reads another pandas name at import: imported with pandas
        ("cpsat_import.PANDAS_NAMES_READ_AT_IMPORT = ('Index',)", "USED False PANDAS True X 4"),
    ],
)
def test_cp_model_imports_without_pandas(setup: str, expected: str) -> None:
    """The stand-in suffices for cp_model's import, the solver works, and a later
    ``import pandas`` gets the real library."""
    probe = LEAN_PROBE.format(setup=setup)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.splitlines() == [expected, "REAL True"], done.stderr[-500:]


def test_console_script_plans_without_pandas() -> None:
    """The console script's own process (main's own_process) plans without loading pandas;
    planner called as a library leaves cp_model's import as it is (test_plan_does_load...)."""
    argv = ["plan", "--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8"]
    probe = PROBE.format(argv=[*argv, "--global-batch", "64"], own_process=True, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-2:] == ["EXIT 0", "LOADED ortools"], done.stderr[-500:]


def test_console_script_exits_with_mains_code_after_freezing(monkeypatch, capsys) -> None:
    """planner.cli.run (the console script) collects less often and skips the teardown
    collections (both left undone in this test process), and keeps main's exit code."""
    import planner.cli

    frozen = []
    monkeypatch.setattr(planner.cli.gc, "freeze", lambda: frozen.append(True))
    thresholds = []
    monkeypatch.setattr(planner.cli.gc, "set_threshold", lambda *t: thresholds.append(t[0]))
    monkeypatch.setattr(sys, "argv", ["planner", "catalog", "show", "no-such-thing"])
    with pytest.raises(SystemExit) as exit_info:
        planner.cli.run()
    assert exit_info.value.code == planner.cli.EXIT_BAD_INPUT
    assert frozen == [True]
    assert thresholds == [planner.cli.YOUNG_GC_THRESHOLD]
    assert "no-such-thing" in capsys.readouterr().err


def test_plan_of_one_does_not_rank(monkeypatch) -> None:
    """With top = 1 the ranking's further solves (tied variants, dropped) are skipped; the
    strategy is the one that top = 2 ranks first."""
    import planner.queries.plan
    from planner.specs import JobSpec

    job = JobSpec(global_batch=64)
    ranked = planner.queries.plan.plan("gpt3-1.3b", "dgx-h100", job, 8, top=2)

    def no_rank(*args, **kwargs):
        raise AssertionError("rank() called for top = 1")

    monkeypatch.setattr(planner.queries.plan, "rank", no_rank)
    single = planner.queries.plan.plan("gpt3-1.3b", "dgx-h100", job, 8)
    assert single.strategy == ranked.strategy == ranked.alternatives[0].strategy
    assert single.estimate == ranked.estimate
