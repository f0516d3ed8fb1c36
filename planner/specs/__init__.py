"""Immutable input specifications: model, hardware system, training job, execution strategy.

Units live in field names: ``_gib`` (2**30 bytes), ``_gbps`` (10**9 bytes per second, per GPU,
per direction), ``_tflops`` (10**12 FLOP/s), ``_us`` (microseconds). Every spec rejects unknown
fields, so a typo in a spec file is an error, not a silently ignored key.

Sources: DESIGN.md §3 (the shape of each spec); Narayanan et al. SC21 and Korthikanti et al. 2022
for the transformer quantities; Megatron-LM for the constraints between strategy knobs.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.specs import limits as lim
from planner.specs.quantities import OFFLOAD_STEPS, is_eighths

FfnKind = Literal["gelu", "swiglu"]
Precision = Literal["bf16", "fp8"]
Recompute = Literal["none", "selective", "full"]
AttentionKernel = Literal["flash", "materialized"]
GradDtype = Literal["fp32", "bf16"]
DpCollectiveUnit = Literal["block", "bucket", "buffer"]

RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
"""Integer codes of the recompute modes, as used by the vectorised cost model."""
Placement = Literal["tp-cp-dp-pp", "tp-pp-dp"]
PLACEMENT_CODES: dict[str, int] = {"tp-cp-dp-pp": 0, "tp-pp-dp": 1}
"""Rank orders (fastest-varying group first): Megatron-Core's default, and the one of
``--use-tp-pp-dp-mapping`` (no CP), which puts the pipeline inside the scale-up domain."""

OFFLOAD_KINDS = ("weights", "activations", "optimizer")
"""The tensor classes that can be offloaded: Strategy.offload_<kind> (the tier) and
Strategy.offload_<kind>_fraction (the share)."""


def offload_code(tier: int, eighths: int) -> int:
    """The integer code of "``eighths``/8 of a tensor class in offload tier ``tier``" that the
    cost model and the search space use: 0 for nothing offloaded; tier + M·(8 − eighths) for
    M = limits.MAX_MEMORY_TIERS, so that the whole class in tier k is code k."""
    return tier + lim.MAX_MEMORY_TIERS * (OFFLOAD_STEPS - eighths) if tier else 0


def offload_tier(code):
    """The tier of an offload code (int or integer array); 0: in HBM."""
    return code % lim.MAX_MEMORY_TIERS


def offload_eighths(code):
    """The eighths of the tensor class an offload code moves (int or integer array); 0 for
    code 0."""
    return (OFFLOAD_STEPS - code // lim.MAX_MEMORY_TIERS) * (code % lim.MAX_MEMORY_TIERS > 0)


class Spec(BaseModel):
    """Base of every spec: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: object) -> object:
        """A number field given ``true``/``false`` is an error, not 1/0 (pydantic's lax mode
        would read ``layers: true`` as one block)."""
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                value = data.get(name)
                if isinstance(value, bool) and _is_numeric(field.annotation):
                    raise ValueError(f"{name} = {value!r}: a number, not true/false")
        return data


def _is_numeric(annotation: object) -> bool:
    """Whether a field's type is int or float, optionally with None."""
    return annotation in (int, float, int | None, float | None)


MODEL_NAMING_FIELDS = ("name", "description", "aliases", "sources")
"""The ModelSpec fields that name and document a model rather than shape it."""


class ModelSpec(Spec):
    """A decoder-only transformer.

    ``layers`` counts transformer blocks. ``kv_heads`` < ``heads`` is grouped-query attention
    (GQA); it defaults to ``heads`` (multi-head attention). ``ffn_kind`` ``gelu`` has two FFN
    matrices (h×f, f×h), ``swiglu`` three (gate, up, down).

    Mixture of experts (``experts`` > 0): after the first ``dense_layers`` blocks (whose FFN is
    dense, of width ``ffn_hidden``), every block's FFN is ``experts`` routed experts of width
    ``expert_ffn_hidden`` (0: ``ffn_hidden``), of which a router picks ``experts_per_token`` per
    token (dropless top-k), plus ``shared_experts`` that every token passes through (Mixtral:
    8 experts, top 2; DeepSeek-V3: 3 dense blocks, then 256 routed experts of width 2,048, top 8,
    and one shared expert). Experts have no biases; the router is an h × experts matrix.

    Multi-head latent attention (``kv_lora_rank`` > 0, DeepSeek-V2/V3): keys and values are
    projected down to a latent of ``kv_lora_rank`` (plus a shared RoPE key of ``rope_head_dim``)
    and up again per head; queries likewise through ``q_lora_rank`` (0: a direct projection).
    Query and key heads are ``head_dim`` + ``rope_head_dim`` wide, value heads ``v_head_dim``
    (0: ``head_dim``); no biases.
    """

    name: str = "custom"
    description: str = ""
    hidden: int = Field(gt=0, le=lim.MAX_HIDDEN)
    layers: int = Field(gt=0, le=lim.MAX_LAYERS)
    heads: int = Field(gt=0, le=lim.MAX_HEADS)
    kv_heads: int = Field(default=0, ge=0, le=lim.MAX_HEADS)  # 0 or omitted: = heads
    head_dim: int = Field(default=0, ge=0, le=lim.MAX_HIDDEN)  # 0 or omitted: hidden / heads
    ffn_hidden: int = Field(gt=0, le=lim.MAX_HIDDEN)
    ffn_kind: FfnKind = "gelu"
    vocab: int = Field(gt=0, le=lim.MAX_VOCAB)
    seq_len: int = Field(default=2048, gt=0, le=lim.MAX_SEQ_LEN)
    tied_embeddings: bool = True
    dropout: bool = True
    experts: int = Field(default=0, ge=0, le=lim.MAX_EXPERTS)  # 0: a dense model
    experts_per_token: int = Field(default=0, ge=0, le=lim.MAX_EXPERTS)
    shared_experts: int = Field(default=0, ge=0, le=lim.MAX_EXPERTS)
    expert_ffn_hidden: int = Field(default=0, ge=0, le=lim.MAX_HIDDEN)  # 0: ffn_hidden
    dense_layers: int = Field(default=0, ge=0, le=lim.MAX_LAYERS)
    expert_groups: int = Field(default=0, ge=0, le=lim.MAX_EXPERTS)
    """Group-limited routing: the experts form this many groups (0: no limit)..."""
    expert_groups_per_token: int = Field(default=0, ge=0, le=lim.MAX_EXPERTS)
    """... and each token's experts come from at most this many of them (DeepSeek-V3's
    node-limited routing; Megatron-Core's ``--moe-router-num-groups`` and
    ``--moe-router-group-topk``)."""
    kv_lora_rank: int = Field(default=0, ge=0, le=lim.MAX_HIDDEN)  # > 0: latent attention
    q_lora_rank: int = Field(default=0, ge=0, le=lim.MAX_HIDDEN)
    rope_head_dim: int = Field(default=0, ge=0, le=lim.MAX_HIDDEN)
    v_head_dim: int = Field(default=0, ge=0, le=lim.MAX_HIDDEN)  # 0: head_dim
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_heads(cls, data: object) -> object:
        if not isinstance(data, dict) or not isinstance(data.get("heads"), int):
            return data
        data = dict(data)
        if not data.get("kv_heads"):
            data["kv_heads"] = data["heads"]
        hidden = data.get("hidden")
        if not data.get("head_dim") and isinstance(hidden, int) and data["heads"] > 0:
            if hidden % data["heads"]:
                raise ValueError(
                    f"hidden={hidden} is not divisible by heads={data['heads']}; "
                    "give head_dim explicitly"
                )
            data["head_dim"] = hidden // data["heads"]
        return data

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads={self.kv_heads} must divide heads={self.heads} (grouped-query attention)"
            )
        if self.kv_lora_rank and self.kv_heads != self.heads:
            raise ValueError(
                f"kv_heads={self.kv_heads}: latent attention (kv_lora_rank > 0) has one key and "
                f"value head per query head; give kv_heads = heads ({self.heads}) or omit it"
            )
        if not self.kv_lora_rank and (self.q_lora_rank or self.rope_head_dim or self.v_head_dim):
            raise ValueError(
                "q_lora_rank, rope_head_dim and v_head_dim describe latent attention: "
                "give kv_lora_rank > 0 with them"
            )
        return self

    @model_validator(mode="after")
    def _check_experts(self) -> ModelSpec:
        if not self.experts:
            moe_only = (
                "experts_per_token",
                "shared_experts",
                "expert_ffn_hidden",
                "dense_layers",
                "expert_groups",
                "expert_groups_per_token",
            )
            given = [name for name in moe_only if getattr(self, name)]
            if given:
                raise ValueError(f"{', '.join(given)}: mixture-of-experts fields need experts > 0")
            return self
        if not 1 <= self.experts_per_token <= self.experts:
            raise ValueError(
                f"experts_per_token={self.experts_per_token}: allowed 1..experts ({self.experts})"
            )
        groups, chosen = self.expert_groups, self.expert_groups_per_token
        if (groups or chosen) and not (
            groups and self.experts % groups == 0 and 1 <= chosen <= groups
        ):
            raise ValueError(
                f"expert_groups={groups}, expert_groups_per_token={chosen}: the groups must "
                f"divide the experts ({self.experts}) and 1 ≤ groups per token ≤ groups"
            )
        if self.dense_layers >= self.layers:
            raise ValueError(
                f"dense_layers={self.dense_layers}: allowed 0..layers − 1 ({self.layers - 1})"
            )
        return self

    @property
    def attention_width(self) -> int:
        """Width of the query / attention output: heads · head_dim (= hidden for most models)."""
        return self.heads * self.head_dim

    @property
    def ffn_matrices(self) -> int:
        return 3 if self.ffn_kind == "swiglu" else 2

    def splits_over(self, tp: int) -> bool:
        """Whether ``tp`` tensor-parallel ranks split the model evenly: tp divides the heads,
        the FFN width and the expert width, and divides or is a multiple of the KV heads."""
        return (
            self.heads % tp == 0
            and self.ffn_hidden % tp == 0
            and self.expert_width % tp == 0
            and (self.kv_heads % tp == 0 or tp % self.kv_heads == 0)
        )

    @property
    def tp_widths(self) -> str:
        """The widths tensor parallelism must split, for messages."""
        expert = f", expert_ffn_hidden ({self.expert_width})" if self.is_moe else ""
        return (
            f"heads ({self.heads}), ffn_hidden ({self.ffn_hidden}){expert}, kv_heads "
            f"({self.kv_heads})"
        )

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_latent_attention(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one query or key head: head_dim, plus the RoPE part under latent attention."""
        return self.head_dim + self.rope_head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def latent_projections(self) -> tuple[tuple[int, int], ...]:
        """Latent attention's weight matrices as (rows, columns), unsharded: the query's down and
        up projections (or one direct projection), the KV down projection with the shared RoPE
        key, the KV up projection to every head's key and value, the output projection."""
        h, a = self.hidden, self.heads
        query = (
            ((h, self.q_lora_rank), (self.q_lora_rank, a * self.qk_head_dim))
            if self.q_lora_rank
            else ((h, a * self.qk_head_dim),)
        )
        keys_values = (
            (h, self.kv_lora_rank + self.rope_head_dim),
            (self.kv_lora_rank, a * (self.head_dim + self.value_head_dim)),
        )
        return (*query, *keys_values, (a * self.value_head_dim, h))

    @property
    def attention_params(self) -> int:
        """One block's attention: QKV and output projections with biases; under latent
        attention its matrices (latent_projections) and the two latent norms, no biases."""
        if self.is_latent_attention:
            matrices = sum(rows * columns for rows, columns in self.latent_projections)
            return matrices + self.q_lora_rank + self.kv_lora_rank
        h, q = self.hidden, self.attention_width
        kv = self.kv_heads * self.head_dim
        return h * (q + 2 * kv) + (q + 2 * kv) + q * h + h

    @property
    def expert_width(self) -> int:
        """FFN width of one expert (``expert_ffn_hidden``, else ``ffn_hidden``)."""
        return self.expert_ffn_hidden or self.ffn_hidden

    @property
    def moe_layers(self) -> int:
        """Blocks whose FFN is a mixture of experts."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def moe_share(self) -> float:
        """The share of blocks whose FFN is a mixture of experts (0 for a dense model): what the
        cost model weighs MoE terms by in its average block."""
        return self.moe_layers / self.layers

    @property
    def dense_ffn_params(self) -> int:
        """A dense FFN: its matrices with biases."""
        h, f = self.hidden, self.ffn_hidden
        return self.ffn_matrices * h * f + (self.ffn_matrices - 1) * f + h

    def moe_ffn_params(self, routed: int) -> int:
        """An MoE FFN counting ``routed`` of its routed experts (all of them for the stored
        parameters, ``experts_per_token`` for the active ones), its shared experts and router."""
        expert = self.ffn_matrices * self.hidden * self.expert_width
        return (routed + self.shared_experts) * expert + self.hidden * self.experts

    def _blocks_params(self, routed: int) -> int:
        norms = 4 * self.hidden
        dense = self.attention_params + self.dense_ffn_params + norms
        moe = self.attention_params + self.moe_ffn_params(routed) + norms
        return (self.layers - self.moe_layers) * dense + self.moe_layers * moe

    @property
    def block_params(self) -> float:
        """Parameters of one transformer block (attention, FFN, two layer norms), averaged over
        the blocks: dense and MoE blocks differ, and the cost model spreads stages by count."""
        return self._blocks_params(self.experts) / self.layers

    @property
    def ffn_intermediate_width(self) -> float:
        """Intermediate FFN activations per token, averaged over blocks: f in a dense block,
        (experts_per_token + shared_experts) · expert width in an MoE block."""
        routed = (self.experts_per_token + self.shared_experts) * self.expert_width
        return (1 - self.moe_share) * self.ffn_hidden + self.moe_share * routed

    @property
    def embedding_params(self) -> int:
        """Input embedding (vocab × hidden); the LM head adds as many again unless tied."""
        return self.vocab * self.hidden

    def _total(self, blocks: int) -> int:
        head = 0 if self.tied_embeddings else self.embedding_params
        return blocks + self.embedding_params + head + 2 * self.hidden

    @property
    def params(self) -> int:
        """Total parameters: blocks (every expert), input embedding, LM head when untied, final
        norm."""
        return self._total(self._blocks_params(self.experts))

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: params with only ``experts_per_token`` of each
        MoE block's routed experts (= params for a dense model). Embeddings included, as
        Mixtral's 12.9B counts them (DeepSeek-V3's 37B leaves out the input embedding)."""
        return self._total(self._blocks_params(self.experts_per_token))

    @property
    def routed_expert_params(self) -> float:
        """The routed experts' parameters of one block, averaged over the blocks: what expert
        parallelism shards (shared experts and the router stay with the dense part)."""
        return self.moe_share * self.experts * self.ffn_matrices * self.hidden * self.expert_width


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
    peak_tflops: dict[Precision, float]
    matmul_efficiency: tuple[MatmulEfficiencyPoint, ...] = Field(min_length=1)
    attention_kernels: dict[str, tuple[AttentionKernelPoint, ...]] = Field(default_factory=dict)
    """Fused (flash) attention kernels measured on this accelerator, by name (``flash2``,
    ``flash3``, ``cudnn``, ``triton``): the stack's ``attention_kernel`` picks one. A stack
    whose kernel is not listed runs its attention core on the matmul curve."""

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


class StackProfile(Spec):
    """What a training framework achieves on the hardware (DESIGN.md §9): its efficiencies
    relative to the raw kernel benchmarks of the accelerator, which overlaps it really has and
    what they cost, its memory conventions and its fixed overheads. A profile is catalog data
    (``hardware_catalog/stacks/*.yaml``, each number with its source) chosen per job
    (``JobSpec.stack``); the calibrated numbers say which runs they were fitted on.

    The step-time terms read it as follows (planner/cost/): weight GEMMs take the raw matmul
    curve's time / ``gemm_efficiency``; the attention core takes the ``attention_kernel``'s
    measured time (or, materialised, the matmul curve's) / ``attention_efficiency``;
    memory-bound kernels run at the HBM's achievable bandwidth × ``memory_bound_efficiency``;
    each block adds ``layer_overhead_us`` per micro-batch (kernel launches and framework work
    that do not shrink with the block); each step adds ``step_overhead_s``.
    """

    name: str
    description: str = ""
    gemm_efficiency: float = Field(default=1.0, ge=lim.MIN_EFFICIENCY, le=1)
    attention_kernel: str = "flash2"
    attention_efficiency: float = Field(default=1.0, ge=lim.MIN_EFFICIENCY, le=1)
    memory_bound_efficiency: float = Field(default=1.0, ge=lim.MIN_EFFICIENCY, le=1)
    layer_overhead_us: float = Field(default=0.0, ge=0, le=1e5)
    step_overhead_s: float = Field(default=0.0, ge=0, le=3600)
    dp_overlap: bool = True
    """Gradient reduce-scatter / all-reduce and the parameter all-gather can run under the
    backward and forward passes (bucketed, asynchronous)."""
    tp_overlap: bool = False
    """TP collectives can be split and overlapped with the GEMMs that produce or consume them
    (e.g. Transformer Engine userbuffers)."""
    tp_overlap_contention: float = Field(default=0.0, ge=0, le=1)
    """With TP overlap, this share of the hidden communication time still shows up, as the
    communication kernels take SMs and memory bandwidth from the GEMMs they hide under."""
    pp_overlap: bool = False
    """Pipeline point-to-point sends and receives run asynchronously under compute (with the
    interleaved schedule)."""
    ep_overlap: bool = False
    """The expert-parallel token dispatch and combine (all-to-all) run under another
    micro-batch's compute (DeepSeek's DualPipe; Megatron-Core's
    ``--overlap-moe-expert-parallel-comm``)."""
    fp8_dispatch: bool = False
    """Under fp8 training the tokens are dispatched to their experts in fp8 (1 byte per value;
    the combine stays 16-bit): DeepSeek-V3 §3.3.2."""
    grad_dtype: GradDtype = "fp32"
    """Precision of the gradient buffers gradients accumulate and are reduced in."""
    dp_collective_unit: DpCollectiveUnit = "bucket"
    """What one data-parallel collective carries, which sets how many ring latencies a step
    pays (planner/cost/step.py, dp_collectives): ``block`` — one transformer block's weights
    (FSDP wraps each block; the embedding and head are one more unit); ``bucket`` — a bucket
    of max(dp_bucket_params, dp_bucket_params_per_rank·g) parameters for a group of g ranks
    (Megatron-Core's DDP); ``buffer`` — the whole gradient buffer at once."""
    dp_bucket_params: float = Field(default=40e6, ge=lim.MIN_DP_BUCKET_PARAMS, le=1e15)
    """Smallest bucket, in parameters (``bucket`` unit)."""
    dp_bucket_params_per_rank: float = Field(default=1e6, ge=0, le=1e12)
    """Bucket growth per rank of the group, in parameters (``bucket`` unit)."""
    optimizer_bytes_per_param: int = Field(default=12, ge=0, le=64)
    """Optimizer state per parameter: fp32 master weights and two Adam moments (12 bytes)."""
    hbm_reserve_gib: float = Field(default=2.0, ge=0, le=lim.MAX_CAPACITY_GIB)
    """HBM that the CUDA context, communication buffers and allocator fragmentation take."""
    hbm_usable_fraction: float = Field(default=0.95, ge=lim.MIN_USABLE_FRACTION, le=1)
    """Share of HBM a plan may fill: the headroom a real allocator needs beyond the estimate
    (Fujii et al. 2024: plans estimated under ~80 % of HBM did not run out of memory in 454
    measured runs; 0.95 is this project's default margin)."""
    offload_resident_blocks: int = Field(default=3, ge=1, le=lim.MAX_LAYERS)
    """Blocks of an offloaded tensor kind kept in HBM: the one in use, the prefetched next and
    the previous one being written back."""
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)


DEFAULT_STACK = "megatron-core"
"""The stack a job runs on unless it names one: NVIDIA Megatron-Core (also under NeMo), the
most common framework of large published runs since 2023."""


class JobSpec(Spec):
    """A training job.

    ``global_batch`` is in sequences. ``stack`` names the training framework's profile (a
    catalog name or a spec file; see StackProfile). ``attention`` says whether the attention
    scores are materialised (the 2021–22 Megatron runs) or computed by a fused flash kernel
    (modern stacks). ``grad_dtype`` is the precision gradients are accumulated and reduced in,
    and ``hbm_reserve_gib`` the HBM kept for the CUDA context, communication buffers and
    allocator fragmentation; ``hbm_usable_fraction`` caps the estimate's share of HBM. Unset,
    all three are the stack's.
    """

    global_batch: int = Field(gt=0, le=lim.MAX_GLOBAL_BATCH)
    seq_len: int | None = Field(default=None, gt=0, le=lim.MAX_SEQ_LEN)
    precision: Precision = "bf16"
    stack: str = Field(default=DEFAULT_STACK, min_length=1, max_length=4096)
    optimizer: Literal["adam"] = "adam"
    grad_dtype: GradDtype | None = None
    attention: AttentionKernel = "flash"
    train_tokens: float | None = Field(default=None, gt=0, le=lim.MAX_TRAIN_TOKENS)
    hbm_reserve_gib: float | None = Field(default=None, ge=0, le=lim.MAX_CAPACITY_GIB)
    hbm_usable_fraction: float | None = Field(default=None, ge=lim.MIN_USABLE_FRACTION, le=1)
    expert_imbalance: float = Field(default=1.0, ge=1, le=lim.MAX_EXPERT_IMBALANCE)
    """Mixture-of-experts load imbalance: tokens the busiest expert-parallel rank receives over
    the mean (1: perfectly balanced routing). It scales the routed experts' compute and the
    token all-to-all of every plan with ep > 1; a stated factor, not a prediction."""

    def seq_len_for(self, model: ModelSpec) -> int:
        return self.seq_len or model.seq_len


class Strategy(Spec):
    """An execution strategy. Field names are the CLI flag names (``--micro-batch`` →
    ``micro_batch``). Offload fields hold a memory-tier index: 0 keeps the tensors in HBM,
    k ≥ 1 moves them to offload tier k; the ``_fraction`` fields say which share of the class
    moves (in steps of 1/8; the rest stays in HBM)."""

    tp: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    cp: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    """Context parallelism: each sequence split over cp ranks (Megatron-Core CP)."""
    pp: int = Field(default=1, gt=0, le=lim.MAX_LAYERS)
    dp: int = Field(default=1, gt=0, le=lim.MAX_GPUS)
    ep: int = Field(default=1, gt=0, le=lim.MAX_EXPERTS)
    """Expert parallelism: each MoE block's routed experts sharded over ep ranks taken from
    the tp·cp·dp ranks of a pipeline stage (Megatron-Core's ``--expert-model-parallel-size``)."""
    expert_tp: int = Field(default=0, ge=0, le=lim.MAX_GPUS)
    """Expert tensor parallelism: each expert split over this many ranks (0: tp, Megatron-Core's
    default; ``--expert-tensor-parallel-size``)."""
    micro_batch: int = Field(default=1, gt=0, le=lim.MAX_GLOBAL_BATCH)
    interleave: int = Field(default=1, gt=0, le=lim.MAX_LAYERS)
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload_weights: int = Field(default=0, ge=0, lt=lim.MAX_MEMORY_TIERS)
    offload_activations: int = Field(default=0, ge=0, lt=lim.MAX_MEMORY_TIERS)
    offload_optimizer: int = Field(default=0, ge=0, lt=lim.MAX_MEMORY_TIERS)
    offload_weights_fraction: float = 1.0
    """Share of the blocks' weights (with their gradients) in the offload tier: each block's
    tensors split, the share streamed, the rest resident (DeepSpeed ZeRO-Offload++'s
    ``ratio``)."""
    offload_activations_fraction: float = 1.0
    offload_optimizer_fraction: float = 1.0
    dp_overlap: bool = True
    tp_overlap: bool = False
    recompute_layers: int | None = Field(default=None, gt=0, le=lim.MAX_LAYERS)
    """With ``recompute = "full"``: only this many blocks of each stage are recomputed, the
    others store their activations (Megatron's ``--recompute-method block
    --recompute-num-layers``, which counts per model chunk: recompute_layers / interleave).
    None: every block."""
    placement: Placement = "tp-cp-dp-pp"
    """The order the groups take over the ranks, fastest first: a TP group is t consecutive
    GPUs; then CP, DP, PP (default: a DP group spans t·cp·dp GPUs, the pipeline all of them) or
    PP before DP (``tp-pp-dp``: the pipeline spans t·pp GPUs, a DP group all of them)."""
    stage_layers: tuple[int, ...] | None = None
    """Blocks on each pipeline stage, first to last (None: layers / pp on every stage).
    Megatron's layouts: the first and the last stage free (``--decoder-first-pipeline-num-layers``,
    ``--decoder-last-pipeline-num-layers``), the stages between them equal."""

    @field_validator(*(f"offload_{kind}_fraction" for kind in OFFLOAD_KINDS))
    @classmethod
    def _eighths(cls, value: float) -> float:
        if not is_eighths(value):
            raise ValueError(f"a fraction in steps of 1/{OFFLOAD_STEPS}: 0.125, 0.25, ..., 1")
        return value

    def offload_codes(self) -> dict[str, int]:
        """offload_<kind> → its offload code (offload_code)."""
        return {
            f"offload_{kind}": offload_code(
                getattr(self, f"offload_{kind}"),
                round(getattr(self, f"offload_{kind}_fraction") * OFFLOAD_STEPS),
            )
            for kind in OFFLOAD_KINDS
        }

    @field_validator("stage_layers")
    @classmethod
    def _stage_layers_positive(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and (not value or min(value) < 1 or max(value) > lim.MAX_LAYERS):
            raise ValueError(f"every stage holds 1..{lim.MAX_LAYERS} blocks")
        return value

    def stage_blocks(self, layers: int) -> tuple[int, int, int]:
        """(first, middle, last) stage block counts; middle is the first's when pp ≤ 2."""
        if self.stage_layers is None:
            even = layers // self.pp
            return even, even, even
        first, last = self.stage_layers[0], self.stage_layers[-1]
        middle = self.stage_layers[1] if len(self.stage_layers) > 2 else first
        return first, middle, last

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def expert_tp_size(self) -> int:
        """Ranks each expert is split over (expert_tp, or tp when 0)."""
        return self.expert_tp or self.tp

    def product_text(self) -> str:
        """The GPU count as its factors, e.g. ``tp·pp·dp = 8·16·8 = 1024`` (cp when > 1)."""
        names, values = ["tp", "pp", "dp"], [self.tp, self.pp, self.dp]
        if self.cp > 1:
            names.insert(1, "cp")
            values.insert(1, self.cp)
        return f"{'·'.join(names)} = {'·'.join(map(str, values))} = {self.gpus}"

    def describe(self) -> str:
        """A compact one-line description, e.g. ``tp=8 pp=16 dp=8 mb=1 v=2 selective+SP``."""
        parts = [f"tp={self.tp}"]
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        parts += [f"pp={self.pp}", f"dp={self.dp}", f"mb={self.micro_batch}"]
        if self.interleave > 1:
            parts.append(f"v={self.interleave}")
        if self.stage_layers is not None:
            parts.append("stages=" + _layout_text(self.stage_layers))
        recompute = self.recompute
        if self.recompute_layers is not None:
            recompute += f"({self.recompute_layers}/stage)"
        parts.append(recompute + ("+SP" if self.sequence_parallel else ""))
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.expert_tp and self.expert_tp != self.tp:
            parts.append(f"etp={self.expert_tp}")
        if self.zero_stage:
            parts.append(f"ZeRO-{self.zero_stage}")
        offloaded = [
            f"{kind[0].upper()}{_eighths_text(getattr(self, f'offload_{kind}_fraction'))}"
            f"→T{getattr(self, f'offload_{kind}')}"
            for kind in OFFLOAD_KINDS
            if getattr(self, f"offload_{kind}")
        ]
        if offloaded:
            parts.append("offload " + ",".join(offloaded))
        if self.placement != "tp-cp-dp-pp":
            parts.append(f"order={self.placement}")
        if not self.dp_overlap:
            parts.append("no-dp-overlap")
        if self.tp_overlap:
            parts.append("tp-overlap")
        return " ".join(parts)


def _eighths_text(fraction: float) -> str:
    """ "" for 1, else `` 3/8`` style (in lowest terms)."""
    if fraction == 1:
        return ""
    eighths = round(fraction * OFFLOAD_STEPS)
    common = math.gcd(eighths, OFFLOAD_STEPS)
    return f" {eighths // common}/{OFFLOAD_STEPS // common}"


def _layout_text(stage_layers: tuple[int, ...]) -> str:
    """``6,6,...,6,4`` style: the first, the repeated middle (once, with an ellipsis), the last."""
    if len(stage_layers) <= 4:
        return ",".join(map(str, stage_layers))
    first, middle, last = stage_layers[0], stage_layers[1], stage_layers[-1]
    return f"{first},{middle},...,{middle},{last}"
