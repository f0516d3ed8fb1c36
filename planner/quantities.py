"""The hardware quantities a minimum-hardware query can minimise, with their units (a module of
its own so that the CLI can offer them as choices without importing the solver)."""

from __future__ import annotations

QUANTITIES: dict[str, str] = {
    "gpus": "GPUs",
    "hbm": "GiB",
    "offload-capacity": "GiB",
    "offload-bandwidth": "GB/s",
    "scale-out-bandwidth": "GB/s",
    "cost": "USD",
}
