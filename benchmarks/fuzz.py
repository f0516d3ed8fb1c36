"""The long fuzz run: tests/test_fuzz.py with many examples, then its totals.

    python benchmarks/fuzz.py --examples 2000 --seed 1

Runs both fuzz tests with ``--examples`` each: argument lists of every subcommand (hardware
overrides, stack names, subnormal, tiny, huge and non-finite numbers among the values) and
model, system, stack, study and dataset files (each model, system and stack file through
evaluate or plan), then the fixed reproducers of tests/test_fuzz.py; it stops at the first
failure and prints the inputs tried, the exits by code and the pytest outcome. CI runs the same
tests with 40 examples each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="examples per fuzz test")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        totals_path = Path(scratch) / "totals.json"
        env = {
            **os.environ,
            "PLANNER_FUZZ_EXAMPLES": str(args.examples),
            "PLANNER_FUZZ_TOTALS": str(totals_path),
        }
        env.pop("CI", None)  # the CI profile derandomizes; here the seed decides
        started = time.perf_counter()
        command = [sys.executable, "-m", "pytest", "tests/test_fuzz.py", "-x", "-q"]
        command += [f"--hypothesis-seed={args.seed}", "-p", "no:cacheprovider"]
        outcome = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        elapsed_s = time.perf_counter() - started
        totals = json.loads(totals_path.read_text()) if totals_path.exists() else {}
    print(outcome.stdout.strip().splitlines()[-1] if outcome.stdout.strip() else "(no output)")
    if outcome.returncode:
        print(outcome.stdout[-4000:])
    exits = ", ".join(f"{k}: {v}" for k, v in sorted(totals.items()) if k.startswith("exit"))
    print(f"inputs tried: {totals.get('inputs', 0)} in {elapsed_s:.0f} s ({exits})")
    print(f"tracebacks and internal errors (exit 1): {totals.get('exit 1', 0)}")
    return outcome.returncode


if __name__ == "__main__":
    sys.exit(main())
