"""Solve latency of mixture-of-experts plans under the two first-phase budgets, in one run.

    python benchmarks/moe_latency.py              # eight problems, 1 repeat (~3 min)
    python benchmarks/moe_latency.py --repeats 3

Expert parallelism multiplies the plan's search space by the expert layouts (ep × expert TP).
planner.solving proves a plan in a propagation-only first phase and falls back on the LP
relaxation if that phase runs out of its budget: 1.5 deterministic units for a dense space,
planner.solving.EXPERT_FIRST_PHASE_DETERMINISTIC_S where the space has more than one ep. For
each problem this prints the build + solve wall time (median over ``--repeats``) and status
under both budgets, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

from constraints import build_plan_model
from planner.api import as_model, as_system
from planner.cost.context import CostContext
from planner.search_space import build_search_space
from planner.solving import EXPERT_FIRST_PHASE_DETERMINISTIC_S, FIRST_PHASE_DETERMINISTIC_S, solve
from planner.specs import JobSpec

PROBLEMS = (
    ("mixtral-8x7b", "dgx-h100", 4096, {"global_batch": 1024}),
    ("dbrx", "dgx-h100", 4096, {"global_batch": 1024}),
    ("mixtral-8x22b", "dgx-h100", 4096, {"global_batch": 1024}),
    ("deepseek-v3", "dgx-h100", 4096, {"global_batch": 1024}),
    ("mixtral-8x7b", "h100-offload-512g", 4096, {"global_batch": 1024}),
    ("mixtral-8x22b", "dgx-h100", 256, {"global_batch": 1024}),
    (
        "deepseek-v3",
        "hgx-h800",
        2048,
        {"global_batch": 15360, "seq_len": 4096, "precision": "fp8"},
    ),
    (
        "deepseek-v3",
        "hgx-h800",
        2048,
        {"global_batch": 15360, "seq_len": 4096, "precision": "fp8", "stack": "hai-llm"},
    ),
)


def solve_once(model: str, system: str, gpus: int, job: dict, units: float) -> tuple[float, str]:
    """(build + solve wall seconds, status name) with a first phase of ``units``."""
    started = time.perf_counter()
    model_spec, system_spec, job_spec = as_model(model), as_system(system), JobSpec(**job)
    ctx = CostContext(model_spec, system_spec, job_spec)
    built = build_plan_model(ctx, build_search_space(model_spec, system_spec, job_spec, gpus, {}))
    solver, status = solve(built, time_limit_s=60.0, first_phase_units=units)
    return time.perf_counter() - started, solver.StatusName(status).lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    budgets = (FIRST_PHASE_DETERMINISTIC_S, EXPERT_FIRST_PHASE_DETERMINISTIC_S)
    print(
        f"{'model':14} {'system':18} {'GPUs':>5} {'stack':13}"
        + "".join(f" {f'{b:g} units s':>13} {'status':>9}" for b in budgets)
        + f" {'ratio':>6}"
    )
    totals = [0.0, 0.0]
    for model, system, gpus, job in PROBLEMS:
        cells = []
        for column, units in enumerate(budgets):
            runs = [solve_once(model, system, gpus, job, units) for _ in range(args.repeats)]
            median_s = statistics.median(t for t, _ in runs)
            totals[column] += median_s
            cells.append((median_s, runs[-1][1]))
        stack = job.get("stack", "megatron-core")
        row = "".join(f" {t:13.2f} {status:>9}" for t, status in cells)
        print(f"{model:14} {system:18} {gpus:5d} {stack:13}{row} {cells[0][0] / cells[1][0]:6.2f}")
    print(
        f"total: {totals[0]:.1f} s at {budgets[0]:g} units, {totals[1]:.1f} s at "
        f"{budgets[1]:g} units (ratio {totals[0] / totals[1]:.2f})"
    )


if __name__ == "__main__":
    main()
