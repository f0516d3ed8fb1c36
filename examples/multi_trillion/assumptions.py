"""Which assumption moves which number: the poster's (Calculon's) assumptions turned into
planner's one at a time, and the takeaways' numbers measured at each step.

    python examples/multi_trillion/assumptions.py            # ~2 minutes on 2 cores
    python examples/multi_trillion/assumptions.py --json out.json

The poster's assumptions are the catalog system ``h100-offload-512g-poster`` (Calculon's H100
file) with the stack ``calculon``; planner's are ``h100-offload-512g`` (measured H100 curves)
with ``megatron-core`` (fitted to published Megatron-Core/NeMo runs). They differ in the
assumptions (ASSUMPTIONS). For each number the takeaways turn on (NUMBERS: MFU of the plans at
16,384 GPUs and the 1T model's scaling), the script reports

- **alone**: the number with only that assumption switched to planner's (the rest the poster's);
- **path**: the change when it is switched after the ones above it — these steps add up exactly
  to the whole difference between the two assumption sets (the order is the table's).

Every number is a proven-optimal plan (the strategy is re-chosen under each assumption set, as a
user of either model would). Nothing here is fitted: the stacks and systems are catalog files.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

import hardware_catalog
from planner import plan
from planner.specs import JobSpec, StackProfile, SystemSpec

POSTER_SYSTEM, PLANNER_SYSTEM = "h100-offload-512g-poster", "h100-offload-512g"
POSTER_STACK, PLANNER_STACK = "calculon", "megatron-core"


@dataclass(frozen=True)
class Assumption:
    """One difference between the two assumption sets: system fields or stack fields."""

    label: str
    system_fields: tuple[str, ...] = ()
    """SystemSpec paths (``accelerator.peak_tflops``, ``memory_tiers.0``, ``network_tiers``)."""
    stack_fields: tuple[str, ...] = ()


ASSUMPTIONS = (
    Assumption(
        "arithmetic (Calculon's own, planner/cost/calculon.py → planner's)",
        system_fields=("calculon",),
        stack_fields=("arithmetic",),
    ),
    Assumption(
        "pipeline messages (never hidden, Calculon → hidden under the passes with interleaving; "
        "a model chunk's schedule step 0 → 200 µs)",
        stack_fields=("pp_overlap", "pp_chunk_overhead_us"),
    ),
    Assumption(
        "TP placement (any network tier, Calculon → inside the NVLink domain)",
        system_fields=("tp_across_domain",),
    ),
    Assumption(
        "GEMM curve (0.95 from 128 GFLOP → measured, ≤ 0.80) and peak (1,000 → 989 TFLOP/s)",
        system_fields=("accelerator.matmul_efficiency", "accelerator.peak_tflops"),
    ),
    Assumption(
        "stack's share of the GEMM curve (1 → 0.825, fitted)", stack_fields=("gemm_efficiency",)
    ),
    Assumption(
        "attention (matmul curve → cuDNN fused kernel as measured × 1.0)",
        system_fields=("accelerator.attention_kernels",),
        stack_fields=("attention_kernel", "attention_efficiency"),
    ),
    Assumption(
        "TP overlap (perfect → 50 % of hidden time still exposed)",
        stack_fields=("tp_overlap_contention",),
    ),
    Assumption(
        "DP overlap (perfect → 25 % of hidden time still exposed)",
        stack_fields=("dp_overlap_contention",),
    ),
    Assumption(
        "per-block work (none → 347 µs per block and micro-batch; memory-bound kernels at "
        "1.0 → 0.80 of the achievable HBM bandwidth, fitted)",
        stack_fields=("layer_overhead_us", "memory_bound_efficiency"),
    ),
    Assumption(
        "HBM bandwidth (3,072 × 1.0 → 3,350 × 0.88 GB/s)", system_fields=("memory_tiers.0",)
    ),
    Assumption(
        "network (NVLink efficiency 0.65 → 0.80, InfiniBand 0.90 → 0.93; latency 10 / 20 → "
        "3 / 5 µs)",
        system_fields=("network_tiers",),
    ),
    Assumption(
        "offload link efficiency (Calculon's 0.95 → measured)", system_fields=("memory_tiers.1",)
    ),
    Assumption("gradients (bf16 → fp32 buffers and reduction)", stack_fields=("grad_dtype",)),
    Assumption(
        "DP collectives (one ring per buffer → Megatron-Core's buckets, one per layer under ZeRO-3 "
        "(Megatron-FSDP), each ring's latency shown)",
        stack_fields=(
            "dp_collective_unit",
            "zero3_collective_unit",
            "dp_bucket_params",
            "dp_bucket_params_per_rank",
        ),
    ),
    Assumption(
        "HBM a plan may fill (all 80 GiB → 95 % less a 2 GiB reserve)",
        stack_fields=("hbm_reserve_gib", "hbm_usable_fraction"),
    ),
    Assumption(
        "resident blocks of an offloaded kind (Calculon's 1 of activations, 2 of weights and "
        "optimizer state → Transformer Engine's double buffer, 2)",
        stack_fields=("offload_resident_blocks",),
    ),
    Assumption(
        "activation and logit bytes (16-bit GEMM inputs, fp32 logits → fp8 GEMM inputs under "
        "fp8, Transformer Engine's in-place bf16 logits)",
        stack_fields=("fp8_activations", "logits_bytes"),
    ),
)


@dataclass(frozen=True)
class Number:
    """A number a takeaway turns on: the MFU of the best plan of ``model`` on ``gpus``."""

    label: str
    model: str
    gpus: int
    global_batch: int = 4096


NUMBERS = (
    Number("mt-11t MFU on 16,384 GPUs (largest model at 75 %)", "mt-11t", 16384),
    Number("mt-18t MFU on 16,384 GPUs", "mt-18t", 16384),
    Number("mt-1t MFU on 16,384 GPUs (1T at 16k)", "mt-1t", 16384),
    Number("mt-1t MFU on 4,096 GPUs", "mt-1t", 4096),
)


def _with_fields(spec: SystemSpec | StackProfile, other, paths: tuple[str, ...]):
    """``spec`` with each dotted path taken from ``other`` (a field, or one tier of a tuple)."""
    data = spec.model_dump()
    source = other.model_dump()
    for path in paths:
        *parents, last = path.split(".")
        target, origin = data, source
        for part in parents:
            if isinstance(target[part], tuple):
                target[part] = list(target[part])
            target, origin = target[part], origin[part]
        key = int(last) if last.isdigit() else last
        target[key] = origin[key]
    return type(spec).model_validate(data)


def _mixed(switched: list[Assumption], folder: Path) -> tuple[SystemSpec, str]:
    """The poster's system and stack with ``switched`` assumptions taken from planner's; the
    stack written to a file (a job names its stack by name or path)."""
    system = hardware_catalog.load_system(POSTER_SYSTEM)
    stack = hardware_catalog.load_stack(POSTER_STACK)
    planner_system = hardware_catalog.load_system(PLANNER_SYSTEM)
    planner_stack = hardware_catalog.load_stack(PLANNER_STACK)
    for assumption in switched:
        system = _with_fields(system, planner_system, assumption.system_fields)
        stack = _with_fields(stack, planner_stack, assumption.stack_fields)
    path = folder / f"stack-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(stack.model_dump(mode="json"), allow_unicode=True))
    return system, str(path)


def _mfu(number: Number, system: SystemSpec, stack: str) -> float | None:
    job = JobSpec(global_batch=number.global_batch, stack=stack)
    result = plan(number.model, system, job, number.gpus, diagnose=False)
    return result.estimate.mfu if result.estimate is not None else None


def measure(progress: Callable[[str], None] = print) -> dict:
    """{"numbers": [...], "rows": [{"assumption", "alone": [...], "path": [...]}], "poster",
    "planner"}: MFU values (None where nothing fits), in NUMBERS' order."""
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)

        def values(switched: list[Assumption]) -> list[float | None]:
            system, stack = _mixed(switched, where)
            return [_mfu(n, system, stack) for n in NUMBERS]

        poster = values([])
        progress(f"poster's assumptions: {_show(poster)}")
        rows, path_before = [], poster
        for index, assumption in enumerate(ASSUMPTIONS):
            alone = values([assumption])
            path = values(list(ASSUMPTIONS[: index + 1]))
            rows.append({"assumption": assumption.label, "alone": alone, "path": path})
            progress(f"{assumption.label}: alone {_show(alone)}; path {_show(path)}")
            path_before = path
        planner_values = [
            _mfu(n, hardware_catalog.load_system(PLANNER_SYSTEM), PLANNER_STACK) for n in NUMBERS
        ]
        if planner_values != path_before:  # every difference is in ASSUMPTIONS
            raise AssertionError(f"the path ends at {path_before}, planner gives {planner_values}")
    return {
        "numbers": [n.label for n in NUMBERS],
        "poster": poster,
        "planner": planner_values,
        "rows": rows,
    }


def _show(values: list[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:.1%}" for v in values)


def markdown(result: dict) -> str:
    """Two tables: the number with each assumption alone switched, and the path's steps."""

    def points(value: float | None, base: float | None) -> str:
        if value is None:
            return "does not fit"
        if base is None:
            return f"{value:.1%}"
        return f"{value:.1%} ({100 * (value - base):+.1f})"

    head = "| assumption switched to planner's | " + " | ".join(result["numbers"]) + " |"
    rule = "|---|" + "---|" * len(result["numbers"])
    poster = (
        "| none (poster's assumptions) | "
        + " | ".join(points(v, None) for v in result["poster"])
        + " |"
    )
    alone = [head, rule, poster]
    for row in result["rows"]:
        cells = [points(v, b) for v, b in zip(row["alone"], result["poster"], strict=True)]
        alone.append(f"| {row['assumption']} | " + " | ".join(cells) + " |")
    path = [head.replace("assumption switched", "then switched"), rule, poster]
    before = result["poster"]
    for row in result["rows"]:
        cells = [points(v, b) for v, b in zip(row["path"], before, strict=True)]
        path.append(f"| + {row['assumption']} | " + " | ".join(cells) + " |")
        before = row["path"]
    return "\n".join(
        ["One at a time (from the poster's):", "", *alone, "", "Cumulative:", "", *path]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    args = parser.parse_args()
    result = measure()
    print()
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
