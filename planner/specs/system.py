"""The hardware system (SystemSpec): the accelerator's peaks and measured GEMM and attention curves,
the memory tiers (HBM first, then offload tiers) and the network tiers (scale-up domain first)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from planner.specs import limits as lim
from planner.specs.base import Spec
from planner.specs.precision import PeakFormat
from planner.specs.reliability import ReliabilityProfile

ProfileName = Annotated[str, Field(min_length=1, max_length=4096)]
"""A catalog name or a spec file's path."""


class MatmulEfficiencyPoint(Spec):
    """One point of a matmul efficiency curve: a GEMM of ``gflop`` GFLOP runs at ``efficiency``
    of the accelerator's peak. Between points the curve is linear in log10(FLOPs)."""

    gflop: float = Field(ge=lim.MIN_GFLOP, le=lim.MAX_GFLOP)
    efficiency: float = Field(ge=lim.MIN_EFFICIENCY, le=1)


class AttentionKernelPoint(Spec):
    """A measured attention kernel at one sequence length: the fraction of the bf16 peak its
    forward and backward passes reach on causal attention, FLOPs counted as FlashAttention's
    benchmarks count them (forward 4·s²·d per head, halved for the causal mask; backward 2.5 ×
    the forward). Between points the curve is linear in log2(sequence length)."""

    seq_len: int = Field(gt=0, le=lim.MAX_SEQ_LEN)
    forward: float = Field(ge=lim.MIN_EFFICIENCY, le=1)
    backward: float = Field(ge=lim.MIN_EFFICIENCY, le=1)


class AcceleratorSpec(Spec):
    """One accelerator (one GPU, or one GCD of a multi-die package): what the hardware does with
    raw kernels. What a training stack reaches of it lives in its StackProfile."""

    name: str
    peak_tflops: dict[PeakFormat, float]
    """Dense (not sparse) tensor-core peaks by format at the datasheet's boost clock."""
    matmul_efficiency: tuple[MatmulEfficiencyPoint, ...] = Field(min_length=1)
    matmul_efficiency_scale: dict[PeakFormat, float] = Field(default_factory=dict)
    """Per format, the measured large-GEMM plateau of that format over the bf16 plateau (e.g.
    best-shape fp8 / bf16 matmul efficiency): the ``matmul_efficiency`` curve, measured in
    bf16, times this factor is the format's curve. A format not listed: 1 (the bf16 curve)."""
    block_scaling: bool = False
    """Tensor cores that apply per-block scales in the GEMM (MXFP8, NVFP4: Blackwell)."""
    tdp_w: float | None = Field(default=None, gt=0, le=lim.MAX_POWER_W)
    """Board power at which the datasheet peaks hold (the part's TDP)."""
    power_cap_w: float | None = Field(default=None, gt=0, le=lim.MAX_POWER_W)
    """Configured power limit (``nvidia-smi -pl``) when below ``tdp_w``."""
    idle_power_w: float = Field(default=0.0, ge=0, le=lim.MAX_POWER_W)
    """Board power with no kernel running (static power, HBM and board), measured; 0 where
    unmeasured. Only the power above it scales with the clock (clock_fraction)."""
    power_exponent: float = Field(default=3.0, ge=1, le=4)
    """α in (P − idle_power_w) ∝ throughput^α for a compute-bound kernel under DVFS: 3 where
    unmeasured (P ∝ C·V²·f with V ∝ f), the measured value where a duty-cycle experiment gives
    one (benchmarks/gpu/power_duty.py)."""
    sustained_clock_fraction: float | None = Field(default=None, ge=0.1, le=1)
    """Measured sustained tensor-core clock over the datasheet boost clock under training load;
    overrides the power-cap relation (clock_fraction)."""
    attention_kernels: dict[str, tuple[AttentionKernelPoint, ...]] = Field(default_factory=dict)
    """Fused (flash) attention kernels measured on this accelerator, by name (``flash2``,
    ``flash3``, ``cudnn``, ``triton``): the stack's ``attention_kernel`` picks one. A stack
    whose kernel is not listed runs its attention core on the matmul curve."""

    @property
    def clock_fraction(self) -> float:
        """Fraction of the datasheet compute peaks the tensor cores sustain, relative to the
        part at its TDP: the measured ``sustained_clock_fraction`` if given; else, with a
        ``power_cap_w`` below ``tdp_w``,

            ((cap − idle_power_w) / (tdp − idle_power_w))^(1 / power_exponent)

        — a GEMM that holds the board at its TDP holds it at the cap instead, and only the
        power above idle scales with the clock, as throughput^α (α = 3 and idle 0, the cube law,
        where the accelerator gives no measurement); else 1. It scales every compute-bound rate
        (GEMMs, attention kernels); HBM-bound kernels keep their speed. The stack profiles are
        calibrated on parts at their TDP, which already throttle there under a sustained GEMM
        (an H100 SXM holds 683 of the 795 TFLOP/s it reaches unthrottled,
        benchmarks/gpu/results/power_duty_h100.json), so only the ratio to the TDP matters."""
        if self.sustained_clock_fraction is not None:
            return self.sustained_clock_fraction
        if self.power_cap_w is None or self.tdp_w is None:
            return 1.0
        if self.power_cap_w >= self.tdp_w:
            return 1.0
        above_idle = (self.power_cap_w - self.idle_power_w) / (self.tdp_w - self.idle_power_w)
        return max(0.0, above_idle) ** (1 / self.power_exponent)

    @model_validator(mode="after")
    def _idle_below_limits(self) -> AcceleratorSpec:
        for field, watts in (("tdp_w", self.tdp_w), ("power_cap_w", self.power_cap_w)):
            if watts is not None and self.idle_power_w >= watts:
                raise ValueError(
                    f"idle_power_w {self.idle_power_w:g} must be below {field} {watts:g}"
                )
        lowest_w = self.lowest_power_cap_w
        if self.power_cap_w is not None and lowest_w is not None and self.power_cap_w < lowest_w:
            raise ValueError(
                f"power_cap_w = {self.power_cap_w:g} W: allowed range is [{lowest_w:g}, "
                f"{lim.MAX_POWER_W:g}] W ({lim.MIN_POWER_CAP_FRACTION:g} of tdp_w "
                f"{self.tdp_w:g} W, about the lowest a driver accepts, and above idle_power_w "
                f"{self.idle_power_w:g} W)"
            )
        return self

    @property
    def lowest_power_cap_w(self) -> float | None:
        """The lowest power limit this accelerator takes: MIN_POWER_CAP_FRACTION of its TDP
        (None without a TDP); the idle power must also lie below the limit."""
        return None if self.tdp_w is None else lim.MIN_POWER_CAP_FRACTION * self.tdp_w

    def matmul_scale(self, fmt: str) -> float:
        """The format's GEMM plateau over bf16's (matmul_efficiency_scale; 1 if unlisted)."""
        return self.matmul_efficiency_scale.get(fmt, 1.0)

    @field_validator("attention_kernels")
    @classmethod
    def _sorted_kernels(cls, value: dict[str, tuple[AttentionKernelPoint, ...]]):
        for name, points in value.items():
            lengths = [point.seq_len for point in points]
            if not lengths or lengths != sorted(set(lengths)):
                raise ValueError(
                    f"attention_kernels.{name}: give points with strictly increasing seq_len"
                )
        return value

    @field_validator("peak_tflops")
    @classmethod
    def _positive_peaks(cls, value: dict[str, float]) -> dict[str, float]:
        if "bf16" not in value:
            raise ValueError("peak_tflops must give at least 'bf16'")
        for precision, tflops in value.items():
            lim.check_range(f"peak_tflops.{precision}", tflops, lim.MIN_TFLOPS, lim.MAX_TFLOPS)
        return value

    @field_validator("matmul_efficiency_scale")
    @classmethod
    def _scales(cls, value: dict[str, float]) -> dict[str, float]:
        for fmt, scale in value.items():
            lim.check_range(f"matmul_efficiency_scale.{fmt}", scale, lim.MIN_EFFICIENCY, 2.0)
        return value

    @field_validator("matmul_efficiency")
    @classmethod
    def _sorted_curve(cls, value: tuple[MatmulEfficiencyPoint, ...]):
        sizes = [point.gflop for point in value]
        if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
            raise ValueError("matmul_efficiency points must have strictly increasing gflop")
        return value


class MemoryTierSpec(Spec):
    """A memory tier. Tier 0 is HBM; tiers ≥ 1 are offload tiers (host DDR, CXL, network memory).

    ``capacity_gib`` and ``bandwidth_gbps`` are per GPU; bandwidth is per direction (reads and
    writes proceed concurrently, as on PCIe/CXL links). ``efficiency`` is the achievable fraction
    of the bandwidth.
    """

    name: str
    capacity_gib: float = Field(ge=lim.MIN_CAPACITY_GIB, le=lim.MAX_CAPACITY_GIB)
    bandwidth_gbps: float = Field(ge=lim.MIN_BANDWIDTH_GBPS, le=lim.MAX_BANDWIDTH_GBPS)
    efficiency: float = Field(default=1.0, ge=lim.MIN_EFFICIENCY, le=1)


class NetworkTierSpec(Spec):
    """A network tier. Tier 0 is the scale-up domain (NVLink, Infinity Fabric); the last tier is
    scale-out (InfiniBand, Slingshot). ``domain_gpus`` is how many GPUs one domain of this tier
    joins (None: the whole system; the last tier always spans the whole system).
    ``bandwidth_gbps`` is per GPU per direction."""

    name: str
    domain_gpus: int | None = Field(default=None, gt=0, le=lim.MAX_GPUS)
    bandwidth_gbps: float = Field(ge=lim.MIN_BANDWIDTH_GBPS, le=lim.MAX_BANDWIDTH_GBPS)
    latency_us: float = Field(default=0.0, ge=0, le=lim.MAX_LATENCY_US)
    efficiency: float = Field(default=1.0, ge=lim.MIN_EFFICIENCY, le=1)


class StepEfficiency(Spec):
    """One row of a Calculon efficiency table: an operation of at least ``at_least`` (GFLOP for
    the compute engines, MB = 1e6 bytes for the memories) runs at ``efficiency``."""

    at_least: float = Field(ge=0, le=lim.MAX_GFLOP)
    efficiency: float = Field(ge=lim.MIN_EFFICIENCY, le=1)


def _ascending(name: str, value: tuple[StepEfficiency, ...]) -> tuple[StepEfficiency, ...]:
    sizes = [row.at_least for row in value]
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] != 0:
        raise ValueError(f"calculon.{name}: rows with strictly increasing at_least, the first 0")
    return value


class CalculonTables(Spec):
    """The numbers of a Calculon system file (calculon-ai/calculon systems/*.json) that only
    the Calculon arithmetic (StackProfile.arithmetic = "calculon", planner/cost/calculon.py)
    reads: step tables of efficiency by operation size (Calculon's processor.py
    Processor.efficiency and memory.py Memory.efficiency: the row of the largest ``at_least``
    the operation reaches), its vector unit, and per network tier the share of the processor a
    collective takes while overlapped (network.py processor_usage) and the all-reduce size
    offset (network.py Network.time: size·(1 + offset/g)). The peaks, bandwidths, network
    efficiencies and latencies are the system's own fields."""

    matrix_efficiency: tuple[StepEfficiency, ...]
    vector_tflops: float = Field(ge=lim.MIN_TFLOPS, le=lim.MAX_TFLOPS)
    vector_efficiency: tuple[StepEfficiency, ...]
    hbm_efficiency: tuple[StepEfficiency, ...]
    offload_efficiency: tuple[StepEfficiency, ...]
    processor_usage: tuple[float, ...]
    all_reduce_offset: tuple[float, ...]

    @field_validator(
        "matrix_efficiency", "vector_efficiency", "hbm_efficiency", "offload_efficiency"
    )
    @classmethod
    def _tables(cls, value: tuple[StepEfficiency, ...], info) -> tuple[StepEfficiency, ...]:
        return _ascending(info.field_name, value)

    @field_validator("processor_usage")
    @classmethod
    def _usage(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        for usage in value:
            lim.check_range("calculon.processor_usage", usage, 0.0, 0.99)
        return value


class SystemSpec(Spec):
    """A machine: accelerator, memory tiers (HBM first) and network tiers (fastest first)."""

    name: str = "custom"
    description: str = ""
    accelerator: AcceleratorSpec
    memory_tiers: tuple[MemoryTierSpec, ...] = Field(min_length=1, max_length=lim.MAX_MEMORY_TIERS)
    network_tiers: tuple[NetworkTierSpec, ...] = Field(
        min_length=1, max_length=lim.MAX_NETWORK_TIERS
    )
    gpus_per_node: int = Field(default=8, gt=0, le=lim.MAX_GPUS)
    max_gpus: int | None = Field(default=None, gt=0, le=lim.MAX_GPUS)
    gpu_hour_usd: float | None = Field(default=None, gt=0, le=lim.MAX_GPU_HOUR_USD)
    tp_across_domain: bool = False
    calculon: CalculonTables | None = None
    """Calculon's system-file tables, for the Calculon arithmetic (None: this system has none)."""
    reliability: ProfileName | ReliabilityProfile | None = None
    """Failure rates, checkpoint storage and restart costs of the cluster (planner.specs.
    reliability): a catalog name (``planner catalog reliability``), a profile file, or the
    profile inline; None: the default profile (h100-llama3, H100-era rates calibrated on
    Meta's Llama 3 405B run)."""
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_tiers(self) -> SystemSpec:
        sizes = [tier.domain_gpus for tier in self.network_tiers]
        bounded = [size for size in sizes[:-1] if size is not None]
        if len(bounded) != len(sizes) - 1:
            raise ValueError("network_tiers: every tier but the last needs domain_gpus")
        if bounded != sorted(bounded) or len(set(bounded)) != len(bounded):
            raise ValueError("network_tiers: domain_gpus must grow strictly from tier to tier")
        tables = self.calculon
        if tables is not None and not (
            len(tables.processor_usage) == len(tables.all_reduce_offset) == len(sizes)
        ):
            raise ValueError(
                "calculon.processor_usage and calculon.all_reduce_offset: one value per network "
                f"tier ({len(sizes)})"
            )
        return self

    @property
    def hbm(self) -> MemoryTierSpec:
        return self.memory_tiers[0]

    @property
    def offload_tiers(self) -> tuple[MemoryTierSpec, ...]:
        return self.memory_tiers[1:]

    @property
    def scale_up_gpus(self) -> int:
        """GPUs in one scale-up domain (the first network tier); the whole system if unbounded."""
        return self.network_tiers[0].domain_gpus or (self.max_gpus or 1 << 30)
