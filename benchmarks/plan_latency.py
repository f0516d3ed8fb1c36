"""Solve latency of ``planner plan`` against the brute-force oracle, measured in the same run.

    python benchmarks/plan_latency.py                 # all scenarios (several minutes)
    python benchmarks/plan_latency.py --quick         # one GPU count per model, 3 repeats
    python benchmarks/plan_latency.py --oracle-limit 0   # skip the oracle

Scenarios: every catalog model up to 1T parameters on 1,024 / 4,096 / 16,384 GPUs of dgx-h100
and of the poster's h100-offload-512g, plus the twelve multi-trillion models on 16,384 GPUs of
h100-offload-512g. Global batch: max(512, GPUs/4) sequences (4,096 at 16,384 GPUs, as in the
poster). For each: the search-space size (product of the knob domains), the CP-SAT model size
(variables, constraints, element-table entries), the median and worst solve wall time over
``--repeats`` runs (build + solve, as `planner plan` reports it, without the diagnosis of
infeasible scenarios: benchmarks/diagnosis_latency.py times that), whether optimality was proven,
and — where the space has at most ``--oracle-limit`` points — the oracle's wall time (one run),
the ratio, and whether both found the same optimal step time. The summary extrapolates the
oracle's measured throughput (knob combinations per second) to the largest space and to an hour.
"""

from __future__ import annotations

import argparse
import statistics
import time

from timing import timed

import hardware_catalog
from planner.cost.context import CostContext
from planner.queries.plan import plan
from planner.space.oracle import enumerate_strategies, raw_space
from planner.specs import JobSpec

SYSTEMS = ("dgx-h100", "h100-offload-512g")
GPU_COUNTS = (1024, 4096, 16384)


def scenarios(quick: bool) -> list[tuple[str, str, int]]:
    models = [hardware_catalog.load_model(n) for n in hardware_catalog.model_names()]
    small = sorted((m for m in models if m.params <= 1.01e12), key=lambda m: m.params)
    large = sorted((m for m in models if m.name.startswith("mt-")), key=lambda m: m.params)
    counts = (4096,) if quick else GPU_COUNTS
    result = [(m.name, s, g) for s in SYSTEMS for m in small for g in counts]
    result += [(m.name, "h100-offload-512g", 16384) for m in large if m.params > 1.01e12]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--oracle-limit",
        type=float,
        default=3e6,
        help="run the oracle where the space has at most this many points",
    )
    args = parser.parse_args()
    repeats = 3 if args.quick and args.repeats == 5 else args.repeats

    header = (
        f"{'model':14s} {'system':18s} {'GPUs':>6s} {'space':>10s} {'vars':>5s} "
        f"{'cons':>5s} {'table':>6s} {'median s':>9s} {'worst s':>8s} {'status':>8s} "
        f"{'step s':>9s} {'oracle s':>9s} {'ratio':>7s} {'same':>5s}"
    )
    print(header)
    medians, worsts, statuses, ratios, rates, sizes = [], [], [], [], [], []
    for model, system, gpus in scenarios(args.quick):
        job = JobSpec(global_batch=max(512, gpus // 4))
        result, median, worst = timed(repeats, plan, model, system, job, gpus, diagnose=False)
        assert result is not None
        medians.append(median)
        worsts.append(worst)
        statuses.append(result.status)
        step = result.estimate.step_time_s if result.estimate else float("nan")
        oracle_s, ratio, same = "-", "-", "-"
        size = result.solver.search_space
        sizes.append(size)
        if size <= args.oracle_limit:
            spec_m, spec_s = (
                hardware_catalog.load_model(model),
                hardware_catalog.load_system(system),
            )
            ctx = CostContext(spec_m, spec_s, job)
            space = raw_space(spec_m, spec_s, job, gpus)
            started = time.perf_counter()
            best = enumerate_strategies(ctx, space)
            elapsed = time.perf_counter() - started
            oracle_s, ratio = f"{elapsed:.2f}", f"{elapsed / median:.1f}x"
            ratios.append(elapsed / median)
            rates.append(size / elapsed)
            if best and result.estimate:
                same = "yes" if abs(best[0].step_time_s / step - 1) < 1e-4 else "NO"
            else:
                same = "yes" if not best and not result.estimate else "NO"
        print(
            f"{model:14s} {system:18s} {gpus:6d} {size:10.3g} {result.solver.variables:5d} "
            f"{result.solver.constraints:5d} {result.solver.table_entries:6d} {median:9.3f} "
            f"{worst:8.3f} {result.status:>8s} {step:9.4g} {oracle_s:>9s} {ratio:>7s} "
            f"{same:>5s}",
            flush=True,
        )
    print()
    print(
        f"scenarios: {len(medians)}; median of medians {statistics.median(medians):.3f} s; "
        f"worst {max(worsts):.3f} s; statuses: "
        + ", ".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses)))
    )
    if ratios:
        print(
            f"oracle / solver time, where the oracle ran ({len(ratios)} scenarios): median "
            f"{statistics.median(ratios):.1f}x, min {min(ratios):.1f}x, max {max(ratios):.1f}x"
        )
        rate = statistics.median(rates)
        hour = rate * 3600
        print(
            f"oracle throughput: {rate:.3g} knob combinations/s (median); at that rate an hour "
            f"enumerates {hour:.3g}, the largest space here ({max(sizes):.3g}) takes "
            f"{max(sizes) / rate:.3g} s; the solver's time grows with the tables (the sum of a "
            "few knobs' products), not with the space"
        )


if __name__ == "__main__":
    main()
