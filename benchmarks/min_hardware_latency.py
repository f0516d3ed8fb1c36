"""Wall time of minimum-hardware queries (``planner min-hardware``).

    python benchmarks/min_hardware_latency.py [--repeats 3] [--quantity gpus]

The issue's example queries and a few more; per query the median and worst wall time over the
repeats (model build, the minimisation, the plan at the minimum and the evidence one step below),
the median CPU time of this process (what the query itself computed: on a busy machine the wall
time also counts the other processes' turns), the CP-SAT deterministic work it spent (the same
on any machine), the
answer and whether it is proven; for a fewest-GPUs query, how the smaller counts were refuted.
``--quantity`` runs only the queries of one quantity.
"""

from __future__ import annotations

import argparse
import statistics
import time

from timing import timed

from constraints.target import PerformanceTarget
from planner.queries.min_hardware import min_hardware
from planner.specs import JobSpec

OFFLOAD = "h100-offload-512g"
QUERIES = [
    (
        "gpt3-175b gpus, step ≤ 10 s",
        "gpt3-175b",
        "dgx-h100",
        1536,
        "gpus",
        None,
        PerformanceTarget(max_step_s=10),
    ),
    (
        "llama3-405b gpus, 15T tokens in 60 days",
        "llama3-405b",
        "dgx-h100",
        2048,
        "gpus",
        None,
        PerformanceTarget(max_step_s=60 * 86400 * 2048 * 8192 / 15e12),
    ),
    (
        "mt-11t hbm, MFU ≥ 45 %",
        "mt-11t",
        OFFLOAD,
        4096,
        "hbm",
        16384,
        PerformanceTarget(min_mfu=0.45),
    ),
    (
        "mt-4t offload capacity, MFU ≥ 45 %",
        "mt-4t",
        OFFLOAD,
        4096,
        "offload-capacity",
        16384,
        PerformanceTarget(min_mfu=0.45),
    ),
    (
        "mt-11t offload bandwidth, MFU ≥ 45 %",
        "mt-11t",
        OFFLOAD,
        4096,
        "offload-bandwidth",
        16384,
        PerformanceTarget(min_mfu=0.45),
    ),
    (
        "gpt3-175b scale-out, MFU ≥ 45 %",
        "gpt3-175b",
        "dgx-h100",
        1536,
        "scale-out-bandwidth",
        1024,
        PerformanceTarget(min_mfu=0.45),
    ),
    (
        "megatron-1t gpus, fits",
        "megatron-1t",
        "dgx-a100-80g",
        512,
        "gpus",
        None,
        PerformanceTarget(),
    ),
]


def _cpu_timed(function, cpu_s: list[float]):
    """``function``, appending each call's CPU time (this process) to ``cpu_s``."""

    def call(*args, **kwargs):
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            cpu_s.append(time.process_time() - started)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quantity", help="only the queries minimising this quantity")
    args = parser.parse_args()
    print(f"{'query':40s} {'median s':>9s} {'worst s':>8s} {'cpu s':>6s} {'units':>6s}  answer")
    medians = []
    for label, model, system, batch, quantity, gpus, target in QUERIES:
        if args.quantity and quantity != args.quantity:
            continue
        cpu_s: list[float] = []
        result, median, worst = timed(
            args.repeats,
            _cpu_timed(min_hardware, cpu_s),
            model,
            system,
            JobSpec(global_batch=batch),
            quantity,
            gpus=gpus,
            target=target,
        )
        medians.append(median)
        minimum = result.minimum
        answer = (
            f"{minimum.value:g} {minimum.unit} ({'proven' if minimum.proven else 'best'})"
            if minimum
            else result.status
        )
        print(
            f"{label:40s} {medians[-1]:9.2f} {worst:8.2f} {statistics.median(cpu_s):6.2f} "
            f"{result.work_units:6.2f}  {answer}",
            flush=True,
        )
        if minimum is not None and minimum.evidence:
            print(f"{'':40s} {minimum.evidence}", flush=True)
    print(
        f"\nmedian over queries {statistics.median(medians):.2f} s; worst median "
        f"{max(medians):.2f} s"
    )


if __name__ == "__main__":
    main()
