"""Wall time of the infeasibility diagnosis (``planner plan`` on problems with no strategy).

    python benchmarks/diagnosis_latency.py [--repeats 3]

Typical infeasible cases: a model too large for its GPUs, pins that contradict the problem,
a batch too small for the GPU count, an offload tier too small, an unreachable MFU, and a
multi-trillion model on the poster's system, and issue 40's three (megatron-1t on 16 A100s,
gpt3-175b on 8, mt-128t on 64). For each, the median and worst wall time of the whole `plan`
call (solve + diagnosis) over the repeats, the mean CPU time (this process: CP-SAT
runs one worker in it; the wall time on a shared machine is mostly other people's work), its
deterministic work units, whether the diagnosis
completed, the GPU count it offers (``*``: proven least) and the conflicting families found.
"""

from __future__ import annotations

import argparse
import statistics
import time

from timing import timed

import hardware_catalog
from constraints.target import PerformanceTarget
from planner.queries.plan import plan
from planner.specs import JobSpec


def _offload(capacity_gib: float):
    base = hardware_catalog.load_system("h100-offload-512g")
    tier = base.memory_tiers[1].model_copy(update={"capacity_gib": capacity_gib})
    return base.model_copy(update={"memory_tiers": (base.memory_tiers[0], tier)})


CASES = [
    ("1T on 32 A100s", "megatron-1t", "dgx-a100-80g", 32, 512, {}, None),
    ("22B on one A100-40G node", "megatron-22b", "dgx-a100-40g", 8, 8, {}, None),
    ("batch 1 on 1,024 GPUs", "gpt3-1.3b", "dgx-h100", 1024, 1, {}, None),
    ("tp=16 pinned", "llama3-70b", "dgx-h100", 64, 512, {"tp": 16}, None),
    ("offload tier too small", "megatron-1t", _offload(16), 64, 512, {}, None),
    ("MFU 90 % wanted", "gpt3-13b", "dgx-h100", 64, 256, {}, PerformanceTarget(min_mfu=0.9)),
    ("405B on 16 H100s", "llama3-405b", "dgx-h100", 16, 256, {}, None),
    ("72T on 16,384 offload H100s", "mt-72t", "h100-offload-512g", 16384, 4096, {}, None),
    ("1T on 16 A100s, batch 64", "megatron-1t", "dgx-a100-80g", 16, 64, {}, None),
    ("175B on 8 A100s, batch 64", "gpt3-175b", "dgx-a100-80g", 8, 64, {}, None),
    ("128T on 64 A100s, batch 64", "mt-128t", "dgx-a100-80g", 64, 64, {}, None),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'case':28s} {'median s':>9s} {'worst s':>8s} {'cpu s':>6s} {'units':>6s} "
        f"{'complete':>8s} {'gpus':>8s}  conflict"
    )
    medians = []
    for label, model, system, gpus, batch, pins, target in CASES:
        cpu_s = time.process_time()
        result, median, worst = timed(
            args.repeats,
            plan,
            model,
            system,
            JobSpec(global_batch=batch),
            gpus,
            pins=pins,
            target=target,
        )
        cpu_s = (time.process_time() - cpu_s) / args.repeats
        assert result is not None and result.diagnosis is not None, label
        medians.append(median)
        diagnosis = result.diagnosis
        families = ", ".join(c.family for c in diagnosis.conflicts)
        units = result.solver.work_units if result.solver else 0.0
        fewest = next((f for f in diagnosis.relaxations if f.quantity == "gpus"), None)
        gpus_text = "-"
        if fewest is not None:
            gpus_text = f"{fewest.value:,}" + ("*" if "fewest that" in fewest.change else "")
        print(
            f"{label:28s} {medians[-1]:9.2f} {worst:8.2f} {cpu_s:6.2f} {units:6.2f} "
            f"{str(diagnosis.complete):>8s} {gpus_text:>8s}  {families}",
            flush=True,
        )
    print(
        f"\nmedian over cases {statistics.median(medians):.2f} s; worst median {max(medians):.2f} s"
    )


if __name__ == "__main__":
    main()
