"""The stated range of every number a user can pass (spec fields and CLI flags).

Each range is finite and checked before any heavy work, so that no input can overflow the
solver's 64-bit integer arithmetic, make a domain enumeration run for minutes, or slip through as
infinity or NaN. The bounds sit far outside every published configuration (noted per bound), so
they cut no real question; a value outside one is an input error naming the field and the range.

The CP-SAT model multiplies memory (KiB per GPU, at most ``MAX_CAPACITY_GIB`` · 2 per tier) by
coefficients up to about 2·layers² (the pipeline-flush scaling in constraints/memory.py), and
step-time units by coefficients up to layers²: ``MAX_LAYERS`` and ``MAX_CAPACITY_GIB`` are chosen
together so that those products stay inside CP-SAT's signed 64-bit range (checked again when the
model is built: constraints.check_int64_range).
"""

from __future__ import annotations

MAX_GPUS = 1 << 20
"""1,048,576 accelerators: 10× the largest announced training clusters (~100k GPUs, 2024-25)."""
MAX_GLOBAL_BATCH = 1 << 20
"""Sequences per step; GPT-3 used 1,536, Llama 3 405B at most 16M tokens (4,096 × 4k)."""
MAX_SEQ_LEN = 1 << 24
"""16,777,216 tokens per sequence; the longest published training contexts are 1M tokens."""
MAX_LAYERS = 1024
"""Transformer blocks; the largest model of the multi-trillion study (128T) has 480."""
MAX_HIDDEN = 1 << 20
"""Hidden, FFN and head widths; the 128T model's hidden is 148,480, its FFN 593,920."""
MAX_HEADS = 1 << 16
"""Attention heads (and KV heads); the 128T model has 1,160."""
MAX_EXPERTS = 1 << 14
"""Experts per mixture-of-experts block; DeepSeek-V3 routes over 256, the largest published
fine-grained MoE designs over a few thousand."""
MAX_EXPERT_IMBALANCE = 16.0
"""Busiest expert-parallel rank's tokens over the mean; past 16 a plan is not a plan."""
MAX_VOCAB = 1 << 24
"""Vocabulary entries; the largest published vocabularies are ~256k."""
MAX_CAPACITY_GIB = 65536.0
"""64 TiB per GPU in one memory tier (HBM today: ≤ 288 GiB; host DDR / CXL per GPU: ≤ a few TiB)."""
MAX_BANDWIDTH_GBPS = 1e6
"""1 PB/s per GPU per direction (HBM3e: 8 TB/s; NVLink 5: 900 GB/s)."""
MIN_BANDWIDTH_GBPS = 0.1
"""100 MB/s per GPU per direction, a 1 Gb/s Ethernet port: any memory or network tier. The
slowest catalog tier is Frontier's Slingshot share, 6.5 GB/s per GCD. Below it a step time
is dominated by traffic that no plan can hide, and subnormal bandwidths make the cost model's
times infinite."""
MAX_LATENCY_US = 1e6
"""One second of network latency."""
MAX_TFLOPS = 1e6
"""1 EFLOP/s per accelerator (B200 dense fp8: 4,500 TFLOP/s)."""
MIN_TFLOPS = 0.1
"""100 GFLOP/s: a laptop CPU core's worth; the slowest catalog peak is 191.5 TFLOP/s (MI250X
GCD)."""
MAX_GFLOP = 1e9
"""Largest GEMM of a matmul-efficiency curve (an exaFLOP)."""
MIN_GFLOP = 1e-6
"""Smallest GEMM of a matmul-efficiency curve (a thousand FLOPs; the catalog starts at 0.1)."""
MIN_EFFICIENCY = 0.01
"""Smallest share of a peak any efficiency may state (matmul curve points, attention kernels,
memory and network tiers, a stack's GEMM / attention / memory-bound shares): 1 %. The lowest
in the catalog is 0.04 (B200's 0.1-GFLOP GEMM); calibration searches from 0.1 up. A share of
1e-300 is no measurement, and makes every time the cost model computes infinite."""
MIN_CAPACITY_GIB = 0.001
"""About 1 MiB: the smallest memory tier (per GPU) a system or an override may state."""
MIN_USABLE_FRACTION = 0.1
"""Smallest share of HBM a plan may be told to fill (the default is 0.95; Fujii et al. 2024's
safe share is ~0.8)."""
MIN_DP_BUCKET_PARAMS = 1e4
"""Smallest data-parallel bucket (parameters): Megatron-Core's default is 40M; below 10k a
step would pay a ring latency per few kilobytes."""
MAX_TRAIN_TOKENS = 1e18
"""Token budget; the largest published budgets are ~3·10^13 (36T tokens)."""
MIN_TRAIN_TOKENS = 1.0
"""A token budget of less than one token is no budget (1e-300 overflowed a deadline's bound)."""
MAX_STEP_TIME_S = 1e9
"""Performance target: ~32 years per step."""
MIN_STEP_TIME_S = 1e-6
"""Performance target: a microsecond per step, far below any training step (a kernel launch
takes several); subnormal bounds made the fewest-GPUs bound model FLOPs / (peak · bound)
overflow."""
MIN_MFU = 1e-4
"""Performance target: an MFU of at least 0.01 %; smaller ones made the step · GPUs budget
model FLOPs / (peak · MFU) overflow."""
MAX_DAYS = 1e5
"""Deadline for a token budget: ~274 years."""
MIN_DAYS = 1e-3
"""Deadline for a token budget: 86.4 s."""
MAX_BANDWIDTH_SPAN = 1024.0
"""HIGH / LOW of a minimum-bandwidth query's grid (--bandwidth-range): 81 levels at 8 per
doubling, the default span (current / 64 to × 16); a wider grid's tables outgrow the model."""
MAX_TIME_LIMIT_S = 86400.0
"""Solver time limit: one day."""
MAX_WORK_UNITS = 86400.0
"""Solver work limit, in CP-SAT deterministic units (about a second each): a day of work."""
DEFAULT_WORK_UNITS = 60.0
"""Default work budget of one query (a plan with its ``--top`` ranks; a plan's diagnosis
shares what is left of it), in CP-SAT deterministic time units, charged per CP-SAT run
(planner.queries.solving.Budget). A work limit stops a search at the same point on any machine under
any load, so the same input gives the same answer; the wall clock limits a search only where
the user sets one. A unit is roughly a second of search on one core at rest, but CP-SAT does
not count loading a model (the diagnosis's free-GPU-count model over mt-128t: 0.3 units of
search after 5 s of loading); 60 units replaced the old wall-clock default of 60 s."""
MAX_TOP = 100
"""Alternatives listed by ``plan --top``: each costs one more (warm-started) solve."""
MAX_MEMORY_TIERS = 8
MAX_NETWORK_TIERS = 8
MAX_JOBS = 1024
"""Worker processes of a sweep."""
MAX_SCENARIOS = 1_000_000
"""Scenarios in one study (the product of its axes): past this, split the study."""
DEFAULT_MAX_SCENARIOS = 10_000
"""Scenarios ``planner sweep`` runs unless --max-scenarios lifts it (up to MAX_SCENARIOS): a
plan takes seconds, so 10,000 are hours of one worker's time, and a study of 1,000,000 was
accepted only to report "about 1074 h left"."""
MAX_GPU_HOUR_USD = 1e6
MAX_USD = 1e12
"""Dollar amounts in a dataset or a cost query."""
MAX_POWER_W = 10_000.0
"""Largest board power (TDP, power limit, idle power) a spec may give, in W per GPU."""
MIN_POWER_CAP_FRACTION = 0.25
"""Lowest power limit a spec or ``--power-cap-w`` may set, as a share of the accelerator's TDP
(and above its idle power): a stated planner bound, about the lowest limit NVIDIA's drivers
accept (recalled, not measured here: A100 SXM 100 of 400 W, H100 SXM 200 of 700 W; nvidia-smi
reports it as power.min_limit). Below it the cube law would extrapolate to a clock near zero: a
cap of 1e-9 W planned steps of hours at 0.0 % MFU."""
MIN_STORAGE_GBPS = 0.01
"""10 MB/s: the slowest checkpoint storage or host link (per node or per GPU) a reliability
profile may state, a USB 2 stick's speed (the catalog's is 50 GB/s per node). Below it a
checkpoint's write and read times leave the floating-point range (1e-300 GB/s overflowed the
goodput model)."""


def check_range(field: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    """Raise ValueError with one line naming ``field``, ``value`` and the allowed range unless
    ``low`` ≤ value ≤ ``high`` (``low`` < value with ``low_open``); NaN and ±inf fail too."""
    inside = (low < value if low_open else low <= value) and value <= high
    if not inside:  # also catches NaN, which compares false
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{field} = {value!r}: allowed range is {bracket}{_plain(low)}, {_plain(high)}]"
        )


def _plain(number: float) -> str:
    """1048576 rather than 1.04858e+06; 1e+18 and 0.5 as they are."""
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e7 else f"{number:g}"
