"""The integer scales of the CP-SAT model: the time unit (a millionth of the ideal step, finer with
many micro-batches) and the memory unit (1 KiB, doubled until every scaled memory inequality
stays inside 64 bits), with the ceilings and margins that keep every table entry exact or safely
clipped."""

from __future__ import annotations

import math

from constraints.variables import INT_LIMIT

KIB = 1024.0


NEED_CAP_BYTES = float(1 << 46)
"""A strategy needing more than 64 TiB per GPU in one tier is out of the model (it keeps the
scaled memory inequalities inside 64-bit integers; planner.specs.limits.MAX_CAPACITY_GIB is the same
64 TiB). Memory table entries are clipped just above the largest capacity when every fit family
is on, else just above this cap, so that a clipped entry never fits: clipping at anything lower
(the model clipped at 2 TiB before) lets a minimum-hardware query take a strategy needing
2.9 TiB of HBM for one needing the clip, 2.1 TiB, and report a minimum that plan then refutes."""


UNITS_PER_IDEAL_STEP = 1e6
"""Time resolution: the ideal step (model FLOPs at peak on the largest GPU count considered) is
10^6 units, so the objective's rounding error stays orders of magnitude below the 0.1 % the
planner promises."""


FLOOR_MARGIN = 1e-2
"""Lower bounds on a GPU count that plan is held to (min_hardware's compute and memory floors,
the diagnosis's candidate counts) are lowered by 1 %: the tables round each term to its unit
(< 0.1 % of the step, DESIGN.md §5), so plan may accept a count a hair under the exact floor."""


TIME_CEILING_IDEAL_STEPS = 1e5
"""Time table entries are clipped at 10^5 ideal steps (an MFU below 10^-5: never a plan)."""


EXACT_MICRO_BATCHES = 256
"""Micro-batches per step up to which the plain resolution holds. The per-micro-batch DP
tables (ZeRO-2/3 transfers, ring latencies) are rounded to the unit and then multiplied by the
n micro-batches (constraints.objective), so each errs by up to n/2 units: at n = 16,384 (batch
16,384 on 8 GPUs with dp = 1) ZeRO-3's per-micro-batch latencies rounded to 0 units and the
objective fell 0.18 % short of the evaluation. time_scale makes the unit finer by n/256."""


def time_scale(micro_batches: int) -> int:
    """How many times finer than 10^-6 ideal steps the time unit is for a space of up to
    ``micro_batches`` micro-batches per step: ⌈n/EXACT_MICRO_BATCHES⌉, so that n half-units
    stay within 128·10^-6 of an ideal step; at most what keeps n times the time ceiling a
    quarter of CP-SAT's integer range (the n·x products of constraints.objective)."""
    wanted = -(-micro_batches // EXACT_MICRO_BATCHES)
    ceiling = UNITS_PER_IDEAL_STEP * TIME_CEILING_IDEAL_STEPS
    room = int(INT_LIMIT // (4 * micro_batches * ceiling))
    return max(1, min(wanted, room))


MEMORY_PRODUCT_LIMIT = 1 << 61
"""Largest magnitude a scaled memory inequality may reach (a quarter of CP-SAT's int64 range)."""


def memory_unit_bytes(ceiling_bytes: float, layers: int, max_pp: int) -> float:
    """The memory resolution of a problem: 1 KiB, doubled until the largest scaled memory
    inequality fits in ``MEMORY_PRODUCT_LIMIT``. constraints/memory.py multiplies a table entry
    (at most the ceiling) by the micro-batches in flight (≤ pp) and by L·(p·v + p − 1) ≤ 2·L²,
    so the product is at most 2·L²·pp·ceiling/unit. Entries round up, so a coarser unit only
    ever rejects a plan within one unit per table entry of a capacity (1 KiB on every catalog
    problem; 16 KiB for a 480-layer model with a free 128 TiB tier)."""
    worst = 2.0 * layers**2 * max_pp * ceiling_bytes / KIB
    doublings = max(0, math.ceil(math.log2(worst / MEMORY_PRODUCT_LIMIT))) if worst > 0 else 0
    return KIB * 2.0**doublings


HARDWARE_KNOBS = {"offload_bw": "offload-bandwidth", "scale_out_bw": "scale-out-bandwidth"}
"""Bandwidths a minimum-hardware query can make decisions, each with the system quantity it
sets (planner.specs.hardware.with_quantity): the first offload tier's, and the scale-out (last)
network tier's, per GPU per direction."""
