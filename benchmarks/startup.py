"""Start-up cost of the CLI, as whole processes, against bare-import baselines (issue 17).

    python benchmarks/startup.py [--repeats 9] [--only plan]

Each command runs ``--repeats`` times as a fresh process of the installed console script (the
``planner`` next to this interpreter, as the README's user runs it; ``python -m planner`` if
there is none). Runs are interleaved (one of each command per round), so load on a shared
machine falls on all of them alike. The table gives the median wall time and its ratio to a
baseline measured in the same rounds: ``python -c "import rich, pydantic, yaml, numpy"`` for the
commands that never solve, ``python -c "from ortools.sat.python import cp_model"`` for ``plan``
(the README's main job). The targets (issue 17): catalog systems and evaluate within 2× their
baseline, plan within 1.5×.

Python caches compiled modules (``__pycache__``) unless ``PYTHONDONTWRITEBYTECODE`` is set; a
user's does, so the commands run without that variable (``--env-as-is`` keeps it: then an
editable install recompiles planner's sources on every run, ~30 ms, while a wheel install has
its bytecode compiled by pip at install time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("planner")
PLANNER = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "planner"]
BASELINES = {
    "libraries": [sys.executable, "-c", "import rich, pydantic, yaml, numpy"],
    "solver": [sys.executable, "-c", "from ortools.sat.python import cp_model"],
}
MAIN_JOB = ["--model", "gpt3-175b", "--system", "dgx-a100-80g", "--gpus", "1024"]
MAIN_JOB += ["--global-batch", "1536"]
EVALUATE = ["--tp", "8", "--pp", "16", "--micro-batch", "1", "--interleave", "2"]
EVALUATE += ["--recompute", "selective", "--sequence-parallel"]
COMMANDS = [
    ("--help", ["--help"], "libraries", None),
    ("catalog systems", ["catalog", "systems"], "libraries", 2.0),
    ("catalog show", ["catalog", "show", "dgx-h100"], "libraries", None),
    ("evaluate", ["evaluate", *MAIN_JOB, *EVALUATE], "libraries", 2.0),
    ("plan (main job)", ["plan", *MAIN_JOB], "solver", 1.5),
]


def run_once(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one fresh process, output discarded."""
    started = time.perf_counter()
    subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env
    )
    return time.perf_counter() - started


def medians(commands: dict[str, list[str]], repeats: int, env: dict[str, str]) -> dict[str, float]:
    """Median wall seconds of each command over ``repeats`` interleaved rounds (one warm-up
    round first, untimed, so the first timed run does not pay for a cold file cache)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(repeats + 1):
        for name, command in commands.items():
            seconds = run_once(command, env)
            if round_number:
                times[name].append(seconds)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--only", help="the commands whose name contains this text")
    parser.add_argument(
        "--env-as-is", action="store_true", help="keep PYTHONDONTWRITEBYTECODE if it is set"
    )
    args = parser.parse_args()
    env = dict(os.environ)
    if not args.env_as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    chosen = [row for row in COMMANDS if not args.only or args.only in row[0]]
    commands = {name: [*PLANNER, *argv] for name, argv, _, _ in chosen}
    commands.update({f"baseline {name}": command for name, command in BASELINES.items()})
    median = medians(commands, args.repeats, env)
    bytecode = "not cached" if env.get("PYTHONDONTWRITEBYTECODE") else "cached"
    print(f"{' '.join(PLANNER)}: medians of {args.repeats} interleaved runs, bytecode {bytecode}")
    print(f"baseline import rich, pydantic, yaml, numpy: {median['baseline libraries']:.3f} s")
    print(f"baseline from ortools.sat.python import cp_model: {median['baseline solver']:.3f} s")
    print(f"| {'command':16s} | median s | × baseline | baseline  | target |")
    print(f"|{'-' * 18}|---------:|-----------:|-----------|--------|")
    for name, _, baseline, target in chosen:
        ratio = median[name] / median[f"baseline {baseline}"]
        verdict = (
            "-" if target is None else f"≤ {target:g}× {'met' if ratio <= target else 'NOT met'}"
        )
        print(f"| {name:16s} | {median[name]:8.3f} | {ratio:10.2f} | {baseline:9s} | {verdict} |")


if __name__ == "__main__":
    main()
