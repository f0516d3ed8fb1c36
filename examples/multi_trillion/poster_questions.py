"""The SC23 multi-trillion poster's questions, answered by planner for the twelve Table II models.

    python examples/multi_trillion/poster_questions.py            # both systems (~10 min)
    python examples/multi_trillion/poster_questions.py --system catalog

For each system — the catalog's h100-offload-512g (calibrated H100 efficiencies) and the same
machine with the poster's own (Calculon) efficiency assumptions — on 16,384 GPUs with a global
batch of 4,096 sequences:

1. the best MFU each model reaches with 80 GiB HBM + 512 GiB offload at 100 GB/s, and the
   largest model that reaches 75 %;
2. the least HBM, then the least offload capacity with that HBM, for 128T at ≥ 75 % MFU (or,
   where 75 % is out of reach, at the best MFU any hardware gives it, rounded down);
3. the least offload bandwidth that keeps each model within 95 % of its step time with an
   unlimited offload bandwidth.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import hardware_catalog
from constraints.tables import with_bandwidth
from constraints.target import PerformanceTarget
from planner.min_hardware import min_hardware
from planner.plan import plan
from planner.specs import JobSpec

HERE = Path(__file__).resolve().parent
GPUS, BATCH = 16384, 4096
MODELS = [
    m.name
    for m in sorted(
        (
            hardware_catalog.load_model(n)
            for n in hardware_catalog.model_names()
            if n.startswith("mt-")
        ),
        key=lambda m: m.params,
    )
]
"""The twelve Table II models, smallest first."""


def systems(which: str):
    catalog = hardware_catalog.load_system("h100-offload-512g")
    poster = hardware_catalog.load_system(str(HERE / "h100-offload-512g-poster-assumptions.yaml"))
    return {"catalog": [catalog], "poster": [poster], "both": [catalog, poster]}[which]


def best_mfu(system) -> dict[str, float | None]:
    print(f"\n## 1. Best MFU on {GPUS:,} GPUs, 80 GiB HBM + 512 GiB offload ({system.name})")
    print("| model | step s | MFU | strategy |\n|---|---|---|---|")
    found = {}
    for name in MODELS:
        result = plan(name, system, JobSpec(global_batch=BATCH), GPUS, diagnose=False)
        if result.estimate is None:
            print(f"| {name} | - | does not fit | |")
            found[name] = None
            continue
        found[name] = result.estimate.mfu
        print(
            f"| {name} | {result.estimate.step_time_s:.1f} | {result.estimate.mfu:.1%} | "
            f"{result.strategy.describe()} |",
            flush=True,
        )
    at_75 = [n for n, mfu in found.items() if mfu is not None and mfu >= 0.75]
    print(f"\nLargest model at ≥ 75 % MFU: {at_75[-1] if at_75 else 'none'}")
    return found


def capacities_for_128t(system) -> None:
    print(f"\n## 2. Memory for mt-128t on {GPUS:,} GPUs ({system.name})")
    roomy = system.model_copy(
        update={
            "memory_tiers": (
                system.memory_tiers[0],
                system.memory_tiers[1].model_copy(update={"capacity_gib": 65536}),
            )
        }
    )
    job = JobSpec(global_batch=BATCH)
    for mfu in (0.75, 0.6, 0.5, 0.4, 0.3):
        target = PerformanceTarget(min_mfu=mfu)
        hbm = min_hardware("mt-128t", roomy, job, "hbm", gpus=GPUS, target=target)
        if hbm.minimum is None:
            print(f"- MFU ≥ {mfu:.0%}: unreachable with any HBM ({hbm.status})")
            continue
        sized = roomy.model_copy(
            update={
                "memory_tiers": (
                    roomy.memory_tiers[0].model_copy(update={"capacity_gib": hbm.minimum.value}),
                    roomy.memory_tiers[1],
                )
            }
        )
        offload = min_hardware("mt-128t", sized, job, "offload-capacity", gpus=GPUS, target=target)
        offload_text = f"{offload.minimum.value:g} GiB" if offload.minimum else "unreachable"
        print(
            f"- MFU ≥ {mfu:.0%}: HBM ≥ {hbm.minimum.value:g} GiB (proven "
            f"{hbm.minimum.proven}), then offload ≥ {offload_text} "
            f"({hbm.minimum.strategy.describe()})"
        )
        return


def offload_bandwidth(system) -> None:
    print(
        f"\n## 3. Offload bandwidth for ≥ 95 % of unlimited-bandwidth performance ({system.name})"
    )
    print("| model | step s at unlimited | least GB/s | step s there |\n|---|---|---|---|")
    job = JobSpec(global_batch=BATCH)
    for name in MODELS:
        unlimited = plan(name, with_bandwidth(system, "offload_bw", 1e5), job, GPUS, diagnose=False)
        if unlimited.estimate is None:
            print(f"| {name} | does not fit | | |")
            continue
        step = unlimited.estimate.step_time_s
        result = min_hardware(
            name,
            system,
            job,
            "offload-bandwidth",
            gpus=GPUS,
            target=PerformanceTarget(max_step_s=step / 0.95),
            bandwidth_range_gbps=(1.0, 1600.0),
        )
        if result.minimum is None:
            print(f"| {name} | {step:.1f} | not within 1-1600 GB/s | |")
            continue
        print(
            f"| {name} | {step:.1f} | {result.minimum.value:g} | "
            f"{result.minimum.estimate.step_time_s:.1f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=["catalog", "poster", "both"], default="both")
    args = parser.parse_args()
    for system in systems(args.system):
        best_mfu(system)
        capacities_for_128t(system)
        offload_bandwidth(system)


if __name__ == "__main__":
    main()
