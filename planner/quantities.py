"""The names the CLI offers as choices, in a module of their own so that building the argument
parser imports neither the solver, the cost model nor matplotlib: the hardware quantities a
minimum-hardware query can minimise (with their units), the plot kinds, and the parameters
``planner calibrate`` fits."""

from __future__ import annotations

QUANTITIES: dict[str, str] = {
    "gpus": "GPUs",
    "hbm": "GiB",
    "offload-capacity": "GiB",
    "offload-bandwidth": "GB/s",
    "scale-out-bandwidth": "GB/s",
    "cost": "USD",
}

PLOT_KINDS = ("mfu-vs-gpus", "breakdown", "memory", "offload-bandwidth", "offload-capacity")
"""What ``planner plot --kind`` draws (planner.plot.KINDS)."""

CALIBRATED_PARAMETERS = (
    "gemm_efficiency",
    "attention_efficiency",
    "memory_bound_efficiency",
    "layer_overhead_us",
    "tp_overlap_contention",
)
"""What ``planner calibrate`` can fit of a stack profile (planner.calibration.PARAMETERS)."""

LAUNCH_FORMATS = ("megatron", "nemo", "torchtitan")
"""The launch configurations ``--emit`` writes and ``evaluate --from`` reads
(planner.launch.FORMATS)."""
