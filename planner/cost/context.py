"""Constants of one (model, system, job, stack) problem that every cost term reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import InputError
from planner.specs import (
    DEFAULT_RELIABILITY,
    JobSpec,
    ModelSpec,
    ReliabilityProfile,
    StackProfile,
    SystemSpec,
)
from planner.specs.reliability import without_failures

BYTES_PER_GIB = float(1 << 30)
ACTIVATION_BYTES = 2
"""Activations and weights are kept in 16-bit (bf16) also under fp8 training, whose fp8 copies
are transient (NVIDIA Transformer Engine keeps bf16 master activations between layers)."""


def _job_stack(job: JobSpec) -> StackProfile:
    import hardware_catalog

    return hardware_catalog.load_stack(job.stack)


def job_reliability(system: SystemSpec, job: JobSpec) -> ReliabilityProfile:
    """The reliability profile a job assumes: the job's (a catalog name or file), else the
    system's (a name, a file or inline), else DEFAULT_RELIABILITY; without failures when the
    job says ``failures: false``. An unknown name is a one-line InputError."""
    import hardware_catalog

    chosen = job.reliability or system.reliability or DEFAULT_RELIABILITY
    profile = (
        chosen
        if isinstance(chosen, ReliabilityProfile)
        else hardware_catalog.load_reliability(chosen)
    )
    return profile if job.failures else without_failures(profile)


@dataclass(frozen=True)
class CostContext:
    """The problem's fixed quantities, in SI units (bytes, FLOP/s, seconds). ``stack`` is the
    training stack's profile: the one the job names unless given (calibration passes trial
    profiles)."""

    model: ModelSpec
    system: SystemSpec
    job: JobSpec
    stack: StackProfile = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.stack is None:
            object.__setattr__(self, "stack", _job_stack(self.job))
        if self.job.precision not in self.system.accelerator.peak_tflops:
            allowed = ", ".join(sorted(self.system.accelerator.peak_tflops))
            raise InputError(
                f"job.precision = {self.job.precision!r}: the accelerator "
                f"{self.system.accelerator.name!r} has no peak for it; allowed: {allowed}"
            )

    @property
    def reliability(self) -> ReliabilityProfile:
        """The job's reliability profile (job_reliability)."""
        return job_reliability(self.system, self.job)

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
        """Achievable HBM bandwidth (the tier's measured efficiency), bytes/s: what the
        optimizer step and offload traffic stream at."""
        hbm = self.system.hbm
        return hbm.bandwidth_gbps * 1e9 * hbm.efficiency

    @property
    def memory_bound_bytes_per_s(self) -> float:
        """What the stack's memory-bound kernels (norms, activations, residual adds, softmax)
        reach: the achievable HBM bandwidth × the stack's memory-bound efficiency."""
        return self.hbm_bytes_per_s * self.stack.memory_bound_efficiency

    @property
    def grad_dtype(self) -> str:
        """The job's gradient precision, else the stack's."""
        return self.job.grad_dtype or self.stack.grad_dtype

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (accumulation and reduction precision)."""
        return 4 if self.grad_dtype == "fp32" else 2

    @property
    def optimizer_bytes_per_param(self) -> int:
        return self.stack.optimizer_bytes_per_param

    @property
    def hbm_reserve_bytes(self) -> float:
        """HBM kept out of the plan: the job's reserve, else the stack's."""
        reserve = self.job.hbm_reserve_gib
        return (self.stack.hbm_reserve_gib if reserve is None else reserve) * BYTES_PER_GIB

    @property
    def hbm_usable_fraction(self) -> float:
        """Share of HBM a plan may fill: the job's, else the stack's."""
        fraction = self.job.hbm_usable_fraction
        return self.stack.hbm_usable_fraction if fraction is None else fraction

    @property
    def flash(self) -> bool:
        """A fused flash kernel; never under Calculon's arithmetic, which materialises the
        attention scores (planner/cost/calculon.py)."""
        return self.job.attention == "flash" and not self.calculon

    @property
    def calculon(self) -> bool:
        """Whether the stack runs Calculon's arithmetic (StackProfile.arithmetic)."""
        return self.stack.arithmetic == "calculon"
