"""Constants of one (model, system, job) problem that every cost term reads."""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InputError
from planner.specs import JobSpec, ModelSpec, SystemSpec

BYTES_PER_GIB = float(1 << 30)
ACTIVATION_BYTES = 2
"""Activations and weights are kept in 16-bit (bf16) also under fp8 training, whose fp8 copies
are transient (NVIDIA Transformer Engine keeps bf16 master activations between layers)."""
OPTIMIZER_BYTES_PER_PARAM = 12
"""Mixed-precision Adam: fp32 master weights + two fp32 moments (Rajbhandari et al. 2020)."""


@dataclass(frozen=True)
class CostContext:
    """The problem's fixed quantities, in SI units (bytes, FLOP/s, seconds)."""

    model: ModelSpec
    system: SystemSpec
    job: JobSpec

    def __post_init__(self) -> None:
        if self.job.precision not in self.system.accelerator.peak_tflops:
            allowed = ", ".join(sorted(self.system.accelerator.peak_tflops))
            raise InputError(
                f"job.precision = {self.job.precision!r}: the accelerator "
                f"{self.system.accelerator.name!r} has no peak for it; allowed: {allowed}"
            )

    @property
    def seq_len(self) -> int:
        return self.job.seq_len_for(self.model)

    @property
    def peak_flops(self) -> float:
        """Dense matrix peak for the job's precision, FLOP/s."""
        return self.system.accelerator.peak_tflops[self.job.precision] * 1e12

    @property
    def bf16_peak_flops(self) -> float:
        """The bf16 dense peak, FLOP/s: the denominator of MFU and HFU."""
        return self.system.accelerator.peak_tflops["bf16"] * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        """Achievable HBM bandwidth, bytes/s."""
        hbm = self.system.hbm
        return hbm.bandwidth_gbps * 1e9 * hbm.efficiency

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (accumulation and reduction precision)."""
        return 4 if self.job.grad_dtype == "fp32" else 2

    @property
    def flash(self) -> bool:
        return self.job.attention == "flash"
