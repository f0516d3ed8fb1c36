"""Start-up cost of the CLI, as whole processes, against bare-import baselines (issue 17).

    python benchmarks/startup.py [--repeats 7]

Each command runs ``--repeats`` times as a fresh process; the table gives the median wall time
and its ratio to a baseline measured in the same run: ``python -c "import rich, pydantic,
yaml, numpy"`` for the commands that never solve, ``python -c "from ortools.sat.python import
cp_model"`` for ``plan`` (the README's main job).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PLANNER = [sys.executable, "-m", "planner"]
LIBRARIES = [sys.executable, "-c", "import rich, pydantic, yaml, numpy"]
SOLVER = [sys.executable, "-c", "from ortools.sat.python import cp_model"]
MAIN_JOB = ["--model", "gpt3-175b", "--system", "dgx-a100-80g", "--gpus", "1024"]
MAIN_JOB += ["--global-batch", "1536"]
COMMANDS = [
    ("--help", [*PLANNER, "--help"], "libraries"),
    ("catalog systems", [*PLANNER, "catalog", "systems"], "libraries"),
    ("catalog show", [*PLANNER, "catalog", "show", "dgx-h100"], "libraries"),
    (
        "evaluate",
        [*PLANNER, "evaluate", *MAIN_JOB, "--tp", "8", "--pp", "16", "--micro-batch", "1"],
        "libraries",
    ),
    ("plan (main job)", [*PLANNER, "plan", *MAIN_JOB], "solver"),
]


def median_s(command: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    baselines = {
        "libraries": median_s(LIBRARIES, args.repeats),
        "solver": median_s(SOLVER, args.repeats),
    }
    print(f"baseline import rich, pydantic, yaml, numpy: {baselines['libraries']:.3f} s")
    print(f"baseline from ortools.sat.python import cp_model: {baselines['solver']:.3f} s")
    print(f"{'command':18s} {'median s':>9s} {'× baseline':>11s}  baseline")
    for name, command, baseline in COMMANDS:
        seconds = median_s(command, args.repeats)
        print(f"{name:18s} {seconds:9.3f} {seconds / baselines[baseline]:11.2f}  {baseline}")


if __name__ == "__main__":
    main()
