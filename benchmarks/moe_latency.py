"""Solve latency of mixture-of-experts plans: one model over the whole space against the space
split by expert-parallel size, in one run.

    python benchmarks/moe_latency.py                        # eight problems, 1 repeat (~1 min)
    python benchmarks/moe_latency.py --repeats 3
    python benchmarks/moe_latency.py --whole-units 1.5 40   # the whole model's first-phase budgets

Expert parallelism multiplies the plan's search space by the expert layouts (ep × expert TP).
``plan`` solves such a space in parts, one dense model per ep value, the largest first, each
after the first held below the best objective so far (planner.queries.solving.expert_parts,
solve_parts); ``--top``, the minimum-hardware queries and the diagnosis solve one model of the
whole space, whose propagation phase has planner.queries.solving.EXPERT_FIRST_PHASE_DETERMINISTIC_S
of work before the LP (``--whole-units`` compares other budgets). For each problem this prints the
build + solve wall time (median over ``--repeats``) and status of each way, the ratio of the
first whole-space column to the parts, and that all reach the same objective.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

from ortools.sat.python import cp_model

from constraints import build_plan_model
from planner.cost.context import CostContext
from planner.queries.evaluate import as_model, as_system
from planner.queries.solving import (
    EXPERT_FIRST_PHASE_DETERMINISTIC_S,
    SOLVED,
    expert_parts,
    solve,
    solve_parts,
)
from planner.space.search_space import build_search_space
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


def solve_whole(model: str, system: str, gpus: int, job: dict, units: float):
    """(build + solve wall seconds, status name, objective) of one model of the whole space with
    a first phase of ``units``."""
    started = time.perf_counter()
    ctx, space = _problem(model, system, gpus, job)
    built = build_plan_model(ctx, space)
    solver, status = solve(built, time_limit_s=60.0, first_phase_units=units)
    objective = solver.ObjectiveValue() if status in SOLVED else None
    return time.perf_counter() - started, solver.StatusName(status).lower(), objective


def solve_split(model: str, system: str, gpus: int, job: dict):
    """(build + solve wall seconds, status name, objective) of the space in parts, one per ep,
    as plan solves it; the status names the models solved."""
    started = time.perf_counter()
    ctx, space = _problem(model, system, gpus, job)
    parts = expert_parts(space)
    solved = solve_parts(lambda part: build_plan_model(ctx, part), parts, time_limit_s=60.0)
    objective = solved.solver.ObjectiveValue() if solved.status in SOLVED else None
    name = cp_model.CpSolver().StatusName(solved.status).lower()
    return time.perf_counter() - started, f"{name}/{solved.models}", objective


def _problem(model: str, system: str, gpus: int, job: dict):
    model_spec, system_spec, job_spec = as_model(model), as_system(system), JobSpec(**job)
    ctx = CostContext(model_spec, system_spec, job_spec)
    return ctx, build_search_space(model_spec, system_spec, job_spec, gpus, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--whole-units",
        type=float,
        nargs="+",
        default=[EXPERT_FIRST_PHASE_DETERMINISTIC_S],
        help="first-phase budgets of the whole-space model, one column each",
    )
    args = parser.parse_args()
    ways = [
        (f"whole {units:g}u", functools.partial(solve_whole, units=units))
        for units in args.whole_units
    ]
    ways.append(("per ep", solve_split))
    print(
        f"{'model':14} {'system':18} {'GPUs':>5} {'stack':13}"
        + "".join(f" {name + ' s':>12} {'status':>11}" for name, _ in ways)
        + f" {'ratio':>6} same"
    )
    totals = [0.0] * len(ways)
    for model, system, gpus, job in PROBLEMS:
        cells, objectives = [], set()
        for column, (_, way) in enumerate(ways):
            runs = [way(model, system, gpus, job) for _ in range(args.repeats)]
            median_s = statistics.median(t for t, _, _ in runs)
            totals[column] += median_s
            cells.append((median_s, runs[-1][1]))
            objectives |= {objective for _, _, objective in runs}
        stack = job.get("stack", "megatron-core")
        row = "".join(f" {t:12.2f} {status:>11}" for t, status in cells)
        ratio = cells[0][0] / cells[-1][0]
        same = "yes" if len(objectives) == 1 else "NO"
        print(f"{model:14} {system:18} {gpus:5d} {stack:13}{row} {ratio:6.2f} {same}")
    print(
        "total: "
        + ", ".join(f"{name} {total:.1f} s" for (name, _), total in zip(ways, totals, strict=True))
    )


if __name__ == "__main__":
    main()
