"""Constants of one (model, system, job, stack) problem that every cost term reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from planner.errors import InputError
from planner.specs import (
    DEFAULT_RELIABILITY,
    AcceleratorSpec,
    JobSpec,
    ModelSpec,
    PrecisionRecipe,
    ReliabilityProfile,
    StackProfile,
    SystemSpec,
)
from planner.specs.reliability import without_failures

BYTES_PER_GIB = float(1 << 30)

ROBUST_NETWORK_SCALE = 1.35
"""The factor a robust plan slows every cross-domain message by: the collective model's mean
absolute error on 1-64 MiB messages (TP activations, pipeline sends, small buckets) against the
published nccl-tests curves, 34 % (`planner validate --network`, hardware_catalog/calibration/
nccl_tests.yaml), rounded up."""
ACTIVATION_BYTES = 2
"""Activations and weights are kept in 16-bit (bf16) also under fp8 training, whose fp8 copies
are transient (NVIDIA Transformer Engine keeps bf16 master activations between layers)."""


def _job_stack(job: JobSpec) -> StackProfile:
    import hardware_catalog

    return hardware_catalog.load_stack(job.stack)


def load_recipe(name: str) -> PrecisionRecipe:
    """The precision recipe of a name (hardware_catalog/precisions/)."""
    import hardware_catalog

    return hardware_catalog.load_precision(name)


def unsupported_because(recipe: PrecisionRecipe, accelerator: AcceleratorSpec) -> str | None:
    """Why an accelerator cannot run a recipe (None: it can): no peak for the recipe's GEMM
    format, or no block-scaled tensor cores for an MX/NVFP4 recipe."""
    if recipe.gemm_format not in accelerator.peak_tflops:
        return f"no {recipe.gemm_format} peak"
    if recipe.needs_block_scaling and not accelerator.block_scaling:
        return "no block-scaled tensor cores (MXFP8/NVFP4 need Blackwell)"
    return None


def check_precision(job: JobSpec, accelerator: AcceleratorSpec) -> PrecisionRecipe:
    """The job's recipe, or a one-line InputError naming the field, the value and the recipes
    this accelerator runs (or, with ``fp8_params``, the recipes that keep parameters in their
    format)."""
    import hardware_catalog

    recipe = load_recipe(job.precision)
    why = unsupported_because(recipe, accelerator)
    if why is not None:
        allowed = [
            name
            for name in hardware_catalog.precision_names()
            if unsupported_because(load_recipe(name), accelerator) is None
        ]
        also = f" (alias {', '.join(recipe.aliases)})" if recipe.aliases else ""
        raise InputError(
            f"job.precision = {job.precision!r}{also}: the accelerator {accelerator.name!r} has "
            f"{why}; allowed here: {', '.join(allowed)}"
        )
    if job.fp8_params and recipe.param_bytes is None:
        able = [n for n in hardware_catalog.precision_names() if load_recipe(n).param_bytes]
        raise InputError(
            f"job.fp8_params = true: precision {job.precision!r} keeps no parameters in a "
            f"low-precision format; allowed with fp8_params: {', '.join(able)}"
        )
    return recipe


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
    network_scale: float = field(default=None)  # type: ignore[assignment]
    """How much slower than the model's nominal figure every message that leaves a scale-up
    domain is taken to be: its scale-out bandwidths divided by it, latencies multiplied
    (planner/cost/network.py). 1 unless the job is robust (ROBUST_NETWORK_SCALE); the
    uncertainty range evaluates both ends with it (planner/cost/uncertainty.py)."""

    def __post_init__(self) -> None:
        if self.stack is None:
            object.__setattr__(self, "stack", _job_stack(self.job))
        if self.network_scale is None:
            scale = ROBUST_NETWORK_SCALE if self.job.robust else 1.0
            object.__setattr__(self, "network_scale", scale)
        check_precision(self.job, self.system.accelerator)

    @property
    def reliability(self) -> ReliabilityProfile:
        """The job's reliability profile (job_reliability)."""
        return job_reliability(self.system, self.job)

    @property
    def seq_len(self) -> int:
        return self.job.seq_len_for(self.model)

    @cached_property
    def recipe(self) -> PrecisionRecipe:
        """The job's precision recipe (JobSpec.precision)."""
        return load_recipe(self.job.precision)

    @property
    def low_precision_share(self) -> float:
        """Share of the blocks whose linear layers run in the recipe's format: (L − first −
        last)/L with the job's (else the recipe's) bf16 first and last blocks; 0 under bf16.
        The bf16 blocks are spread over the average block (a stage holding them is slower by
        their extra time; the stage layout does not see it)."""
        if not self.recipe.low_precision:
            return 0.0
        first = self.job.bf16_first_blocks
        last = self.job.bf16_last_blocks
        first = self.recipe.bf16_first_blocks if first is None else first
        last = self.recipe.bf16_last_blocks if last is None else last
        layers = self.model.layers
        return max(0, layers - first - last) / layers

    @property
    def peak_flops(self) -> float:
        """Dense datasheet peak of the recipe's GEMM format, FLOP/s: the denominator of MFU,
        and the rate no GEMM exceeds (the bounds of the solver and the queries)."""
        return self.system.accelerator.peak_tflops[self.recipe.gemm_format] * 1e12

    @property
    def bf16_peak_flops(self) -> float:
        """The bf16 dense datasheet peak, FLOP/s."""
        return self.system.accelerator.peak_tflops["bf16"] * 1e12

    @property
    def gemm_rate_flops(self) -> float:
        """What the low-precision linear GEMMs run at before the matmul curve: the format's
        peak × its plateau over bf16's (AcceleratorSpec.matmul_efficiency_scale) × the
        sustained clock fraction (AcceleratorSpec.clock_fraction)."""
        accel = self.system.accelerator
        return self.peak_flops * accel.matmul_scale(self.recipe.gemm_format) * accel.clock_fraction

    @property
    def bf16_rate_flops(self) -> float:
        """What bf16 GEMMs and attention kernels run at before their curves: the bf16 peak ×
        the sustained clock fraction."""
        return self.bf16_peak_flops * self.system.accelerator.clock_fraction

    @property
    def fused_elementwise(self) -> bool:
        """Whether the norms, activation and rotary run fused: the stack's hand-fused kernels,
        or torch.compile (the job's choice, else the stack's default)."""
        compiled = self.stack.compile if self.job.compile is None else self.job.compile
        return self.stack.fused_kernels or compiled

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
