"""Low-precision training recipes (PrecisionRecipe): which number format the weight GEMMs run
in, how many blocks stay in bf16, and what the recipe costs besides the GEMMs — the memory-bound
quantize, amax, scale and transpose kernels around every low-precision linear layer and the
low-precision weight copies kept in memory. A recipe is catalog data
(``hardware_catalog/precisions/*.yaml``, each number with its source) named by
``JobSpec.precision``; planner/cost/precision.py turns it into time and bytes.

What stays in bf16 under every recipe (Transformer Engine and torchao alike): the attention
core (scores and attention · V; batched GEMMs outside ``te.Linear`` / ``Float8Linear``), the
LM head (Megatron-Core's output layer is not a TE module; torchtitan filters ``output``), the
MoE router, norms and elementwise work.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.specs import limits as lim
from planner.specs.base import Spec

Precision = Literal["bf16", "fp8", "fp8-delayed", "fp8-current", "fp8-rowwise", "mxfp8", "nvfp4"]
"""Recipe names a job can train in (JobSpec.precision); ``fp8`` is an alias of
``fp8-delayed`` (Transformer Engine's default recipe), kept for existing specs and commands."""
PRECISION_ALIASES: dict[str, str] = {"fp8": "fp8-delayed"}
"""Alias → canonical recipe name (the catalog files list the same aliases)."""
PeakFormat = Literal["bf16", "fp8", "fp4"]
"""The number formats of the accelerator's dense peaks (AcceleratorSpec.peak_tflops)."""


class PrecisionRecipe(Spec):
    """One low-precision recipe as frameworks run it.

    Traffic fields are memory-bound bytes per element, per micro-batch, forward and backward
    together, of every low-precision linear layer: ``input_cast_bytes`` per element of its input
    activation (cast in the forward, plus the transposed / column-wise copy the weight gradient
    needs), ``grad_cast_bytes`` per element of its output gradient (cast in the backward, plus
    its transposed copy), ``weight_cast_bytes`` per weight element each time the weight is
    cast (once per step where the stack caches the cast weights, StackProfile.
    caches_low_precision_weights, else every micro-batch). ``weight_copy_bytes`` are the bytes
    per weight element of the cached low-precision copies (e.g. fp8 weight and its transpose).
    """

    name: str
    description: str = ""
    gemm_format: PeakFormat = "bf16"
    """Which dense peak (AcceleratorSpec.peak_tflops) the low-precision linear GEMMs run at."""
    gemm_efficiency: float = Field(default=1.0, ge=lim.MIN_EFFICIENCY, le=1)
    """Share of the format's GEMM curve the recipe's GEMM kernel reaches (1: the tensorwise
    cuBLAS kernel the curve was measured with)."""
    bf16_first_blocks: int = Field(default=0, ge=0, le=lim.MAX_LAYERS)
    """Blocks at the start of the model kept in bf16 (JobSpec.bf16_first_blocks overrides)."""
    bf16_last_blocks: int = Field(default=0, ge=0, le=lim.MAX_LAYERS)
    """Blocks at the end of the model kept in bf16 (JobSpec.bf16_last_blocks overrides)."""
    input_cast_bytes: float = Field(default=0.0, ge=0, le=64)
    grad_cast_bytes: float = Field(default=0.0, ge=0, le=64)
    weight_cast_bytes: float = Field(default=0.0, ge=0, le=64)
    weight_copy_bytes: float = Field(default=0.0, ge=0, le=64)
    param_bytes: float | None = Field(default=None, ge=0, le=64)
    """Bytes per weight element of a parameter kept in the recipe's format (JobSpec.fp8_params:
    Megatron-Core --fp8-param-gather, Transformer Engine's quantized parameters); the
    parameter is then one of the cached copies, so weight_copy_bytes − param_bytes remain.
    None: the recipe's stacks cannot keep parameters in its format."""
    quantized_gather: bool = True
    """Under sequence parallelism the inputs of column-parallel layers (and the output
    gradients of row-parallel ones) are cast on the local shard and gathered in low precision
    (True), or gathered in bf16 and cast whole on every rank (False: torchao rowwise, whose
    communication stays in high precision)."""
    needs_block_scaling: bool = False
    """Needs tensor cores that apply per-block scales (MXFP8, NVFP4: Blackwell)."""
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)

    @property
    def low_precision(self) -> bool:
        return self.gemm_format != "bf16"
