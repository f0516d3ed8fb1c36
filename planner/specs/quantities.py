"""The names the CLI offers as choices, in a module of their own so that building the argument
parser imports neither the solver, the cost model nor matplotlib: the hardware quantities a
minimum-hardware query can minimise (with their units), the plot kinds, the parameters
``planner calibrate`` fits, and the search's default caps (planner.space.search_space applies them;
the CLI's help states them)."""

from __future__ import annotations

QUANTITIES: dict[str, str] = {
    "gpus": "GPUs",
    "hbm": "GiB",
    "offload-capacity": "GiB",
    "offload-bandwidth": "GB/s",
    "scale-out-bandwidth": "GB/s",
    "cost": "USD",
    "checkpoint-bandwidth": "GB/s",
}

SWEEP_BACKENDS = ("local", "ray")
"""Where ``planner sweep --backend`` runs scenarios: this machine's processes, or Ray
(planner.studies.ray_backend)."""

PLOT_KINDS = (
    "mfu-vs-gpus",
    "mfu-vs-model",
    "breakdown",
    "memory",
    "offload-bandwidth",
    "least-hardware",
    "goodput-vs-gpus",
)
"""What ``planner plot --kind`` draws (planner.studies.plots.KINDS)."""

CALIBRATED_PARAMETERS = (
    "gemm_efficiency",
    "attention_efficiency",
    "memory_bound_efficiency",
    "layer_overhead_us",
    "tp_overlap_contention",
    "dp_overlap_contention",
    "message_overhead_us",
)
"""What ``planner calibrate`` can fit of a stack profile
(planner.accuracy.calibration.PARAMETERS)."""

LAUNCH_FORMATS = ("megatron", "nemo", "torchtitan", "axonn")
"""The launch configurations ``--emit`` writes and ``evaluate --from`` reads
(planner.launch.FORMATS)."""

MIN_CP_CHUNK_TOKENS = 1024
"""Default floor of the sequence chunk a context-parallel rank holds (s/cp): the default
``max_cp`` is s/1024. Each ring step's K/V transfer hides under the attention of one chunk, which
shrinks as (s/cp)² while the transfer shrinks as s/cp, so short chunks leave the ring exposed;
published CP runs use chunks of 4,096 (Llama 3.1 8B–405B at 8k on NeMo, cp 2) to 8,192 tokens
(Llama 3 405B at 128k, cp 16; Dubey et al. 2024 §3.3.2). The cap is stated with every plan and
``--max-cp`` moves it: each cp value multiplies the solver's tables (the README's main job solves
in ~0.2 s with cp ≤ 2, ~1 s with all 11 values up to 1,024)."""

DEFAULT_MAX_STAGE_SKEW = 4
"""Default of ``max_stage_skew``: the last stage holds at most 4 blocks fewer than the others.
A lighter last stage pays for the LM head (its time is V/(12·h) blocks' worth: 0.35 for GPT-3
175B, 2.6 for Llama 3 8B) and its logits; each further block of skew moves 1/(p − 1) block onto
every other stage, slower and fuller. The cap keeps the layouts per pp to a few (without it,
pp = 2 alone has L/2) and is stated with every plan that it cuts."""

OFFLOAD_STEPS = 8
"""Offload fractions come in steps of 1/8 of a tensor class (planner.specs re-exports it)."""
DEFAULT_OFFLOAD_STEP = 4
"""The offload shares ``plan`` searches by default, in eighths: halves of each tensor class.
benchmarks/latency_battery.py --quick (146 problems, 2 cores, 2026-11), every answer proven in
each case: whole classes p50 0.38 s, p99 1.3 s, max 5.0 s; halves 0.45 s, 3.0 s, 5.4 s; quarters
0.58 s, 4.8 s, 7.6 s. Over halves the README's main job is a space of 3.2·10⁹ proven in 0.9 s.
Finer steps on request (``--offload-step 1/4`` or ``1/8``: over eighths, mt-1t on 16,384 GPUs
of h100-offload-512g is still unproven after 20 s). ``--top K`` ranks structures by default, so
near-identical shares are variants of one rank rather than ranks of their own
(planner.queries.ranking)."""
OFFLOAD_STEP_CHOICES = ("1/8", "1/4", "1/2", "1")
"""The steps ``--offload-step`` takes (each divides a whole class into equal shares)."""


def is_eighths(fraction: float) -> bool:
    """Whether ``fraction`` is a multiple of 1/8 in (0, 1]: an offload share."""
    eighths = fraction * OFFLOAD_STEPS
    return 0 < eighths <= OFFLOAD_STEPS and float(eighths).is_integer()


def parse_eighths(text: str) -> int:
    """``0.375`` or ``3/8`` → 3: an offload fraction in eighths; ValueError unless a multiple
    of 1/8 in (0, 1]."""
    numerator, slash, denominator = text.strip().partition("/")
    try:
        fraction = float(numerator) / (float(denominator) if slash else 1.0)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{text!r} is not a fraction") from None
    if not is_eighths(fraction):
        raise ValueError(f"{text} is not a multiple of 1/{OFFLOAD_STEPS} in (0, 1]: 0.125, ..., 1")
    return int(fraction * OFFLOAD_STEPS)
