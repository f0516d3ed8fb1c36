"""Megatron-LM / Megatron-Core command-line arguments: emit a plan as ``torchrun ... pretrain_gpt.py
--flags``, read a command line or a file of arguments back.

Flag names and semantics are those of Megatron-LM main at commit d98e8a64dd (2026-08-22):
``megatron/training/arguments.py`` and the dataclass-generated flags of
``megatron/core/model_parallel_config.py`` and ``megatron/core/transformer/transformer_config.py``
(a ``bool`` field ``x_y`` is ``--x-y``; one that defaults to True is ``--no-x-y``). Which versions
have which flag: ``--num-layers-per-virtual-pipeline-stage`` since 2021-02 (commit dcef906978),
``--num-virtual-stages-per-pipeline-rank`` since 2025-02 (ef490839e8; both are read, the first is
emitted as every version since 2021 accepts it), Megatron-FSDP's ``--use-megatron-fsdp`` with
``--data-parallel-sharding-strategy {no_shard, optim, optim_grads, optim_grads_params}`` since
2025-02 (d165a8548b), ``--cpu-offloading-weights`` / ``-activations`` since 2024-01 (46f12487cd),
``--padded-vocab-size`` since 2026-05 (40d024bc69). The legacy ``--checkpoint-activations`` of
2021 (examples/pretrain_gpt3_175B.sh at 152aab304d: checkpoint every layer,
``--checkpoint-num-layers`` 1) is read as full recompute; today's Megatron-LM refuses it.

Mapping (planner knob ↔ flags):

- tp, pp, cp ↔ ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--context-parallel-size``; dp is WORLD_SIZE / (tp·cp·pp): torchrun's ``--nnodes`` ×
  ``--nproc-per-node`` before the script, or planner's ``--gpus``.
- micro_batch ↔ ``--micro-batch-size``; global batch ↔ ``--global-batch-size``; sequence ↔
  ``--seq-length`` (and ``--max-position-embeddings``).
- interleave v ↔ ``--num-layers-per-virtual-pipeline-stage`` = layers / (pp·v).
- stage_layers ↔ ``--decoder-first-pipeline-num-layers``, ``--decoder-last-pipeline-num-layers``
  (the stages between share the rest equally; with interleaving each rank's blocks split over
  its chunks, and v is written ``--num-virtual-stages-per-pipeline-rank``); stage_layers of pp·v
  virtual stages ↔ ``--pipeline-model-parallel-layout`` (Megatron-Core's layout string, which
  sets v; read also: ``--account-for-embedding-in-pipeline-split``,
  ``--account-for-loss-in-pipeline-split``; planner.specs.layouts).
- sequence_parallel ↔ ``--sequence-parallel`` (only with tp > 1, as in planner).
- recompute full ↔ ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1``; with recompute_layers r, ``--recompute-method block
  --recompute-num-layers r/v`` (Megatron counts per model chunk); selective ↔
  ``--recompute-granularity selective`` (``--recompute-activations`` is read as selective).
- placement tp-pp-dp ↔ ``--use-tp-pp-dp-mapping``.
- zero_stage 1 ↔ ``--use-distributed-optimizer`` (optimizer state sharded over DP); 2 / 3 ↔
  ``--use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy
  optim_grads`` / ``optim_grads_params`` (``--use-torch-fsdp2`` is read as 3).
- dp_overlap ↔ ``--overlap-grad-reduce`` (+ ``--overlap-param-gather`` with a distributed
  optimizer); tp_overlap ↔ ``--tp-comm-overlap``.
- offload to the host tier: activations ↔ ``--cpu-offloading --cpu-offloading-num-layers``;
  weights ↔ ``--cpu-offloading --cpu-offloading-weights``; optimizer ↔
  ``--optimizer-cpu-offload --use-precision-aware-optimizer``.
- precision bf16 ↔ ``--bf16``; the FP8 recipes ↔ ``--bf16 --fp8-format hybrid --fp8-recipe``
  fp8-delayed ``delayed`` (Megatron's default recipe, also read when absent), fp8-current
  ``tensorwise``, mxfp8 ``mxfp8`` (``blockwise`` reads as fp8-current, with a note; torchao's
  fp8-rowwise has no Megatron recipe and is emitted as ``tensorwise``, noted); nvfp4 ↔
  ``--bf16 --fp4-format e2m1 --fp4-recipe nvfp4``; bf16 first/last blocks ↔
  ``--first-last-layers-bf16 --num-layers-at-start-in-bf16 --num-layers-at-end-in-bf16``
  (Megatron-LM megatron/core/transformer/transformer_config.py @ d98e8a64ddf3: fp8_recipe
  tensorwise|delayed|mxfp8|blockwise|custom, fp4 e2m1, fp4_recipe nvfp4, first/last 1 by
  default when set). ``--fp16`` reads as 16-bit (bf16). grad_dtype fp32 ↔
  ``--accumulate-allreduce-grads-in-fp32``; bf16 ↔
  ``--grad-reduce-in-bf16``. attention ↔ ``--attention-backend``: the stack profile's kernel,
  cudnn ``fused``, flash2/flash3 ``flash`` with ``--flash-attention-version`` 2/3; materialized
  ``unfused`` (planner.launch.architecture; read: flash, fused, auto as flash, the rest
  materialized).
- ep ↔ ``--expert-model-parallel-size``; expert_tp ↔ ``--expert-tensor-parallel-size``
  (unset: Megatron-Core's default, the tp size, planner's 0), with ``--moe-token-dispatcher-type
  alltoall``, the dispatcher planner costs.
- mixture of experts ↔ ``--num-experts --moe-router-topk --moe-ffn-hidden-size
  --moe-shared-expert-intermediate-size`` (shared experts × expert width) ``--moe-layer-freq``
  (``([0]*n+[1]*m)``: the first n blocks dense; read as well: an int k, every k-th block MoE, or
  a list of 0/1, whose dense blocks planner counts as if they came first)
  ``--moe-router-num-groups --moe-router-group-topk``; latent attention ↔
  ``--multi-latent-attention --q-lora-rank --kv-lora-rank --qk-head-dim --qk-pos-emb-head-dim
  --v-head-dim`` (Megatron's defaults 128, 64, 128 for the last three).
- model ↔ ``--num-layers --hidden-size --ffn-hidden-size --num-attention-heads
  --group-query-attention --num-query-groups --kv-channels --swiglu
  --untie-embeddings-and-output-weights --hidden-dropout --attention-dropout
  --padded-vocab-size`` (``--vocab-size``, or the GPT-2 BPE files' 50,257 tokens, are padded
  to a multiple of ``--make-vocab-size-divisible-by`` × tp as Megatron does); the architecture
  ↔ ``--normalization --norm-epsilon --position-embedding-type --rotary-base
  --disable-bias-linear`` (and ``--rope-type rope`` under latent attention), where they differ
  from Megatron's defaults (planner.launch.architecture, which the reader checks the model
  against).
- environment: ``export CUDA_DEVICE_MAX_CONNECTIONS=1`` before torchrun where Megatron-LM's
  validate_args asserts it (tp > 1 or cp > 1 without Megatron-FSDP; planner.launch.architecture
  quotes the assertion).

What ``plan --emit megatron`` searches (``restriction``; planner.launch.restrict): every knob
above round-trips, but Megatron-Core refuses some combinations, so the plan leaves out
``--use-tp-pp-dp-mapping`` with Megatron-FSDP (ZeRO-2/3), sequence parallelism off with tp > 1
(``--tp-comm-overlap`` needs it), weight and activation offloading (``--cpu-offloading`` moves
whole layers, and TransformerConfig refuses it with pipeline parallelism or recompute), and
optimizer offloading to a tier other than host memory; the report states each in its caps.

Over 500 lines by design: this framework's one knob ↔ flag table and both directions that use
it (emit writes a strategy in the framework's terms, read takes a launch line back), kept in
one module so that a flag cannot change in one direction and not the other (tests/test_launch.py
round-trips every knob).
"""

from __future__ import annotations

import shlex

from hardware_catalog import load_stack
from planner.errors import InputError
from planner.launch import architecture, shell
from planner.launch.common import (
    EXPERT_COUNTS,
    LaunchConfig,
    Parsed,
    Restriction,
    bounded_whole,
    finite,
    host_offloads,
    in_range,
    megatron_core_restriction,
    place_on_host,
    positive,
    read_experts,
    read_latent_attention,
    read_offload_fraction,
    refuse_precision,
    shown,
)
from planner.launch.nodes import multi_node_comments, node_layout, torchrun
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec
from planner.specs import limits as lim
from planner.specs.layouts import megatron_layout_text

FORMAT = "megatron"
VERSION = "Megatron-LM main @ d98e8a64dd (2026-08-22)"
STACK = "megatron-core"
"""The stack profile ``plan --emit megatron`` plans under unless --stack names another."""
GPT2_BPE_VOCAB = 50257
"""Tokens of the GPT-2 BPE vocabulary (``--vocab-file gpt2-vocab.json``), before padding."""

FRACTION_FLAG = "--optimizer-offload-fraction"
"""The share of the optimizer state --optimizer-cpu-offload moves (Megatron-Core's hybrid
device optimizer; default 1)."""
FLAGS: dict[str, str] = {
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "micro_batch": "--micro-batch-size",
    "global_batch": "--global-batch-size",
    "seq_len": "--seq-length",
    "interleave": "--num-layers-per-virtual-pipeline-stage",
    "first_stage_layers": "--decoder-first-pipeline-num-layers",
    "last_stage_layers": "--decoder-last-pipeline-num-layers",
    "layout": "--pipeline-model-parallel-layout",
    "embedding_slot": "--account-for-embedding-in-pipeline-split",
    "loss_slot": "--account-for-loss-in-pipeline-split",
    "sequence_parallel": "--sequence-parallel",
    "recompute": "--recompute-granularity",
    "zero_stage": "--use-distributed-optimizer",
    "dp_overlap": "--overlap-grad-reduce",
    "tp_overlap": "--tp-comm-overlap",
    "placement": "--use-tp-pp-dp-mapping",
    "offload_activations": "--cpu-offloading",
    "offload_weights": "--cpu-offloading-weights",
    "offload_optimizer": "--optimizer-cpu-offload",
    "precision": "--bf16",
    "grad_dtype": "--accumulate-allreduce-grads-in-fp32",
    "attention": "--attention-backend",
    "layers": "--num-layers",
    "hidden": "--hidden-size",
    "ffn_hidden": "--ffn-hidden-size",
    "heads": "--num-attention-heads",
    "kv_heads": "--num-query-groups",
    "head_dim": "--kv-channels",
    "ffn_kind": "--swiglu",
    "tied_embeddings": "--untie-embeddings-and-output-weights",
    "vocab": "--padded-vocab-size",
    "ep": "--expert-model-parallel-size",
    "expert_tp": "--expert-tensor-parallel-size",
    "experts": "--num-experts",
    "experts_per_token": "--moe-router-topk",
    "expert_ffn_hidden": "--moe-ffn-hidden-size",
    "shared_experts": "--moe-shared-expert-intermediate-size",
    "dense_layers": "--moe-layer-freq",
    "expert_groups": "--moe-router-num-groups",
    "expert_groups_per_token": "--moe-router-group-topk",
    "kv_lora_rank": "--kv-lora-rank",
    "q_lora_rank": "--q-lora-rank",
    "rope_head_dim": "--qk-pos-emb-head-dim",
    "v_head_dim": "--v-head-dim",
}
"""The knob ↔ flag table: each planner knob's main flag (the docstring gives the companions)."""

SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
"""Megatron-FSDP's ``--data-parallel-sharding-strategy`` ↔ ZeRO stage."""

NOT_MODELLED = {
    "--pipeline-model-parallel-layout": (
        "planner's stages are a first and a last count with equal stages between "
        "(--decoder-first/last-pipeline-num-layers)"
    ),
    "--moe-expert-capacity-factor": "planner costs dropless routing (no capacity factor)",
}
"""Flags that change performance in ways planner does not model: read, and named in a note."""

MISSING_HINT = {
    "hidden": FLAGS["hidden"],
    "layers": FLAGS["layers"],
    "heads": FLAGS["heads"],
    "ffn_hidden": FLAGS["ffn_hidden"],
    "vocab": "--padded-vocab-size, --vocab-size or --vocab-file",
}


def restriction(model: ModelSpec, system: SystemSpec, job: JobSpec) -> Restriction:
    """The strategies Megatron-LM runs (common.megatron_core_restriction): any rank order, but
    --use-tp-pp-dp-mapping only with ZeRO ≤ 1 (Megatron-FSDP does not take it)."""
    refuse_precision("megatron", job, ("fp8-rowwise",), edges=True)
    placements = (
        {"placement": 0},
        {"placement": 1, "zero_stage": 0},
        {"placement": 1, "zero_stage": 1},
    )
    cap = "--use-tp-pp-dp-mapping with ZeRO-0/1 only (Megatron-FSDP does not take it)"
    return megatron_core_restriction(system, placements, cap)


def emit(
    model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy, fmt: str = FORMAT
) -> LaunchConfig:
    """The plan as a ``torchrun ... pretrain_gpt.py`` command line: on many nodes with a c10d
    rendezvous at $MASTER_ADDR, the same line on every node (Megatron-LM's
    examples/gpt3/train_gpt3_175b_distributed.sh passes --nnodes and --master_addr the same
    way), and the Slurm lines that start it there; the environment the framework asserts is
    exported first. ``fmt`` ``axonn``: Megatron-AxoNN's architecture, attention and environment
    (planner.launch.axonn rewrites the parallel flags)."""
    s = strategy
    notes: list[str] = []
    flags: list[tuple[str, object]] = [
        (FLAGS["layers"], model.layers),
        (FLAGS["hidden"], model.hidden),
        (FLAGS["ffn_hidden"], model.ffn_hidden),
        (FLAGS["heads"], model.heads),
    ]
    if model.kv_heads != model.heads:
        flags += [("--group-query-attention", None), (FLAGS["kv_heads"], model.kv_heads)]
    if model.head_dim * model.heads != model.hidden:
        flags.append((FLAGS["head_dim"], model.head_dim))
    if model.ffn_kind == "swiglu":
        flags.append((FLAGS["ffn_kind"], None))
    if not model.tied_embeddings:
        flags.append((FLAGS["tied_embeddings"], None))
    shape_flags, shape_notes = architecture.megatron_flags(model, fmt)
    flags += shape_flags
    notes += shape_notes
    if not model.dropout:
        flags += [("--hidden-dropout", 0), ("--attention-dropout", 0)]
    flags += _latent_attention_flags(model) + _expert_flags(model)
    seq_len = job.seq_len_for(model)
    flags += [
        (FLAGS["vocab"], model.vocab),
        (FLAGS["seq_len"], seq_len),
        ("--max-position-embeddings", seq_len),
        (FLAGS["tp"], s.tp),
        (FLAGS["pp"], s.pp),
        (FLAGS["cp"], s.cp),
    ]
    per_virtual = s.stage_layers is not None and len(s.stage_layers) == s.pp * s.interleave > s.pp
    if per_virtual:
        flags.append((FLAGS["layout"], shlex.quote(megatron_layout_text(s.stage_layers))))
    elif s.interleave > 1 and s.stage_layers is not None:
        flags.append(("--num-virtual-stages-per-pipeline-rank", s.interleave))
    elif s.interleave > 1:
        flags.append((FLAGS["interleave"], model.layers // (s.pp * s.interleave)))
    if s.stage_layers is not None and not per_virtual:
        flags.append((FLAGS["first_stage_layers"], s.stage_layers[0]))
        flags.append((FLAGS["last_stage_layers"], s.stage_layers[-1]))
    if model.is_moe:
        flags.append((FLAGS["ep"], s.ep))
        if s.expert_tp:
            flags.append((FLAGS["expert_tp"], s.expert_tp))
        flags.append(("--moe-token-dispatcher-type", "alltoall"))
    if s.sequence_parallel and s.tp > 1:
        flags.append((FLAGS["sequence_parallel"], None))
    if s.placement == "tp-pp-dp":
        flags.append((FLAGS["placement"], None))
        if s.zero_stage >= 2:
            notes.append("placement: Megatron FSDP does not support --use-tp-pp-dp-mapping")
    flags += [(FLAGS["micro_batch"], s.micro_batch), (FLAGS["global_batch"], job.global_batch)]
    flags += _recompute_flags(s)
    flags += _zero_flags(s)
    if s.tp_overlap:
        flags.append((FLAGS["tp_overlap"], None))
        if not s.sequence_parallel:
            notes.append("tp_overlap: Megatron-LM's --tp-comm-overlap needs --sequence-parallel")
    offload_flags, offload_notes = _offload_flags(model, system, s)
    flags += offload_flags
    notes += offload_notes
    flags.append((FLAGS["precision"], None))
    flags += _precision_flags(job, notes)
    if job.grad_dtype == "fp32":
        flags.append((FLAGS["grad_dtype"], None))
    else:
        flags.append(("--grad-reduce-in-bf16", None))
    if fmt == "axonn":  # the fork has no --attention-backend (planner.launch.axonn)
        flags += [("--use-flash-attn", None)] if job.attention == "flash" else []
    else:
        kernel = load_stack(job.stack).attention_kernel
        attention_flags, attention_notes = architecture.megatron_attention(job, kernel)
        flags += attention_flags
        notes += attention_notes
    per_node = system.gpus_per_node
    nodes, nproc = node_layout(s.gpus, per_node)
    if s.gpus % per_node:
        notes.append(
            f"gpus: {s.gpus} is not a whole number of {per_node}-GPU nodes; the command runs "
            f"{s.gpus} processes on one node — adapt --nnodes/--nproc-per-node"
        )
    lines = [
        f"# Megatron-LM arguments: {model.name} on {s.gpus} GPUs of {system.name}",
        f"# planner strategy: {s.describe()}",
        f"# flags as in {VERSION}; add the data, tokenizer and optimizer flags",
        *(f"# note: {note}" for note in notes),
        *multi_node_comments(nodes, nproc, "bash <this file>"),
    ]
    if architecture.needs_single_connection(s, fmt):
        lines.append(f"{architecture.ENV_EXPORT}  # {architecture.env_reason(fmt)}")
    lines.append(f"{torchrun(nodes, nproc)} pretrain_gpt.py \\")
    body = [f"    {flag}" if value is None else f"    {flag} {value}" for flag, value in flags]
    lines += [line + " \\" for line in body[:-1]] + body[-1:]
    return LaunchConfig(format=FORMAT, text="\n".join(lines) + "\n", notes=notes)


def _latent_attention_flags(model: ModelSpec) -> list[tuple[str, object]]:
    if not model.is_latent_attention:
        return []
    flags: list[tuple[str, object]] = [("--multi-latent-attention", None)]
    if model.q_lora_rank:
        flags.append((FLAGS["q_lora_rank"], model.q_lora_rank))
    return flags + [
        (FLAGS["kv_lora_rank"], model.kv_lora_rank),
        ("--qk-head-dim", model.head_dim),
        (FLAGS["rope_head_dim"], model.rope_head_dim),
        (FLAGS["v_head_dim"], model.v_head_dim or model.head_dim),
    ]


def _expert_flags(model: ModelSpec) -> list[tuple[str, object]]:
    if not model.is_moe:
        return []
    flags: list[tuple[str, object]] = [
        (FLAGS["experts"], model.experts),
        (FLAGS["experts_per_token"], model.experts_per_token),
    ]
    if model.expert_width != model.ffn_hidden:
        flags.append((FLAGS["expert_ffn_hidden"], model.expert_width))
    if model.shared_experts:
        flags.append((FLAGS["shared_experts"], model.shared_experts * model.expert_width))
    if model.dense_layers:
        pattern = f"([0]*{model.dense_layers}+[1]*{model.layers - model.dense_layers})"
        flags.append((FLAGS["dense_layers"], shlex.quote(pattern)))
    if model.expert_groups:
        flags.append((FLAGS["expert_groups"], model.expert_groups))
        flags.append((FLAGS["expert_groups_per_token"], model.expert_groups_per_token))
    return flags


def _recompute_flags(s: Strategy) -> list[tuple[str, object]]:
    if s.recompute == "full" and s.recompute_layers is not None:
        return [
            (FLAGS["recompute"], "full"),
            ("--recompute-method", "block"),
            ("--recompute-num-layers", s.recompute_layers // s.interleave),
        ]
    if s.recompute == "full":
        return [
            (FLAGS["recompute"], "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    if s.recompute == "selective":
        return [(FLAGS["recompute"], "selective")]
    return []


def _zero_flags(s: Strategy) -> list[tuple[str, object]]:
    flags: list[tuple[str, object]] = []
    if s.zero_stage >= 2:
        strategy = next(name for name, stage in SHARDING.items() if stage == s.zero_stage)
        flags += [("--use-megatron-fsdp", None), (FLAGS["zero_stage"], None)]
        flags.append(("--data-parallel-sharding-strategy", strategy))
    elif s.zero_stage == 1:
        flags.append((FLAGS["zero_stage"], None))
    if s.dp_overlap:
        flags.append((FLAGS["dp_overlap"], None))
        if s.zero_stage:
            flags.append(("--overlap-param-gather", None))
    return flags


def _offload_flags(
    model: ModelSpec, system: SystemSpec, s: Strategy
) -> tuple[list[tuple[str, object]], list[str]]:
    to_host, notes = host_offloads(s, system, "Megatron-LM", frozenset({"offload_optimizer"}))
    flags: list[tuple[str, object]] = []
    if to_host & {"offload_activations", "offload_weights"}:
        flags.append((FLAGS["offload_activations"], None))
        flags.append(("--cpu-offloading-num-layers", model.layers - 1))
        if "offload_weights" in to_host:
            flags.append((FLAGS["offload_weights"], None))
        if "offload_activations" not in to_host:
            flags.append(("--no-cpu-offloading-activations", None))
        if s.pp > 1 or s.recompute != "none":
            knob = "offload_activations" if "offload_activations" in to_host else "offload_weights"
            notes.append(
                f"{knob}: Megatron-Core refuses --cpu-offloading with pipeline parallelism or "
                "recompute (TransformerConfig checks)"
            )
    if "offload_optimizer" in to_host:
        flags += [(FLAGS["offload_optimizer"], None), ("--use-precision-aware-optimizer", None)]
        if s.offload_optimizer_fraction < 1:
            flags.append((FRACTION_FLAG, s.offload_optimizer_fraction))
    return flags, notes


class _Args:
    """Parsed flags with typed access; remembers which flags were read."""

    def __init__(self, flags: dict[str, list[str]]) -> None:
        self.flags = flags
        self.read: set[str] = set()

    def has(self, name: str) -> bool:
        self.read.add(name)
        return name in self.flags

    def text(self, name: str) -> str | None:
        if not self.has(name):
            return None
        values = self.flags[name]
        if len(values) != 1:
            raise InputError(f"megatron argument {name}: expected one value, got {len(values)}")
        return values[0]

    def whole(self, name: str, default: int | None = None) -> int | None:
        value = self.text(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise InputError(
                f"megatron argument {name} = {shown(value)}: expected a whole number"
            ) from None
        return bounded_whole(f"megatron argument {name}", number)

    def number(self, name: str) -> float | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            raise InputError(
                f"megatron argument {name} = {shown(value)}: expected a number"
            ) from None
        return finite(f"megatron argument {name}", number)

    def choice(self, name: str, allowed: tuple[str, ...]) -> str | None:
        value = self.text(name)
        if value is not None and value not in allowed:
            raise InputError(
                f"megatron argument {name} = {shown(value)}: allowed: {', '.join(allowed)}"
            )
        return value


FP8_RECIPES = {"fp8-delayed": "delayed", "fp8-current": "tensorwise", "mxfp8": "mxfp8"}
"""planner recipe → Megatron-LM ``--fp8-recipe``."""


def _precision_flags(job: JobSpec, notes: list[str]) -> list[tuple[str, object]]:
    """The recipe's flags (module docstring)."""
    flags: list[tuple[str, object]] = []
    if job.precision == "nvfp4":
        flags += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    elif job.precision != "bf16":
        recipe = FP8_RECIPES.get(job.precision)
        if recipe is None:
            notes.append(
                f"precision = {job.precision}: torchao's recipe, Megatron-LM has none; "
                "emitted as --fp8-recipe tensorwise (fp8-current)"
            )
            recipe = "tensorwise"
        flags += [("--fp8-format", "hybrid"), ("--fp8-recipe", recipe)]
    first, last = job.bf16_first_blocks or 0, job.bf16_last_blocks or 0
    if job.precision != "bf16" and (first or last):
        flags += [
            ("--first-last-layers-bf16", None),
            ("--num-layers-at-start-in-bf16", first),
            ("--num-layers-at-end-in-bf16", last),
        ]
    if job.fp8_params:
        flags.append(("--fp8-param-gather", None))
    return flags


def _read_precision(args: _Args, parsed: Parsed) -> None:
    """The recipe from --fp8-format/--fp8-recipe or --fp4-format/--fp4-recipe."""
    job = parsed.job
    fp8 = args.choice("--fp8-format", ("e4m3", "hybrid"))
    recipe = args.choice("--fp8-recipe", ("delayed", "tensorwise", "mxfp8", "blockwise"))
    fp4 = args.choice("--fp4-format", ("e2m1",))
    args.choice("--fp4-recipe", ("nvfp4",))
    if fp4:
        job["precision"] = "nvfp4"
    elif fp8:
        names = {value: name for name, value in FP8_RECIPES.items()}
        job["precision"] = names.get(recipe or "delayed", "fp8-current")
        if recipe == "blockwise":
            parsed.notes.append(
                "precision: --fp8-recipe blockwise (1x128 / 128x128 scales) costed as fp8-current"
            )
    else:
        job["precision"] = "bf16"
    if args.has("--first-last-layers-bf16"):
        job["bf16_first_blocks"] = args.whole("--num-layers-at-start-in-bf16", 1)
        job["bf16_last_blocks"] = args.whole("--num-layers-at-end-in-bf16", 1)
    if args.has("--fp8-param-gather"):
        job["fp8_params"] = True


def read(text: str, system: SystemSpec) -> Parsed:
    """A command line (``torchrun ... pretrain_gpt.py --flags``, or the flags alone) or a file of
    arguments (shell line continuations and ``#`` comments allowed)."""
    tokens = shell.words(text)
    script = next((i for i, token in enumerate(tokens) if token.endswith(".py")), None)
    launcher = tokens[:script] if script is not None else []
    args = _Args(shell.flags(tokens[script + 1 :] if script is not None else tokens))
    parsed = Parsed(fmt=FORMAT)
    _read_launcher(_Args(shell.flags(launcher)), parsed)
    tp = args.whole(FLAGS["tp"], 1)
    parsed.knobs = {
        "tp": tp,
        "pp": args.whole(FLAGS["pp"], 1),
        "cp": args.whole(FLAGS["cp"], 1),
        "micro_batch": args.whole(FLAGS["micro_batch"], 1),
        "sequence_parallel": args.has(FLAGS["sequence_parallel"]) and tp > 1,
        "dp_overlap": args.has(FLAGS["dp_overlap"]),
        "tp_overlap": args.has(FLAGS["tp_overlap"]),
        "placement": "tp-pp-dp" if args.has(FLAGS["placement"]) else "tp-cp-dp-pp",
        "ep": args.whole(FLAGS["ep"], 1),
        "expert_tp": args.whole(FLAGS["expert_tp"], 0),
    }
    args.has("--overlap-param-gather")
    per_virtual = args.whole(FLAGS["interleave"])
    stages = args.whole("--num-virtual-stages-per-pipeline-rank")
    if stages is not None:
        parsed.knobs["interleave"] = stages
    elif per_virtual is not None:
        parsed.layers_per_virtual_stage = per_virtual
    parsed.end_stage_layers = (
        args.whole(FLAGS["first_stage_layers"]),
        args.whole(FLAGS["last_stage_layers"]),
    )
    parsed.layout = args.text(FLAGS["layout"])
    parsed.embedding_loss_slots = (args.has(FLAGS["embedding_slot"]), args.has(FLAGS["loss_slot"]))
    _read_recompute(args, parsed)
    _read_zero(args, parsed)
    _read_offload(args, parsed, system)
    _read_job(args, parsed)
    _read_shape(args, parsed, tp)
    _read_architecture(args, parsed)
    _read_latent_attention(args, parsed)
    _read_experts(args, parsed)
    for flag, why in NOT_MODELLED.items():
        if args.has(flag) and args.flags[flag] not in ([], ["1"], ["0"]):
            parsed.notes.append(f"{flag} {' '.join(args.flags[flag])}: {why}; ignored")
    parsed.unsupported = [flag for flag in args.flags if flag not in args.read]
    return parsed


def _read_launcher(launcher: _Args, parsed: Parsed) -> None:
    nodes = positive("torchrun --nnodes", launcher.whole("--nnodes"))
    nproc = launcher.whole("--nproc-per-node")
    if nproc is None:
        nproc = launcher.whole("--nproc_per_node")
    positive("torchrun --nproc-per-node", nproc)
    if nodes is not None or nproc is not None:
        parsed.gpus = (nodes or 1) * (nproc or 1)
        parsed.gpus_from = f"torchrun --nnodes {nodes or 1} --nproc-per-node {nproc or 1}"


def _read_recompute(args: _Args, parsed: Parsed) -> None:
    granularity = args.choice(FLAGS["recompute"], ("full", "selective"))
    method = args.choice("--recompute-method", ("uniform", "block"))
    layers = args.whole("--recompute-num-layers")
    if args.has("--checkpoint-activations"):
        granularity = "full"
        parsed.notes.append(
            "recompute: legacy --checkpoint-activations (Megatron-LM 2021) read as full recompute"
        )
        args.has("--checkpoint-num-layers")
    elif args.has("--recompute-activations"):
        granularity = granularity or "selective"
    if granularity == "full" and method == "block":
        positive("--recompute-num-layers", layers)
        parsed.recompute_layers_per_chunk = layers or 1
    parsed.knobs["recompute"] = granularity or "none"


def _read_zero(args: _Args, parsed: Parsed) -> None:
    sharding = args.choice("--data-parallel-sharding-strategy", tuple(SHARDING))
    distributed = args.has(FLAGS["zero_stage"])
    if args.has("--use-megatron-fsdp"):
        stage = SHARDING[sharding or "optim_grads_params"]
    elif args.has("--use-torch-fsdp2"):
        stage = 3
    else:
        stage = 1 if distributed else 0
    parsed.knobs["zero_stage"] = stage


def _read_offload(args: _Args, parsed: Parsed, system: SystemSpec) -> None:
    wanted = []
    if args.has(FLAGS["offload_activations"]):
        args.whole("--cpu-offloading-num-layers")
        if not args.has("--no-cpu-offloading-activations"):
            wanted.append("offload_activations")
        if args.has(FLAGS["offload_weights"]):
            wanted.append("offload_weights")
    if args.has(FLAGS["offload_optimizer"]):
        args.has("--use-precision-aware-optimizer")
        fraction, where = args.number(FRACTION_FLAG), f"megatron argument {FRACTION_FLAG}"
        if read_offload_fraction(parsed, "offload_optimizer", fraction, where):
            wanted.append("offload_optimizer")
    place_on_host(parsed, system, wanted)


def _read_job(args: _Args, parsed: Parsed) -> None:
    job = parsed.job
    for knob in ("global_batch", "seq_len"):
        value = args.whole(FLAGS[knob])
        if value is not None:
            job[knob] = value
    bf16, fp16 = args.has("--bf16"), args.has("--fp16")
    _read_precision(args, parsed)
    if fp16:
        parsed.notes.append("precision: --fp16 is costed as bf16 (the same 16-bit peak)")
    elif not bf16:
        parsed.notes.append("precision: neither --bf16 nor --fp16 (fp32 training) costed as bf16")
    if args.has("--grad-reduce-in-bf16"):
        job["grad_dtype"] = "bf16"
    elif args.has(FLAGS["grad_dtype"]) or bf16 or not fp16:
        job["grad_dtype"] = "fp32"
    else:
        job["grad_dtype"] = "bf16"
        parsed.notes.append(
            "grad_dtype: --fp16 without --accumulate-allreduce-grads-in-fp32 accumulates and "
            "reduces gradients in 16 bits (costed as bf16)"
        )
    backend = args.choice(FLAGS["attention"], ("flash", "fused", "unfused", "local", "auto"))
    args.choice("--flash-attention-version", ("2", "3", "4"))
    if args.has("--use-flash-attn") or backend in ("flash", "fused", "auto"):
        job["attention"] = "flash"
    elif backend is not None:
        job["attention"] = "materialized"


def _read_shape(args: _Args, parsed: Parsed, tp: int) -> None:
    shape = parsed.shape
    for knob in ("layers", "hidden", "heads", "ffn_hidden"):
        value = args.whole(FLAGS[knob])
        if value is not None:
            shape[knob] = value
    gqa = args.has("--group-query-attention")
    groups = positive(f"megatron argument {FLAGS['kv_heads']}", args.whole(FLAGS["kv_heads"]))
    if groups is not None and (gqa or groups != shape.get("heads")):
        shape["kv_heads"] = groups
    head_dim = args.whole(FLAGS["head_dim"])
    if head_dim is not None:
        shape["head_dim"] = head_dim
    swiglu = args.has(FLAGS["ffn_kind"])
    shape["ffn_kind"] = "swiglu" if swiglu else "gelu"
    hidden = shape.get("hidden")
    if "ffn_hidden" not in shape and isinstance(hidden, int):
        # Megatron-Core's default: 4h, or 2/3 of it rounded down to a multiple of 64 for SwiGLU.
        shape["ffn_hidden"] = 8 * hidden // 3 // 64 * 64 if swiglu else 4 * hidden
    shape["tied_embeddings"] = not args.has(FLAGS["tied_embeddings"])
    dropouts = [args.number("--hidden-dropout"), args.number("--attention-dropout")]
    shape["dropout"] = not all(value == 0 for value in dropouts)
    seq = args.whole(FLAGS["seq_len"])
    args.whole("--max-position-embeddings")
    if seq is not None:
        shape["seq_len"] = seq
    shape_vocab = _vocab(args, tp)
    if shape_vocab is not None:
        shape["vocab"] = shape_vocab


def _read_architecture(args: _Args, parsed: Parsed) -> None:
    """Norm, positions and biases (planner.launch.architecture), Megatron's defaults where
    absent."""
    position = args.choice("--position-embedding-type", architecture.MEGATRON_POSITION_CHOICES)
    if args.has("--use-rotary-position-embeddings"):
        position = "rope"
    args.choice("--rope-type", ("rope", "yarn"))
    parsed.architecture = architecture.read_megatron(
        args.choice("--normalization", tuple(architecture.MEGATRON_NORMS.values())),
        position,
        args.number("--norm-epsilon"),
        args.number("--rotary-base"),
        args.has("--disable-bias-linear"),
    )


def _read_latent_attention(args: _Args, parsed: Parsed) -> None:
    if not args.has("--multi-latent-attention"):
        return
    kv_rank = args.whole(FLAGS["kv_lora_rank"])
    if kv_rank is None:
        raise InputError(
            "megatron argument --multi-latent-attention needs --kv-lora-rank (the latent width)"
        )
    ranks = {
        "kv_lora_rank": kv_rank,
        "q_lora_rank": args.whole(FLAGS["q_lora_rank"]),
        "head_dim": args.whole("--qk-head-dim"),
        "rope_head_dim": args.whole(FLAGS["rope_head_dim"]),
        "v_head_dim": args.whole(FLAGS["v_head_dim"]),
    }
    read_latent_attention(parsed, ranks)


def _read_experts(args: _Args, parsed: Parsed) -> None:
    dispatcher = args.text("--moe-token-dispatcher-type")
    experts = args.whole(FLAGS["experts"])
    if not experts:
        return
    found = {name: args.whole(FLAGS[name]) for name in EXPERT_COUNTS}
    found["dense_layers"] = args.text(FLAGS["dense_layers"])
    read_experts(parsed, experts, found, dispatcher, FLAGS, "megatron argument ")


def _vocab(args: _Args, tp: int) -> int | None:
    padded = args.whole(FLAGS["vocab"])
    if padded is not None:
        return padded
    divisible = positive(
        "megatron argument --make-vocab-size-divisible-by",
        args.whole("--make-vocab-size-divisible-by", 128),
    )
    size = in_range("megatron argument --vocab-size", args.whole("--vocab-size"), 1, lim.MAX_VOCAB)
    tokenizer = args.text("--tokenizer-type")
    if size is None and (args.has("--vocab-file") or tokenizer == "GPT2BPETokenizer"):
        size = GPT2_BPE_VOCAB
    args.has("--merge-file")
    if size is None:
        return None
    multiple = (divisible or 1) * max(tp, 1)
    return -(-size // multiple) * multiple
