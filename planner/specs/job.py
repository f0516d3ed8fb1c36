"""The training job (JobSpec: batch, sequence, precision, attention kernel, token budget) and the
training stack it runs on (StackProfile: the framework's efficiencies and overlaps)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from planner.specs import limits as lim
from planner.specs.base import Spec
from planner.specs.model import ModelSpec
from planner.specs.precision import PRECISION_ALIASES, Precision
from planner.specs.reliability import CheckpointMode, IntervalFormula

AttentionKernel = Literal["flash", "materialized"]
GradDtype = Literal["fp32", "bf16"]
DpCollectiveUnit = Literal["block", "bucket", "buffer"]
SelectivePolicy = Literal["attention_core", "torchtitan_op", "deepseek"]
Arithmetic = Literal["planner", "calculon"]
TpForm = Literal["megatron", "axonn"]


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
    arithmetic: Arithmetic = "planner"
    """Whose arithmetic the cost model runs: planner's (DESIGN.md §4), or Calculon's
    (calculon-ai/calculon, the SC23 poster's model: planner/cost/calculon.py), which reads the
    system's ``calculon`` tables, always materialises attention, and restricts the space to
    Calculon's (planner/space/rules.py calculon_violations)."""
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
    tp_form: TpForm = "megatron"
    """The tensor-parallel layers the stack runs: Megatron's 1D column/row-parallel pairs, or
    AxoNN's 3D grid (Singh et al. IPDPS'24; axonn-ai/axonn intra_layer/fully_connected.py): tp =
    X·Y·Z with Strategy.tp_column = X, tp_depth = Z, row Y = tp/(X·Z)
    (planner/cost/axonn_comm.py). Only an ``axonn`` stack searches X, Z > 1; its grid (1, tp, 1)
    is Megatron's 1D form run by AxoNN's layers."""
    sp_layout_copies: bool = False
    """Its sequence-parallel collectives gather and scatter [b, s, h] activations on the
    sequence dimension, which is not the one NCCL's all-gather and reduce-scatter concatenate
    (dim 0): each all-gather is followed, and each reduce-scatter preceded, by a copy of the
    whole b·s·h tensor (PyTorch's functional collectives, torch.cat of the chunks; with TP
    overlap, the fused ops' passes of that size: planner/cost/parallel_comm.py
    sp_layout_copy_s). Megatron's [s, b, h] layout gathers on dim 0 and copies nothing."""
    tp_overlap_contention: float = Field(default=0.0, ge=0, le=1)
    """With TP overlap, this share of the hidden communication time still shows up, as the
    communication kernels take SMs and memory bandwidth from the GEMMs they hide under."""
    dp_overlap_contention: float = Field(default=0.0, ge=0, le=1)
    """With DP overlap, this share of the hidden DP communication time still shows up: the
    collectives' kernels take SMs and memory bandwidth from the compute they hide under
    (planner/cost/step.py dp_exposed_s)."""
    pp_overlap: bool = False
    """Pipeline point-to-point sends and receives run asynchronously under compute (with the
    interleaved schedule)."""
    interleaved_schedule: bool = True
    """The stack runs the interleaved 1F1B schedule (virtual pipeline stages, interleave > 1);
    False: plain 1F1B only (nanotron, picotron)."""
    max_zero_stage: int = Field(default=3, ge=0, le=3)
    """The deepest ZeRO stage the stack implements (nanotron: ZeRO-1)."""
    pp_serial_transfers: bool = False
    """A middle pipeline stage's four transfers per micro-batch and model chunk (receive the
    activations, send them on, receive the gradients, send them back) each wait for the one
    before: four messages on its critical path. False: each send is batched with the receive
    beside it (Megatron's send_forward_recv_backward, torch.distributed.pipelining's
    batch_isend_irecv), two (planner/cost/parallel_comm.py pp_transfers)."""
    pp_messages_per_transfer: int = Field(default=1, ge=1, le=64)
    """Messages one stage-to-stage transfer takes: the activations, and what the stack sends
    beside them (nanotron: each tensor preceded by two blocking metadata sends, and the
    sequence mask beside the hidden states: 6), each paying the link's latency."""
    pp_scatter_gather: bool = True
    """Each TP rank sends 1/t of the stage's output (Megatron-LM's scatter/gather
    optimisation), also without sequence parallelism; False: the whole b·s·h unless sequence
    parallelism has already split it."""
    message_overhead_us: float = Field(default=0.0, ge=0, le=1e4)
    """Fixed time each collective and each point-to-point message costs the stack beyond
    NCCL's own latency: launching it from Python and its host-side work (eager stacks). Fitted
    by ``planner calibrate`` where runs cross nodes."""
    pp_chunk_overhead_us: float = Field(default=0.0, ge=0, le=1e5)
    """Fixed time of one model chunk's forward or backward step in the interleaved schedule
    (P2P posted and waited on, buffers, hooks): interleaving v chunks adds 2·(v − 1) per
    micro-batch (planner/cost/interleave.py)."""
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
    zero1_collective_unit: DpCollectiveUnit | None = None
    """The unit under ZeRO-1 and ZeRO-2 where the stack's sharded optimizer reduces otherwise
    than its plain data parallelism (nanotron: DDP buckets at ZeRO-0, one flat buffer at
    ZeRO-1); None: ``dp_collective_unit``."""
    zero1_all_reduce: bool = False
    """Under ZeRO-1 the stack all-reduces the whole gradient buffer (and each rank updates its
    shard) instead of reduce-scattering it: twice the traffic (nanotron's fp32 accumulation)."""
    sharded_dp_overlap: bool = True
    """Whether the DP overlap also hides ZeRO-1/2's once-per-step reduction and gather. False:
    they run after the last backward and before the next forward with nothing under them
    (nanotron with fp32 accumulation: one blocking all-reduce after the backward)."""
    zero3_collective_unit: DpCollectiveUnit | None = None
    """The unit under ZeRO-3 where the stack's ZeRO-3 is another implementation than its
    lower stages (None: ``dp_collective_unit``). Megatron-Core's ZeRO-3 is Megatron-FSDP, whose
    collectives carry one FSDP unit (a transformer layer) however large, while its DDP and
    distributed optimizer bucket: ``block``."""
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
    selective_policy: SelectivePolicy = "attention_core"
    """What ``recompute: selective`` keeps (planner/cost/activations.py): ``attention_core`` —
    all but the attention scores (Korthikanti et al. 2022; nothing more under flash attention);
    ``torchtitan_op`` — torchtitan's per-op policy (the block input, every other matmul's output
    and the attention output); ``deepseek`` — DeepSeek-V3's (RMSNorm outputs and the MLA
    up-projections recomputed, the SwiGLU output rebuilt from its fp8-cached input)."""
    fp8_activations: bool = False
    """Under fp8 training the GEMMs keep the fp8 copy of their input for the weight gradient
    instead of the 16-bit tensor (1 byte per value): Transformer Engine's Linear layers,
    DeepSeek-V3 §3.3.2."""
    logits_bytes: float = Field(default=4.0, ge=0, le=64)
    """Bytes per logit (micro-batch tokens × vocabulary / t) the last stage holds at its peak,
    the loss's copies and gradients included (4: one fp32 tensor)."""
    zero3_root_gathered: bool = False
    """Under ZeRO-3 the unit holding the embedding, the final norm and the LM head stays
    gathered from its forward to its backward (FSDP2 does not reshard its root module after
    the forward); otherwise each is one unit of the double buffer (planner/cost/memory.py)."""
    zero3_unsharded_under_pp: bool = False
    """Under ZeRO-3 with pipeline parallelism (pp > 1) nothing of a stage is resharded during
    the step: every unit's weights stay gathered from the first micro-batch's forward to the
    last one's backward, and its gradients are accumulated unsharded in the gradient dtype
    across the micro-batches and reduce-scattered once at the end (torchtitan: FSDP2
    ``reshard_after_forward=False`` under PP, and torch.distributed.pipelining's
    ``set_requires_gradient_sync(False)`` on every micro-batch's backward). The stage then holds
    its whole weights and whole gradients instead of two gathered units beside the shards
    (planner/cost/memory.py model_state)."""
    offload_resident_blocks: int = Field(default=3, ge=1, le=lim.MAX_LAYERS)
    """Blocks of an offloaded tensor kind kept in HBM: the one in use, the prefetched next and
    the previous one being written back."""
    expands_kv: bool = False
    """Grouped-query attention's K and V are repeated to the query heads before the attention
    kernel (torchtitan's repeat_kv before SDPA), which saves them at that width
    (planner/cost/activations.py)."""
    fused_kernels: bool = True
    """The stack runs its norms, activation function and rotary embedding as hand-fused
    kernels (Transformer Engine, Apex); False: as PyTorch eager ops, unfused unless the job is
    compiled (torch.compile fuses them; planner/cost/compute.py charges eager's extra bytes)."""
    compile: bool = False
    """Whether a job on this stack runs torch.compile unless it says (JobSpec.compile)."""
    caches_low_precision_weights: bool = True
    """The low-precision weight copies are cast once per step and kept across micro-batches
    (Transformer Engine's is_first_microbatch cache), costing their bytes in memory; False:
    cast every micro-batch, nothing kept (torchao Float8Linear)."""
    calibrated_gpus: int | None = Field(default=None, gt=0, le=lim.MAX_GPUS)
    """The largest GPU count among the runs this profile's constants were fitted on (None: not
    fitted on runs of its own): beyond it a prediction extrapolates, and its range widens
    (planner/cost/uncertainty.py)."""
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
    all three are the stack's. ``reliability``, ``checkpoint_mode``, ``checkpoint_interval`` and
    ``failures`` set what the goodput of a plan with ``train_tokens`` assumes
    (planner/cost/goodput.py).
    """

    global_batch: int = Field(gt=0, le=lim.MAX_GLOBAL_BATCH)
    seq_len: int | None = Field(default=None, gt=0, le=lim.MAX_SEQ_LEN)
    precision: Precision = "bf16"
    """The low-precision recipe (hardware_catalog/precisions/; ``fp8`` = ``fp8-delayed``)."""
    bf16_first_blocks: int | None = Field(default=None, ge=0, le=lim.MAX_LAYERS)
    """Blocks at the model's start kept in bf16 under a low-precision recipe (None: the
    recipe's; Megatron ``--num-layers-at-start-in-bf16``)."""
    bf16_last_blocks: int | None = Field(default=None, ge=0, le=lim.MAX_LAYERS)
    """Blocks at the model's end kept in bf16 (None: the recipe's)."""
    fp8_params: bool = False
    """Under a low-precision recipe the low-precision blocks' parameters are kept in the
    recipe's format (PrecisionRecipe.param_bytes) instead of bf16, and the ZeRO/FSDP parameter
    all-gathers move them so: Megatron-Core ``--fp8-param-gather``, Megatron-Bridge
    ``MixedPrecisionConfig.fp8_param_gather``. The fp32 master weights stay."""
    compile: bool | None = None
    """torch.compile on (fuses the elementwise work of stacks without fused kernels); None:
    the stack's default (StackProfile.compile)."""
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
    reliability: str | None = Field(default=None, min_length=1, max_length=4096)
    """The reliability profile (a catalog name or a file) instead of the system's."""
    checkpoint_mode: CheckpointMode | None = None
    """sync, async or in-memory checkpoints (planner.specs.reliability); None: the profile's."""
    checkpoint_interval: IntervalFormula = "daly"
    """The optimal checkpoint interval's formula: daly (Daly 2006) or young (Young 1974)."""
    robust: bool = False
    """Plan for the upper end of the prediction's range: every message that crosses a
    scale-up domain priced ROBUST_NETWORK_SCALE times slower (CostContext.network_scale), the
    collective model's measured error on mid-size messages (planner/cost/uncertainty.py)."""
    failures: bool = True
    """False: no failures and no planned interruptions (the failure-free numbers; checkpoints
    are still sized)."""

    @field_validator("precision")
    @classmethod
    def _canonical_precision(cls, value: str) -> str:
        return PRECISION_ALIASES.get(value, value)

    def seq_len_for(self, model: ModelSpec) -> int:
        return self.seq_len or model.seq_len
