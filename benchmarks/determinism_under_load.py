"""Same input, same answer, on a quiet machine and under load (issue 40).

    python benchmarks/determinism_under_load.py [--repeats 1] [--burners N]

Runs a small query set through the CLI with ``--json`` (a few plans, one infeasible plan with
its diagnosis, one fewest-GPUs query) twice: on the machine as it is, then with N competing
processes spinning one core each (default: one per core). Every default limit is a CP-SAT
deterministic work limit, so every answer (status, strategy, objective, diagnosis, work
units: the whole JSON less its wall-clock fields) must be identical; prints, per query, whether
it is and the median wall time of each pass. Exit status 1 when any answer differs.

Takes about a minute quiet and two under load on 2 cores; the burners slow down everything
else on the machine while they run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANNER = [sys.executable, "-m", "planner"]

QUERIES = {
    "plan gpt3-175b, 1,024 A100s": [
        "plan",
        *("--model", "gpt3-175b", "--system", "dgx-a100-80g"),
        *("--gpus", "1024", "--global-batch", "1536"),
    ],
    "plan llama3-70b, 512 H100s, top 3": [
        "plan",
        *("--model", "llama3-70b", "--system", "dgx-h100"),
        *("--gpus", "512", "--global-batch", "1024", "--top", "3"),
    ],
    "plan mixtral-8x7b, 64 H100s": [
        "plan",
        *("--model", "mixtral-8x7b", "--system", "dgx-h100"),
        *("--gpus", "64", "--global-batch", "256"),
    ],
    "plan megatron-1t, 16 A100s (infeasible)": [
        "plan",
        *("--model", "megatron-1t", "--system", "dgx-a100-80g"),
        *("--gpus", "16", "--global-batch", "64"),
    ],
    "min-hardware gpt3-175b fewest H100s": [
        "min-hardware",
        *("--model", "gpt3-175b", "--system", "dgx-h100", "--global-batch", "1536"),
        *("--minimize", "gpus", "--max-step-time", "10"),
    ],
}

WALL_CLOCK_KEYS = {"wall_time_s", "build_time_s"}
"""Fields that measure the machine, not the answer."""


def answer(payload: object) -> object:
    """The JSON without its wall-clock fields."""
    if isinstance(payload, dict):
        return {k: answer(v) for k, v in payload.items() if k not in WALL_CLOCK_KEYS}
    if isinstance(payload, list):
        return [answer(v) for v in payload]
    return payload


def run(argv: list[str]) -> tuple[object, float]:
    """(the answer, wall seconds) of one CLI run with --json."""
    started = time.perf_counter()
    done = subprocess.run(
        [*PLANNER, *argv, "--json"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    wall_s = time.perf_counter() - started
    if done.returncode not in (0, 3, 4):
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return {"exit": done.returncode, **answer(json.loads(done.stdout))}, wall_s


def one_pass(repeats: int) -> dict[str, tuple[list[object], float]]:
    """Per query: the answers of ``repeats`` runs and their median wall time."""
    results = {}
    for label, argv in QUERIES.items():
        answers, times = [], []
        for _ in range(repeats):
            got, wall_s = run(argv)
            answers.append(got)
            times.append(wall_s)
        results[label] = answers, statistics.median(times)
        print(f"  {label:42s} {results[label][1]:7.2f} s", flush=True)
    return results


def burn() -> None:
    """Spin one core until terminated."""
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    print("quiet:")
    quiet = one_pass(args.repeats)
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for process in burners:
        process.start()
    try:
        print(f"under load ({args.burners} processes spinning):")
        loaded = one_pass(args.repeats)
    finally:
        for process in burners:
            process.terminate()
            process.join()
    print(f"\n{'query':42s} {'quiet s':>8s} {'loaded s':>9s}  identical")
    differing = 0
    for label in QUERIES:
        answers = quiet[label][0] + loaded[label][0]
        same = all(a == answers[0] for a in answers)
        differing += not same
        print(f"{label:42s} {quiet[label][1]:8.2f} {loaded[label][1]:9.2f}  {same}")
    print(
        f"\n{len(QUERIES) - differing} of {len(QUERIES)} queries gave identical answers "
        f"(status, strategy, objective, diagnosis, work units) quiet and under load"
    )
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
