"""Randomized latency battery: does the solve stay fast and proven off the catalog?

    python benchmarks/latency_battery.py                    # 300 instances, seed 0
    python benchmarks/latency_battery.py --quick            # 50 instances
    python benchmarks/latency_battery.py --count 50 --seed 3 --time-limit 10

Each instance draws, from a seeded generator: a model (a catalog model, or a custom shape of
1B to 128T parameters: heads, head width, layers, GQA, FFN kind and width, vocabulary), a system
(a catalog system with its efficiencies, bandwidths and capacities perturbed, sometimes with an
offload tier added), a GPU count (8 to 65,536, powers of two and three-times-powers), a global
batch (64 to 65,536), a sequence (2k to 128k: context parallelism up to s/1024 is searched),
precision (a catalog recipe the accelerator runs: bf16, the fp8 recipes, MXFP8/NVFP4 on
block-scaling parts), gradient dtype (fp32/bf16) and software
stack (any catalog profile). Inputs that fail validation are redrawn. Each is planned once
with plan() (diagnose=False), followed by the 96 questions of the multi-trillion study
(study_instances), and the battery prints the share proven (optimal, or infeasible: a proof too),
the share left unproven (feasible or unknown at the time limit), p50/p99/max wall time,
and the slowest instances with everything needed to reproduce them.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from timing import timed

import hardware_catalog
from planner.errors import InputError
from planner.queries.plan import plan
from planner.specs import JobSpec, MemoryTierSpec, ModelSpec, SystemSpec

SHOWN_SLOWEST = 8
QUICK_COUNT = 50
POSTER = "h100-offload-512g-poster"
"""The SC23 poster's H100 (Calculon's efficiencies: matmul 0.95, no stack penalty)."""


@dataclass(frozen=True)
class Instance:
    model: ModelSpec
    system: SystemSpec
    job: JobSpec
    gpus: int

    def describe(self) -> str:
        m, s, j = self.model, self.system, self.job
        shape = (
            f"{m.name}[h={m.hidden} L={m.layers} a={m.heads} kv={m.kv_heads} "
            f"f={m.ffn_hidden} {m.ffn_kind} V={m.vocab}]"
        )
        hbm, net = s.hbm, s.network_tiers
        system = (
            f"{s.name}[hbm={hbm.capacity_gib:.0f}GiB off="
            + ",".join(f"{t.capacity_gib:.0f}GiB@{t.bandwidth_gbps:.0f}" for t in s.offload_tiers)
            + f" up={net[0].bandwidth_gbps:.0f} out={net[-1].bandwidth_gbps:.0f}]"
        )
        return (
            f"{shape} {system} gpus={self.gpus} B={j.global_batch} s={j.seq_len} "
            f"{j.precision} grad={j.grad_dtype}"
        )


def random_model(rng: random.Random) -> ModelSpec:
    """A catalog model, or a custom decoder shape of roughly 1B to 128T parameters."""
    if rng.random() < 0.35:
        return hardware_catalog.load_model(rng.choice(hardware_catalog.model_names()))
    while True:
        heads = rng.choice([16, 24, 32, 40, 48, 64, 96, 128, 160, 256, 384, 512, 768, 1024])
        head_dim = rng.choice([64, 96, 128, 128, 160, 256])
        hidden = heads * head_dim
        layers = rng.choice([12, 16, 24, 30, 32, 40, 48, 60, 64, 70, 80, 96, 105, 126, 128, 160])
        layers = rng.choice([layers, layers * 2, min(480, layers * 3)])
        kind = rng.choice(["gelu", "swiglu"])
        ffn = 4 * hidden if kind == "gelu" else 256 * round(8 * hidden / 3 / 256)
        kv = rng.choice([heads, heads, 8, 4, 1]) if heads % 8 == 0 else heads
        model = ModelSpec(
            name="custom",
            hidden=hidden,
            layers=layers,
            heads=heads,
            kv_heads=kv,
            ffn_hidden=ffn,
            ffn_kind=kind,
            vocab=rng.choice([32000, 50257, 51200, 128256, 256000]),
        )
        if 1e9 <= model.params <= 1.3e14:
            return model


def _scaled(value: float, rng: random.Random, low: float, high: float) -> float:
    return value * 2 ** rng.uniform(low, high)


def random_system(rng: random.Random) -> SystemSpec:
    """A catalog system with its matmul curve ×0.7–1.2 (≤ 1), bandwidths ×1/4–4, capacities
    ×1/2–4, and in a third of the cases an offload tier added (or its numbers redrawn)."""
    base = hardware_catalog.load_system(
        rng.choice([*(n for n in hardware_catalog.system_names() if n != POSTER), POSTER])
    )
    factor = rng.uniform(0.7, 1.2)
    curve = tuple(
        point.model_copy(update={"efficiency": min(1.0, point.efficiency * factor)})
        for point in base.accelerator.matmul_efficiency
    )
    accelerator = base.accelerator.model_copy(update={"matmul_efficiency": curve})
    tiers = [
        tier.model_copy(
            update={
                "capacity_gib": _scaled(tier.capacity_gib, rng, -1, 2),
                "bandwidth_gbps": _scaled(tier.bandwidth_gbps, rng, -2, 2),
            }
        )
        for tier in base.memory_tiers
    ]
    if len(tiers) == 1 and rng.random() < 0.33:
        tiers.append(
            MemoryTierSpec(
                name="offload",
                capacity_gib=rng.choice([128, 256, 512, 1024, 4096]),
                bandwidth_gbps=rng.choice([25, 50, 100, 200, 400]),
            )
        )
    network = [
        tier.model_copy(
            update={
                "bandwidth_gbps": _scaled(tier.bandwidth_gbps, rng, -2, 2),
                "efficiency": min(1.0, tier.efficiency * rng.uniform(0.7, 1.2)),
            }
        )
        for tier in base.network_tiers
    ]
    return base.model_copy(
        update={
            "accelerator": accelerator,
            "memory_tiers": tuple(tiers),
            "network_tiers": tuple(network),
            "name": f"{base.name}~",
        }
    )


def precisions(system: SystemSpec) -> list[str]:
    """The catalog's precision recipes the accelerator runs: its GEMM format has a peak, and
    block scaling (MXFP8, NVFP4) where the recipe needs it."""
    accelerator = system.accelerator
    return [
        name
        for name in hardware_catalog.precision_names()
        for recipe in (hardware_catalog.load_precision(name),)
        if recipe.gemm_format in accelerator.peak_tflops
        and (accelerator.block_scaling or not recipe.needs_block_scaling)
    ]


def random_instance(rng: random.Random) -> Instance:
    while True:
        model, system = random_model(rng), random_system(rng)
        gpus = rng.choice([1, 3]) * 2 ** rng.randint(3, 16)
        if gpus > 65536 or (system.max_gpus and gpus > system.max_gpus):
            continue
        job = JobSpec(
            global_batch=rng.choice([1, 3]) * 2 ** rng.randint(6, 16),
            seq_len=2 ** rng.randint(11, 17),
            precision=rng.choice(precisions(system)),
            grad_dtype=rng.choice(["fp32", "bf16"]),
            stack=rng.choice(hardware_catalog.stack_names()),
        )
        if job.global_batch <= 65536:
            return Instance(model, system, job, gpus)


def study_instances() -> list[Instance]:
    """The multi-trillion study's own questions (examples/multi_trillion): every mt-* model on
    16,384 GPUs of the poster's system and of the catalog's, at global batch 4,096 and 16,384,
    with fp32 and bf16 gradients. The stall that prompted this battery was one of them."""
    systems = [hardware_catalog.load_system(name) for name in (POSTER, "h100-offload-512g")]
    models = [
        hardware_catalog.load_model(name)
        for name in hardware_catalog.model_names()
        if name.startswith("mt-")
    ]
    return [
        Instance(model, system, JobSpec(global_batch=batch, grad_dtype=grad), 16384)
        for model in models
        for system in systems
        for batch in (4096, 16384)
        for grad in ("fp32", "bf16")
    ]


def solve_once(instance: Instance, time_limit_s: float) -> tuple[str, float]:
    """(plan()'s status, or "input-error" if it refused the input; wall time in s)."""

    def attempt() -> str:
        try:
            return plan(
                instance.model,
                instance.system,
                instance.job,
                instance.gpus,
                diagnose=False,
                time_limit_s=time_limit_s,
            ).status
        except InputError:  # e.g. a space too large to tabulate: an answer too
            return "input-error"

    status, elapsed_s, _ = timed(1, attempt)
    return status, elapsed_s


def report(statuses: Sequence[str], times: Sequence[float], described: Sequence[str]) -> None:
    """Print the status shares, p50/p99/max wall time and the slowest instances."""
    proven = sum(s in ("optimal", "infeasible", "input-error") for s in statuses)
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(
        "statuses: "
        + ", ".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses)))
        + f"; proven (optimal or infeasible, or refused as too large): "
        f"{proven / len(statuses):.1%}"
    )
    print(
        f"wall time per plan: p50 {statistics.median(times):.3f} s, p99 {p99:.3f} s, "
        f"max {max(times):.3f} s; total {sum(times):.0f} s"
    )
    print("slowest:")
    rows = sorted(zip(times, statuses, described, strict=True), reverse=True)
    for elapsed, status, text in rows[:SHOWN_SLOWEST]:
        print(f"  {elapsed:7.3f} s {status:11s} {text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_COUNT} random instances")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--verbose", action="store_true", help="one line per instance")
    parser.add_argument(
        "--no-study", action="store_true", help="leave out the multi-trillion study's 96"
    )
    args = parser.parse_args()
    count = QUICK_COUNT if args.quick else args.count
    rng = random.Random(args.seed)
    instances = [random_instance(rng) for _ in range(count)]
    if not args.no_study:
        instances += study_instances()
    statuses, times = [], []
    for index, instance in enumerate(instances):
        status, elapsed_s = solve_once(instance, args.time_limit)
        statuses.append(status)
        times.append(elapsed_s)
        if args.verbose:
            print(f"{index:4d} {elapsed_s:7.3f} s {status:11s} {instance.describe()}", flush=True)
    print(
        f"instances: {len(instances)} ({count} random, seed {args.seed}; "
        f"{len(instances) - count} from the multi-trillion study; time limit "
        f"{args.time_limit:g} s)"
    )
    report(statuses, times, [instance.describe() for instance in instances])


if __name__ == "__main__":
    main()
