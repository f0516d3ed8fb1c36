"""Immutable input specifications: model, hardware system, training job, execution strategy.

One module each (model, system, job with its stack profile, strategy, reliability: failure
rates, checkpoint storage and restart costs; base holds the common
base class), with the ranges every number must lie in (limits), the named quantities and
defaults (quantities) and the what-if hardware overrides (hardware). This package exports the
spec classes, so ``from planner.specs import JobSpec`` is the import to use.

Units live in field names: ``_gib`` (2**30 bytes), ``_gbps`` (10**9 bytes per second, per GPU,
per direction), ``_tflops`` (10**12 FLOP/s), ``_us`` (microseconds). Every spec rejects unknown
fields, so a typo in a spec file is an error, not a silently ignored key.

Sources: DESIGN.md §3 (the shape of each spec); Narayanan et al. SC21 and Korthikanti et al. 2022
for the transformer quantities; Megatron-LM for the constraints between strategy knobs.
"""

from planner.specs.base import Spec
from planner.specs.job import DEFAULT_STACK, AttentionKernel, GradDtype, JobSpec, StackProfile
from planner.specs.model import ARCHITECTURE_FIELDS, MODEL_NAMING_FIELDS, FfnKind, ModelSpec
from planner.specs.precision import PeakFormat, Precision, PrecisionRecipe
from planner.specs.reliability import (
    DEFAULT_RELIABILITY,
    CheckpointMode,
    IntervalFormula,
    ReliabilityProfile,
)
from planner.specs.strategy import (
    OFFLOAD_KINDS,
    PLACEMENT_CODES,
    RECOMPUTE_CODES,
    Placement,
    Recompute,
    Strategy,
    offload_code,
    offload_eighths,
    offload_tier,
)
from planner.specs.system import (
    AcceleratorSpec,
    AttentionKernelPoint,
    MatmulEfficiencyPoint,
    MemoryTierSpec,
    NetworkTierSpec,
    SystemSpec,
)

__all__ = [
    "DEFAULT_RELIABILITY",
    "DEFAULT_STACK",
    "ARCHITECTURE_FIELDS",
    "MODEL_NAMING_FIELDS",
    "OFFLOAD_KINDS",
    "PLACEMENT_CODES",
    "RECOMPUTE_CODES",
    "AcceleratorSpec",
    "AttentionKernel",
    "AttentionKernelPoint",
    "CheckpointMode",
    "FfnKind",
    "GradDtype",
    "IntervalFormula",
    "JobSpec",
    "MatmulEfficiencyPoint",
    "MemoryTierSpec",
    "ModelSpec",
    "NetworkTierSpec",
    "PeakFormat",
    "Placement",
    "Precision",
    "PrecisionRecipe",
    "Recompute",
    "ReliabilityProfile",
    "Spec",
    "StackProfile",
    "Strategy",
    "SystemSpec",
    "offload_code",
    "offload_eighths",
    "offload_tier",
]
