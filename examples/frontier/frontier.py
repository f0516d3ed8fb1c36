"""Frontier reproduced (issue 38): Dash et al. 2023's Megatron-DeepSpeed runs on MI250X GCDs.

    python examples/frontier/frontier.py runs     # published configurations: measured vs predicted
    python examples/frontier/frontier.py scaling  # weak and strong scaling efficiencies
    python examples/frontier/frontier.py optimum  # planner's own optimum for the same jobs, and why
    python examples/frontier/frontier.py loo      # the calibrated constant, left out model by model

The runs, their configurations and what was assumed are in
hardware_catalog/calibration/seed_runs.yaml (`planner validate --dataset` reads the same file);
the stack is hardware_catalog/stacks/megatron-deepspeed-rocm.yaml, the system frontier.yaml.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import hardware_catalog
from planner import JobSpec, Strategy, evaluate, plan
from planner.accuracy.calibration import apply_params, fit
from planner.accuracy.validation import load_dataset, predict_step_s

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "hardware_catalog" / "calibration" / "seed_runs.yaml"
MODELS = Path(__file__).resolve().parent / "models"
MODEL_FILES = {"22B": "dash23-22b.yaml", "175B": "dash23-175b.yaml", "1T": "dash23-1t.yaml"}
WEAK = [
    ("175B", "dash23-frontier-175B-128", "dash23-frontier-175B-1024", 1.00),
    ("1T", "dash23-frontier-1T-1024", "dash23-frontier-1T-3072", 1.00),
]
"""(model, base run, weak-scaled run, the paper's weak-scaling efficiency, abstract)."""

STRONG = [
    ("175B", "dash23-frontier-175B-128", 1280, 128, 1024, 0.89),
    ("1T", "dash23-frontier-1T-1024", 3072, 1024, 3072, 0.87),
]
"""(model, run whose replica is kept, ASSUMED fixed global batch, GCDs from, GCDs to, the
paper's strong-scaling efficiency). The abstract gives the efficiencies, not the GCD counts or
the batch: assumed here are the weak-scaling range (128 -> 1,024 and 1,024 -> 3,072 GCDs) at the
base run's global batch (175B: 1,280) or the end point's (1T: 3,072, since DP 6 must divide it)."""

MDS_2023 = {"max_cp": 1, "max_interleave": 1, "pins": {"zero_stage": 1, "dp_overlap": 0}}
"""What Megatron-DeepSpeed offered the paper in 2023: no context parallelism and no interleaving
(DeepSpeed's pipeline engine; assumed from that code), and, whenever pipelined, ZeRO 0-1 with the
gradient all-reduce after the pipeline schedule: deepspeedai/DeepSpeed@03f6f75
deepspeed/runtime/pipe/engine.py asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline
parallelism" and disables the all-reduce in backward ("We schedule the all-reduces")."""


def _runs() -> dict:
    return {run.id: run for run in load_dataset(DATASET).runs}


def _model_key(run_id: str) -> str:
    return next(key for key in MODEL_FILES if f"-{key}" in run_id)


def _model(run_id: str) -> str:
    return str(MODELS / MODEL_FILES[_model_key(run_id)])


def _job(run, global_batch: int | None = None) -> JobSpec:
    return run.job.model_copy(update={"global_batch": global_batch or run.job.global_batch})


def _predict(run, strategy: Strategy | None = None, global_batch: int | None = None) -> float:
    return evaluate(
        _model(run.id), "frontier", _job(run, global_batch), strategy or run.strategy
    ).step_time_s


def _share_of_peak(run, step_s: float) -> float:
    """The paper's metric: Megatron-DeepSpeed's throughput_calculator FLOPs (96·B·s·l·h²·(1 +
    s/6h + V/16lh), recompute counted) per GCD per second over 191.5 TF."""
    measured = run.measured_raw["fraction_of_peak"]
    return measured * run.measured_step_time_s / step_s


def runs() -> None:
    """Measured vs predicted step time and share of peak, under each published configuration."""
    print(
        "run                        GCDs  strategy                       measured  predicted"
        "   error  % of peak meas./pred."
    )
    for run in _runs().values():
        s = run.strategy
        step = _predict(run)
        error = step / run.measured_step_time_s - 1
        knobs = f"tp{s.tp} pp{s.pp} dp{s.dp} mb{s.micro_batch} ZeRO-{s.zero_stage} {s.recompute}"
        print(
            f"{run.id:26} {run.gpus:5}  {knobs:29} {run.measured_step_time_s:8.1f} s"
            f" {step:8.1f} s  {error:+6.1%}  {run.measured_raw['fraction_of_peak']:6.2%}"
            f" / {_share_of_peak(run, step):6.2%}"
        )


def scaling() -> None:
    """The paper's weak and strong scaling efficiencies against planner's."""
    all_runs = _runs()
    print("weak scaling (global batch grows with DP; efficiency = per-GCD throughput ratio)")
    for key, base_id, big_id, paper in WEAK:
        base, big = all_runs[base_id], all_runs[big_id]
        predicted = _predict(base) / _predict(big)
        print(
            f"  {key:5} {base.gpus:5} -> {big.gpus:5} GCDs: paper {paper:.0%}, planner"
            f" {predicted:.1%}"
        )
    print(
        "strong scaling (global batch fixed; efficiency = T(n0)·n0 / (T(n1)·n1); GCD range and"
        " batch ASSUMED)"
    )
    for key, run_id, batch, small, large, paper in STRONG:
        run = all_runs[run_id]
        replica = run.strategy.tp * run.strategy.pp
        times = {}
        for gpus in (small, large):
            strategy = run.strategy.model_copy(update={"dp": gpus // replica})
            times[gpus] = _predict(run, strategy, batch)
        predicted = times[small] * small / (times[large] * large)
        print(
            f"  {key:5} batch {batch:5}, {small:5} -> {large:5} GCDs: paper {paper:.0%},"
            f" planner {predicted:.1%} ({times[small]:.1f} s -> {times[large]:.1f} s)"
        )


def _why(published, best) -> str:
    """The breakdown terms that moved most between the published strategy and the optimum."""
    a, b = published.breakdown_s, best.breakdown_s
    deltas = sorted(((a[k] - b[k], k) for k in a), reverse=True)
    return ", ".join(f"{k} {a[k]:.0f}->{b[k]:.0f} s" for d, k in deltas[:3] if abs(d) >= 0.5)


def optimum() -> None:
    """planner plan for each published job: the proven optimum, unrestricted and within what
    Megatron-DeepSpeed offered in 2023, against the published configuration."""
    for run in _runs().values():
        job, model = _job(run), _model(run.id)
        published = evaluate(model, "frontier", job, run.strategy)
        print(
            f"{run.id} ({run.gpus} GCDs, global batch {job.global_batch}):"
            f" published {run.strategy.describe()}: {published.step_time_s:.1f} s"
        )
        for label, limits in (("planner's optimum", {}), ("within MDS-2023", MDS_2023)):
            result = plan(model, "frontier", job, gpus=run.gpus, **limits)
            best = result.estimate
            speedup = published.step_time_s / best.step_time_s
            print(
                f"  {label:17} {result.strategy.describe()}: {best.step_time_s:.1f} s"
                f" ({result.status}), {speedup:.2f}x faster; {_why(published, best)}"
            )


def loo() -> None:
    """The stack's one calibrated constant (gemm_efficiency), fitted from its prior 1.0 on all
    runs and on all but one model's runs, that model's runs predicted by the latter fit."""
    stack = hardware_catalog.load_stack("megatron-deepspeed-rocm")
    prior = stack.model_copy(update={"gemm_efficiency": 1.0})
    all_runs = list(_runs().values())
    params, _ = fit(all_runs, prior, free=["gemm_efficiency"])
    print(f"fitted on all {len(all_runs)} runs: gemm_efficiency {params['gemm_efficiency']:.3f}")
    for key in MODEL_FILES:
        left_out = [run for run in all_runs if _model_key(run.id) == key]
        kept = [run for run in all_runs if _model_key(run.id) != key]
        params, _ = fit(kept, prior, free=["gemm_efficiency"])
        fitted = apply_params(prior, params)
        errors = ", ".join(
            f"{run.id} {predict_step_s(run, fitted) / run.measured_step_time_s - 1:+.1%}"
            for run in left_out
        )
        print(f"  {key:5} left out: fit {params['gemm_efficiency']:.3f} on the others; {errors}")


def main(argv: list[str] | None = None) -> None:
    """Run the command named on the command line: usage errors exit 2, ``--help`` exits 0
    (argparse's conventions)."""
    commands = {"runs": runs, "scaling": scaling, "optimum": optimum, "loo": loo}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command",
        choices=list(commands),
        help="runs: measured vs predicted; scaling: weak and strong scaling; optimum: planner's "
        "own optimum; loo: the calibrated constant, left out model by model",
    )
    commands[parser.parse_args(argv).command]()


if __name__ == "__main__":
    main()
