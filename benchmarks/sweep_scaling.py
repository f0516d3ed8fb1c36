"""How `planner sweep` scales with worker processes on this machine.

    python benchmarks/sweep_scaling.py [--repeats 3]

One study (six catalog models × 1,024 / 4,096 GPUs of dgx-h100 × two HBM sizes = 24 plans),
run into a fresh folder with 1 and with 2 jobs, alternately; the median wall time of each and
their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from planner.studies.study import Study
from planner.studies.sweep import run_study

STUDY = Study(
    name="scaling",
    models=("gpt3-13b", "gpt3-175b", "llama2-70b", "llama3-70b", "megatron-22b", "llama3-405b"),
    systems=("dgx-h100",),
    gpus=(1024, 4096),
    global_batch=1024,
    hardware={"hbm_gib": (64.0, 79.6)},
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for jobs in (1, 2):
            with tempfile.TemporaryDirectory() as folder:
                started = time.perf_counter()
                rows = run_study(STUDY, Path(folder), jobs=jobs)
                times[jobs].append(time.perf_counter() - started)
                assert len(rows) == 24
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(
        f"24 scenarios: 1 job {one:.2f} s, 2 jobs {two:.2f} s (medians of {args.repeats}); "
        f"speed-up {one / two:.2f}x"
    )


if __name__ == "__main__":
    main()
