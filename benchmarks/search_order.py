"""The guided phase's search order: the work each order needs to prove dense plans.

    python benchmarks/search_order.py                       # tp,pp  pp,tp  tp
    python benchmarks/search_order.py pp,tp tp,pp,cp        # any orders of knobs

For the README's main job and the dense scenarios of benchmarks/plan_latency.py --quick, one
guided CP-SAT run per order (planner.queries.solving's guided phase: the order's knobs from their
largest value down, then CP-SAT's heuristics) with a budget of --budget deterministic units,
and the work it took to prove the answer. Deterministic work is the same on any machine and
under any load, so orders compare without timing noise. An order that leaves a problem
unproven within the budget is charged the budget and counted as a failure.
"""

from __future__ import annotations

import argparse

from plan_latency import scenarios

import constraints
import hardware_catalog
from planner.cost.context import CostContext
from planner.queries.solving import Phase, _run
from planner.space.search_space import build_search_space
from planner.specs import JobSpec

MAIN_JOB = ("gpt3-175b", "dgx-a100-80g", 1024, 1536)


def work_units(
    problem: tuple[str, str, int, int], order: tuple[str, ...], budget: float
) -> float | None:
    """Deterministic units a guided run down ``order`` takes to prove ``problem`` (None if it
    does not within ``budget``)."""
    name, system, gpus, batch = problem
    model, system_spec = hardware_catalog.load_model(name), hardware_catalog.load_system(system)
    job = JobSpec(global_batch=batch)
    space = build_search_space(model, system_spec, job, gpus, {})
    constraints.SEARCH_ORDER = order
    built = constraints.build_plan_model(CostContext(model, system_spec, job), space)
    solver, status = _run(built, 60.0, 1, Phase(guided=True, linearization=0, work_limit=budget))
    proven = solver.StatusName(status) in ("OPTIMAL", "INFEASIBLE")
    return solver.deterministic_time if proven else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("orders", nargs="*", default=["tp,pp", "pp,tp", "tp"])
    parser.add_argument("--budget", type=float, default=3.0)
    args = parser.parse_args()
    orders = [tuple(order.split(",")) for order in args.orders]
    problems = [MAIN_JOB] + [
        (name, system, gpus, max(512, gpus // 4))
        for name, system, gpus in scenarios(quick=True)
        if not hardware_catalog.load_model(name).is_moe
    ]
    print(
        f"{'model':15s} {'system':18s} {'GPUs':>6s} "
        + " ".join(f"{','.join(o):>12s}" for o in orders)
    )
    units: dict[tuple[str, ...], list[float | None]] = {order: [] for order in orders}
    for problem in problems:
        row = [work_units(problem, order, args.budget) for order in orders]
        for order, value in zip(orders, row, strict=True):
            units[order].append(value)
        cells = " ".join(f"{'-' if v is None else f'{v:.3f}':>12s}" for v in row)
        print(f"{problem[0]:15s} {problem[1]:18s} {problem[2]:6d} {cells}", flush=True)
    print(f"\n{len(problems)} problems; units to prove (unproven: charged {args.budget:g}):")
    for order, values in units.items():
        charged = [args.budget if v is None else v for v in values]
        failures = sum(v is None for v in values)
        print(
            f"  {','.join(order):14s} total {sum(charged):6.2f}  max {max(charged):5.2f}  "
            f"main job {charged[0]:.3f}  unproven {failures}"
        )


if __name__ == "__main__":
    main()
