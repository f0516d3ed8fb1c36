"""Commands load only what they need: no OR-Tools (nor pandas, which it pulls in) for the
commands that never solve, and matplotlib only inside ``plot`` (issue 17: a CLI called in a
loop pays every import on every call)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("ortools", "pandas", "matplotlib")

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
    main({argv!r})
except SystemExit:
    pass
loaded = sorted({{name.split('.')[0] for name in sys.modules}} & set({heavy!r}))
print('LOADED', ','.join(loaded))
"""


@pytest.mark.parametrize("name", list(COMMANDS))
def test_command_does_not_import_the_solver_or_plotting(name: str) -> None:
    probe = PROBE.format(argv=COMMANDS[name], heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert loaded == "LOADED", (name, loaded, done.stderr[-500:])


def test_plan_does_load_the_solver() -> None:
    """The probe can fail: plan imports OR-Tools when it solves."""
    argv = ["plan", "--model", "gpt3-1.3b", "--system", "dgx-h100", "--gpus", "8"]
    probe = PROBE.format(argv=[*argv, "--global-batch", "64"], heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert "ortools" in done.stdout.strip().splitlines()[-1]
