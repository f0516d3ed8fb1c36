"""NeMo 2.0 recipe overrides as YAML: the attribute paths of a ``nemo llm pretrain`` recipe
(``trainer.strategy.tensor_model_parallel_size`` ...), nested; a file of dotted keys reads too.

Keys and semantics are those of NeMo 2.6.0rc0 at commit 8cfedd7203 (2025-09-20):
``nemo/collections/llm/recipes/*.py`` (the recipe layout: ``trainer``, ``data``, ``model``,
``optim``), ``nemo/lightning/pytorch/strategies/megatron_strategy.py`` (``MegatronStrategy``:
parallel sizes, ``ddp``, ``fsdp`` ``megatron`` | ``pytorch``),
``nemo/collections/llm/recipes/precision/mixed_precision.py`` (``MegatronMixedPrecision``:
``precision`` ``bf16-mixed`` | ``16-mixed``, ``grad_reduce_in_fp32``, ``fp8``) and
``nemo/collections/llm/gpt/model/base.py`` (``GPTConfig``, a Megatron-Core ``TransformerConfig``:
the model shape, recompute, ``tp_comm_overlap``, CPU offloading, ``attention_backend``).

Mapping (planner knob ↔ key): tp, pp, cp, interleave, sequence_parallel ↔
``trainer.strategy.{tensor,pipeline}_model_parallel_size``, ``context_parallel_size``,
``virtual_pipeline_model_parallel_size``, ``sequence_parallel``; GPUs ↔ ``trainer.num_nodes`` ×
``trainer.devices``; micro_batch, global batch, sequence ↔ ``data.micro_batch_size``,
``data.global_batch_size``, ``data.seq_length``; recompute ↔
``model.config.recompute_granularity`` (+ ``recompute_method uniform``, ``recompute_num_layers
1`` for full; ``block`` with recompute_layers / interleave for partial recompute); zero_stage
1 ↔ ``optim.config.use_distributed_optimizer``; 2 / 3 ↔
``trainer.strategy.fsdp: megatron`` with ``trainer.strategy.ddp.data_parallel_sharding_strategy``
``optim_grads`` / ``optim_grads_params`` (``fsdp: pytorch`` reads as 3); dp_overlap ↔
``trainer.strategy.ddp.overlap_grad_reduce`` (+ ``overlap_param_gather``); tp_overlap ↔
``model.config.tp_comm_overlap`` (the recipes' ``MegatronCommOverlapCallback`` sets the same
field); offload to the host tier ↔ ``model.config.cpu_offloading`` (+ ``_weights``,
``_activations``, ``_num_layers``) and ``optim.config.optimizer_cpu_offload``; precision ↔
``trainer.plugins.precision``, ``trainer.plugins.fp8: hybrid`` and ``fp8_recipe`` (delayed,
tensorwise = fp8-current, mxfp8; bf16 first/last blocks ↔ ``first_last_layers_bf16``,
``num_layers_at_start_in_bf16``, ``num_layers_at_end_in_bf16``); grad_dtype ↔
``trainer.plugins.grad_reduce_in_fp32``; attention ↔ ``model.config.attention_backend``;
ep, expert_tp ↔ ``trainer.strategy.expert_{model,tensor}_parallel_size`` (expert TP null:
the TP size, planner's 0) with ``model.config.moe_token_dispatcher_type alltoall``; mixture of
experts ↔ ``model.config.num_moe_experts``, ``moe_router_topk``, ``moe_ffn_hidden_size``,
``moe_shared_expert_intermediate_size`` (shared experts × expert width), ``moe_layer_freq`` (a
0/1 list; an int k or Megatron-LM's list expression read as well), ``moe_router_num_groups``,
``moe_router_group_topk`` (GPTConfig / TransformerConfig fields); latent attention ↔
``model.config.multi_latent_attention``, ``q_lora_rank``, ``kv_lora_rank``, ``qk_head_dim``,
``qk_pos_emb_head_dim``, ``v_head_dim`` (nemo/collections/llm/gpt/model/deepseek.py,
``DeepSeekConfig``: an MLATransformerConfig, so these apply to the deepseek_v3 recipe).

What ``plan --emit nemo`` searches (``restriction``; planner.launch.restrict): as for
Megatron-LM (the same Megatron-Core checks: sequence parallelism on with tp > 1, no weight or
activation offloading, the optimizer offloaded to host memory only), in the default rank order:
NeMo has no key for ``use_tp_pp_dp_mapping``.

Over 500 lines by design: this framework's one knob ↔ key table and both directions that use
it (emit writes a strategy in the framework's terms, read takes a launch recipe back), kept in
one module so that a key cannot change in one direction and not the other (tests/test_launch.py
round-trips every knob).
"""

from __future__ import annotations

from typing import Any

import yaml

from hardware_catalog import MAX_SPEC_NODES, SAFE_LOADER, _node_count, load_stack
from planner.errors import InputError
from planner.launch import architecture
from planner.launch.common import (
    EXPERT_COUNTS,
    LaunchConfig,
    Parsed,
    Restriction,
    bounded_whole,
    finite,
    host_offloads,
    megatron_core_restriction,
    place_on_host,
    positive,
    read_experts,
    read_latent_attention,
    read_offload_fraction,
    refuse_precision,
    shown,
)
from planner.launch.nodes import node_layout
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

FORMAT = "nemo"
VERSION = "NeMo 2.6.0rc0 @ 8cfedd7203 (2025-09-20)"
STACK = "megatron-core"
"""The stack profile ``plan --emit nemo`` plans under unless --stack names another (NeMo 2
runs Megatron-Core)."""
STRATEGY, DDP, MODEL = "trainer.strategy.", "trainer.strategy.ddp.", "model.config."

KEYS: dict[str, str] = {
    "tp": STRATEGY + "tensor_model_parallel_size",
    "pp": STRATEGY + "pipeline_model_parallel_size",
    "interleave": STRATEGY + "virtual_pipeline_model_parallel_size",
    "cp": STRATEGY + "context_parallel_size",
    "first_stage_layers": STRATEGY + "num_layers_in_first_pipeline_stage",
    "last_stage_layers": STRATEGY + "num_layers_in_last_pipeline_stage",
    "sequence_parallel": STRATEGY + "sequence_parallel",
    "fsdp": STRATEGY + "fsdp",
    "dp_overlap": DDP + "overlap_grad_reduce",
    "param_overlap": DDP + "overlap_param_gather",
    "sharding": DDP + "data_parallel_sharding_strategy",
    "nodes": "trainer.num_nodes",
    "devices": "trainer.devices",
    "precision": "trainer.plugins.precision",
    "fp8": "trainer.plugins.fp8",
    "fp8_recipe": "trainer.plugins.fp8_recipe",
    "fp8_params": "trainer.plugins.fp8_params",
    "first_last_bf16": "trainer.plugins.first_last_layers_bf16",
    "bf16_first": "trainer.plugins.num_layers_at_start_in_bf16",
    "bf16_last": "trainer.plugins.num_layers_at_end_in_bf16",
    "grad_dtype": "trainer.plugins.grad_reduce_in_fp32",
    "seq_len": "data.seq_length",
    "global_batch": "data.global_batch_size",
    "micro_batch": "data.micro_batch_size",
    "layers": MODEL + "num_layers",
    "hidden": MODEL + "hidden_size",
    "ffn_hidden": MODEL + "ffn_hidden_size",
    "heads": MODEL + "num_attention_heads",
    "kv_heads": MODEL + "num_query_groups",
    "head_dim": MODEL + "kv_channels",
    "ffn_kind": MODEL + "gated_linear_unit",
    "tied_embeddings": MODEL + "share_embeddings_and_output_weights",
    "hidden_dropout": MODEL + "hidden_dropout",
    "attention_dropout": MODEL + "attention_dropout",
    "vocab": MODEL + "vocab_size",
    "model_seq_len": MODEL + "seq_length",
    "recompute": MODEL + "recompute_granularity",
    "recompute_method": MODEL + "recompute_method",
    "recompute_layers": MODEL + "recompute_num_layers",
    "tp_overlap": MODEL + "tp_comm_overlap",
    "cpu_offloading": MODEL + "cpu_offloading",
    "cpu_offloading_layers": MODEL + "cpu_offloading_num_layers",
    "offload_activations": MODEL + "cpu_offloading_activations",
    "offload_weights": MODEL + "cpu_offloading_weights",
    "attention": MODEL + "attention_backend",
    "zero_stage": "optim.config.use_distributed_optimizer",
    "offload_optimizer": "optim.config.optimizer_cpu_offload",
    "offload_optimizer_fraction": "optim.config.optimizer_offload_fraction",
    "precision_aware": "optim.config.use_precision_aware_optimizer",
    "ep": STRATEGY + "expert_model_parallel_size",
    "expert_tp": STRATEGY + "expert_tensor_parallel_size",
    "experts": MODEL + "num_moe_experts",
    "experts_per_token": MODEL + "moe_router_topk",
    "expert_ffn_hidden": MODEL + "moe_ffn_hidden_size",
    "shared_experts": MODEL + "moe_shared_expert_intermediate_size",
    "dense_layers": MODEL + "moe_layer_freq",
    "expert_groups": MODEL + "moe_router_num_groups",
    "expert_groups_per_token": MODEL + "moe_router_group_topk",
    "dispatcher": MODEL + "moe_token_dispatcher_type",
    "latent_attention": MODEL + "multi_latent_attention",
    "q_lora_rank": MODEL + "q_lora_rank",
    "kv_lora_rank": MODEL + "kv_lora_rank",
    "qk_head_dim": MODEL + "qk_head_dim",
    "rope_head_dim": MODEL + "qk_pos_emb_head_dim",
    "v_head_dim": MODEL + "v_head_dim",
    **{field: MODEL + key for field, key in architecture.NEMO_KEYS.items()},
}
"""The knob ↔ key table (dotted recipe attribute paths)."""

RECIPES = {
    "gpt3-175b": "gpt3_175b",
    "llama3-8b": "llama3_8b",
    "llama3-70b": "llama3_70b",
    "llama3-405b": "llama31_405b",
    "mixtral-8x7b": "mixtral_8x7b",
    "mixtral-8x22b": "mixtral_8x22b",
    "deepseek-v3": "deepseek_v3",
}
"""Planner catalog models ↔ NeMo recipe factories of the same shape."""

SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
MAX_DEPTH = 8
"""Levels of nesting read as dotted keys (the recipe keys have at most four)."""
KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}
MISSING_HINT = {knob: KEYS[knob] for knob in ("hidden", "layers", "heads", "ffn_hidden", "vocab")}


def restriction(model: ModelSpec, system: SystemSpec, job: JobSpec) -> Restriction:
    """The strategies a NeMo recipe runs (common.megatron_core_restriction), in the default
    rank order (NeMo has no key for Megatron-Core's use_tp_pp_dp_mapping)."""
    refuse_precision("nemo", job, ("fp8-rowwise", "nvfp4"), edges=True)
    cap = "the default rank order (no NeMo key for use_tp_pp_dp_mapping)"
    return megatron_core_restriction(system, ({"placement": 0},), cap)


def emit(model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy) -> LaunchConfig:
    """The plan as a nested YAML recipe override."""
    s = strategy
    notes: list[str] = []
    per_node = system.gpus_per_node
    nodes, devices = node_layout(s.gpus, per_node)
    values: dict[str, object] = {
        KEYS["nodes"]: nodes,
        KEYS["devices"]: devices,
        KEYS["tp"]: s.tp,
        KEYS["pp"]: s.pp,
        KEYS["interleave"]: s.interleave if s.interleave > 1 else None,
        KEYS["cp"]: s.cp,
        KEYS["sequence_parallel"]: s.sequence_parallel and s.tp > 1,
        KEYS["fsdp"]: "megatron" if s.zero_stage >= 2 else None,
        KEYS["dp_overlap"]: s.dp_overlap,
        KEYS["param_overlap"]: s.dp_overlap and s.zero_stage >= 1,
        KEYS["grad_dtype"]: job.grad_dtype == "fp32",
        KEYS["precision"]: "bf16-mixed",
    }
    if s.stage_layers is not None and len(s.stage_layers) != s.pp:
        notes.append(
            f"stage_layers of {len(s.stage_layers)} virtual stages: written as even stages (the "
            "NeMo 2 keys here hold first/last stage counts only; Megatron-LM's "
            "--pipeline-model-parallel-layout states it: planner launch --format megatron)"
        )
    elif s.stage_layers is not None:
        values[KEYS["first_stage_layers"]] = s.stage_layers[0]
        values[KEYS["last_stage_layers"]] = s.stage_layers[-1]
    if s.zero_stage >= 2:
        values[KEYS["sharding"]] = "optim_grads" if s.zero_stage == 2 else "optim_grads_params"
    values |= _precision_values(job, notes)
    seq_len = job.seq_len_for(model)
    values |= {
        KEYS["seq_len"]: seq_len,
        KEYS["global_batch"]: job.global_batch,
        KEYS["micro_batch"]: s.micro_batch,
        KEYS["layers"]: model.layers,
        KEYS["hidden"]: model.hidden,
        KEYS["ffn_hidden"]: model.ffn_hidden,
        KEYS["heads"]: model.heads,
        KEYS["kv_heads"]: model.kv_heads,
        KEYS["head_dim"]: model.head_dim,
        KEYS["ffn_kind"]: model.ffn_kind == "swiglu",
        KEYS["tied_embeddings"]: model.tied_embeddings,
        KEYS["hidden_dropout"]: 0.1 if model.dropout else 0.0,
        KEYS["attention_dropout"]: 0.1 if model.dropout else 0.0,
        KEYS["vocab"]: model.vocab,
        KEYS["model_seq_len"]: seq_len,
        KEYS["recompute"]: None if s.recompute == "none" else s.recompute,
        KEYS["tp_overlap"]: s.tp_overlap,
        KEYS["attention"]: _attention_backend(job, notes),
        KEYS["zero_stage"]: s.zero_stage >= 1,
    }
    values |= _expert_values(model, s) | _latent_attention_values(model)
    shape_values, shape_notes = architecture.nemo_values(model)
    values |= {MODEL + key: value for key, value in shape_values.items()}
    notes += shape_notes
    if s.placement == "tp-pp-dp":
        notes.append(
            "placement = tp-pp-dp: set Megatron-Core's use_tp_pp_dp_mapping (no NeMo recipe key)"
        )
    if s.recompute == "full" and s.recompute_layers is not None:
        per_chunk = s.recompute_layers // s.interleave
        values |= {KEYS["recompute_method"]: "block", KEYS["recompute_layers"]: per_chunk}
    elif s.recompute == "full":
        values |= {KEYS["recompute_method"]: "uniform", KEYS["recompute_layers"]: 1}
    if s.gpus % per_node:
        notes.append(f"gpus: {s.gpus} is not a whole number of {per_node}-GPU nodes")
    recipe = RECIPES.get(model.name)
    if model.ffn_kind == "swiglu" and recipe is None:
        notes.append(
            "ffn_kind = swiglu: set model.config.activation_func to F.silu in Python (the "
            "Llama recipes' configs do; a callable is not a YAML value)"
        )
    if model.is_latent_attention and recipe is None:
        notes.append(
            "latent attention: apply to the deepseek_v3 recipe (NeMo's multi-latent-attention "
            "fields belong to its DeepSeekConfig, not to GPTConfig)"
        )
    to_host, offload_notes = host_offloads(s, system, "NeMo", frozenset({"offload_optimizer"}))
    notes += offload_notes
    if to_host & {"offload_activations", "offload_weights"}:
        values |= {
            KEYS["cpu_offloading"]: True,
            KEYS["cpu_offloading_layers"]: model.layers - 1,
            KEYS["offload_activations"]: "offload_activations" in to_host,
            KEYS["offload_weights"]: "offload_weights" in to_host,
        }
    if "offload_optimizer" in to_host:
        values |= {
            KEYS["offload_optimizer"]: True,
            KEYS["offload_optimizer_fraction"]: s.offload_optimizer_fraction,
            KEYS["precision_aware"]: True,
        }
    base = f"nemo llm pretrain --factory {recipe}" if recipe else "a NeMo 2.0 pretrain recipe"
    header = [
        f"# NeMo 2.0 recipe overrides: {model.name} on {s.gpus} GPUs of {system.name}",
        f"# planner strategy: {s.describe()}",
        f"# keys as in {VERSION}; apply to {base} (recipe.<key> = value, or key=value on the CLI)",
        *(f"# note: {note}" for note in notes),
        *_environment(s),
        *_multi_node(recipe, nodes, devices, architecture.needs_single_connection(s)),
    ]
    body = yaml.dump(_nest(values), Dumper=_Dumper, sort_keys=False, width=100)
    return LaunchConfig(format=FORMAT, text="\n".join(header) + "\n" + body, notes=notes)


def _attention_backend(job: JobSpec, notes: list[str]) -> str:
    """model.config.attention_backend for the kernel the job's stack profile costs (Megatron-Core
    names: planner.launch.architecture.megatron_attention)."""
    kernel = load_stack(job.stack).attention_kernel
    flags, attention_notes = architecture.megatron_attention(job, kernel)
    notes += attention_notes
    return str(flags[0][1])


def _environment(s: Strategy) -> list[str]:
    """The environment line: CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 or cp > 1 (NeMo's
    PerfEnvPlugin sets it so before SM100; planner.launch.architecture)."""
    if not architecture.needs_single_connection(s):
        return []
    return [
        f"# environment: {architecture.ENV_EXPORT} before A100/H100 runs with tp > 1 or cp > 1 "
        "(NeMo's PerfEnvPlugin sets it; Megatron-Core's TP/CP overlap needs it)"
    ]


def _multi_node(recipe: str | None, nodes: int, devices: int, single: bool = False) -> list[str]:
    """How the recipe runs on ``nodes`` nodes: NeMo-Run's Slurm executor, one task per GPU, as
    NeMo's scripts/llm/pretraining.py --slurm builds it (at 8cfedd7203); ``single``: with the
    executor's CUDA_DEVICE_MAX_CONNECTIONS=1 (_environment)."""
    if nodes == 1:
        return []
    env = ', env_vars={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}' if single else ""
    factory = f"llm.{recipe}.pretrain_recipe" if recipe else "your pretrain recipe"
    return [
        f"# {nodes} nodes × {devices} GPUs under Slurm, with NeMo-Run (as NeMo's "
        "scripts/llm/pretraining.py --slurm):",
        f"#   recipe = {factory}(num_nodes={nodes}, num_gpus_per_node={devices}); set the keys "
        "below on it",
        f"#   executor = run.SlurmExecutor(account=..., partition=..., nodes={nodes}, "
        f'ntasks_per_node={devices}, gpus_per_node={devices}, exclusive=True, mem="0"{env})',
        "#   run.run(recipe, executor=executor)",
    ]


class _Dumper(yaml.SafeDumper):
    """Safe YAML with lists on one line (``moe_layer_freq: [0, 0, 0, 1, ...]``)."""


_Dumper.add_representer(
    list, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, True)
)


def _expert_values(model: ModelSpec, s: Strategy) -> dict[str, object]:
    """The MoE keys: the expert layout (expert TP null: Megatron-Core's default, the TP size),
    the all-to-all dispatcher planner costs, and the shape (``moe_layer_freq`` as a 0/1 list)."""
    if not model.is_moe:
        return {}
    dense = model.dense_layers
    return {
        KEYS["ep"]: s.ep,
        KEYS["expert_tp"]: s.expert_tp or None,
        KEYS["dispatcher"]: "alltoall",
        KEYS["experts"]: model.experts,
        KEYS["experts_per_token"]: model.experts_per_token,
        KEYS["expert_ffn_hidden"]: model.expert_width,
        KEYS["shared_experts"]: model.shared_experts * model.expert_width or None,
        KEYS["dense_layers"]: [0] * dense + [1] * (model.layers - dense) if dense else 1,
        KEYS["expert_groups"]: model.expert_groups or None,
        KEYS["expert_groups_per_token"]: model.expert_groups_per_token or None,
    }


def _latent_attention_values(model: ModelSpec) -> dict[str, object]:
    if not model.is_latent_attention:
        return {}
    return {
        KEYS["latent_attention"]: True,
        KEYS["q_lora_rank"]: model.q_lora_rank or None,
        KEYS["kv_lora_rank"]: model.kv_lora_rank,
        KEYS["qk_head_dim"]: model.head_dim,
        KEYS["rope_head_dim"]: model.rope_head_dim,
        KEYS["v_head_dim"]: model.v_head_dim or model.head_dim,
    }


def _nest(values: dict[str, object]) -> dict[str, object]:
    nested: dict[str, object] = {}
    for key, value in values.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[leaf] = value  # type: ignore[index]
    return nested


def _flatten(data: dict[object, object]) -> dict[str, object]:
    """Dotted key → value of a nested mapping, down to MAX_DEPTH levels (a mapping deeper, or an
    empty one, is a value); iterative, so a deeply nested file costs neither recursion nor
    keys that grow with the depth."""
    flat: dict[str, object] = {}
    stack: list[tuple[str, int, dict[object, object]]] = [("", 1, data)]
    while stack:
        prefix, depth, node = stack.pop()
        for key, value in node.items():
            if isinstance(value, dict) and value and depth < MAX_DEPTH:
                stack.append((f"{prefix}{key}.", depth + 1, value))
            else:
                flat[f"{prefix}{key}"] = value
    return flat


class _Keys:
    """The flattened recipe with typed access; remembers which keys were read."""

    def __init__(self, flat: dict[str, object]) -> None:
        self.flat = flat
        self.read: set[str] = set()
        self.parents = {
            ".".join(parts[:end]) for parts in (key.split(".") for key in flat)
            for end in range(1, len(parts))
        }  # fmt: skip
        """Every dotted prefix of a key: a recipe key among them holds a mapping."""

    def get(self, knob: str, kind: type, default: Any = None) -> Any:
        key = KEYS[knob]
        self.read.add(key)
        value = self.flat.get(key)
        if key in self.parents or isinstance(value, dict):
            raise InputError(f"nemo key {key}: a mapping, expected {KINDS[kind]}")
        if value is None:
            return default
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"nemo key {key} = {shown(value)}: expected a whole number")
        if kind is int:
            bounded_whole(f"nemo key {key}", value)
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise InputError(f"nemo key {key} = {shown(value)}: expected a number")
        if kind is float:
            finite(f"nemo key {key}", value)
        if kind is bool and not isinstance(value, bool):
            raise InputError(f"nemo key {key} = {shown(value)}: expected true or false")
        if kind is str and not isinstance(value, str):
            raise InputError(f"nemo key {key} = {shown(value)}: expected a string")
        return value

    def choice(self, knob: str, allowed: tuple[str, ...]) -> str | None:
        value = self.get(knob, str)
        if value is not None and value not in allowed:
            raise InputError(
                f"nemo key {KEYS[knob]} = {shown(value)}: allowed: {', '.join(allowed)}"
            )
        return value


def read(text: str, system: SystemSpec) -> Parsed:
    """A YAML recipe override, nested or with dotted keys."""
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"nemo recipe: not valid YAML ({first})") from None
    except RecursionError:
        raise InputError("nemo recipe: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError("nemo recipe: expected a mapping of recipe keys at the top")
    if _node_count(data, MAX_SPEC_NODES) > MAX_SPEC_NODES:
        raise InputError(f"nemo recipe: more than {MAX_SPEC_NODES:,} values")
    keys = _Keys(_flatten(data))
    parsed = Parsed(fmt=FORMAT)
    tp = keys.get("tp", int, 1)
    parsed.knobs = {
        "tp": tp,
        "pp": keys.get("pp", int, 1),
        "cp": keys.get("cp", int, 1),
        "interleave": keys.get("interleave", int, 1),
        "micro_batch": keys.get("micro_batch", int, 1),
        "sequence_parallel": bool(keys.get("sequence_parallel", bool, False)) and tp > 1,
        "dp_overlap": keys.get("dp_overlap", bool, False),
        "tp_overlap": keys.get("tp_overlap", bool, False),
        "ep": keys.get("ep", int, 1),
        "expert_tp": keys.get("expert_tp", int, 0),
    }
    keys.get("param_overlap", bool)
    parsed.end_stage_layers = (
        keys.get("first_stage_layers", int),
        keys.get("last_stage_layers", int),
    )
    nodes = positive(KEYS["nodes"], keys.get("nodes", int))
    devices = positive(KEYS["devices"], keys.get("devices", int))
    if nodes is not None or devices is not None:
        parsed.gpus = (nodes or 1) * (devices or 1)
        parsed.gpus_from = f"trainer.num_nodes × trainer.devices = {nodes or 1} × {devices or 1}"
    _read_recompute(keys, parsed)
    _read_zero(keys, parsed)
    _read_offload(keys, parsed, system)
    _read_job(keys, parsed)
    _read_shape(keys, parsed)
    parsed.architecture = architecture.read_nemo(
        {
            "norm": keys.choice("norm", tuple(architecture.MEGATRON_NORMS.values())),
            "norm_eps": keys.get("norm_eps", float),
            "position_embedding": keys.choice("position_embedding", ("learned_absolute", "rope")),
            "rope_base": keys.get("rope_base", float),
            "linear_bias": keys.get("linear_bias", bool),
        }
    )
    keys.choice("rope_type", ("rope", "yarn"))
    _read_latent_attention(keys, parsed)
    _read_experts(keys, parsed)
    parsed.unsupported = [key for key in keys.flat if key not in keys.read]
    return parsed


def _read_recompute(keys: _Keys, parsed: Parsed) -> None:
    granularity = keys.choice("recompute", ("full", "selective"))
    method = keys.choice("recompute_method", ("uniform", "block"))
    layers = keys.get("recompute_layers", int)
    if granularity == "full" and method == "block":
        positive(KEYS["recompute_layers"], layers)
        parsed.recompute_layers_per_chunk = layers or 1
    parsed.knobs["recompute"] = granularity or "none"


def _read_zero(keys: _Keys, parsed: Parsed) -> None:
    fsdp = keys.choice("fsdp", ("megatron", "pytorch"))
    sharding = keys.choice("sharding", tuple(SHARDING))
    distributed = keys.get("zero_stage", bool, False)
    if fsdp == "megatron":
        parsed.knobs["zero_stage"] = SHARDING[sharding or "optim_grads_params"]
    elif fsdp == "pytorch":
        parsed.knobs["zero_stage"] = 3
    else:
        parsed.knobs["zero_stage"] = 1 if distributed else 0


def _read_offload(keys: _Keys, parsed: Parsed, system: SystemSpec) -> None:
    wanted = []
    if keys.get("cpu_offloading", bool, False):
        keys.get("cpu_offloading_layers", int)
        if keys.get("offload_activations", bool, True):
            wanted.append("offload_activations")
        if keys.get("offload_weights", bool, False):
            wanted.append("offload_weights")
    if keys.get("offload_optimizer", bool, False):
        keys.get("precision_aware", bool)
        # Megatron-Core's OptimizerConfig offloads none of it unless the fraction is set.
        fraction = keys.get("offload_optimizer_fraction", float, 0.0)
        where = f"nemo key {KEYS['offload_optimizer_fraction']}"
        if read_offload_fraction(parsed, "offload_optimizer", fraction, where):
            wanted.append("offload_optimizer")
    place_on_host(parsed, system, wanted)


FP8_RECIPES = {"fp8-delayed": "delayed", "fp8-current": "tensorwise", "mxfp8": "mxfp8"}
"""planner recipe → MegatronMixedPrecision ``fp8_recipe`` (Megatron-Core's fp8_recipe)."""


def _precision_values(job: JobSpec, notes: list[str]) -> dict[str, object]:
    """The FP8 recipe as ``trainer.plugins.fp8`` hybrid + ``fp8_recipe``, and the bf16
    first/last blocks; torchao's fp8-rowwise is emitted as tensorwise and nvfp4 (no fp4
    fields in MegatronMixedPrecision at the version this module targets) as bf16, noted."""
    if job.precision == "bf16":
        return {}
    if job.precision == "nvfp4":
        notes.append(
            "precision = nvfp4: NeMo's MegatronMixedPrecision has no fp4 fields here; emitted "
            "as bf16 (use Megatron-Bridge's bf16_with_nvfp4_mixed)"
        )
        return {}
    recipe = FP8_RECIPES.get(job.precision)
    if recipe is None:
        notes.append(
            f"precision = {job.precision}: torchao's recipe, Megatron has none; emitted as "
            "fp8_recipe tensorwise (fp8-current)"
        )
        recipe = "tensorwise"
    values: dict[str, object] = {KEYS["fp8"]: "hybrid", KEYS["fp8_recipe"]: recipe}
    first, last = job.bf16_first_blocks or 0, job.bf16_last_blocks or 0
    if first or last:
        values |= {
            KEYS["first_last_bf16"]: True,
            KEYS["bf16_first"]: first,
            KEYS["bf16_last"]: last,
        }
    if job.fp8_params:
        values[KEYS["fp8_params"]] = True
    return values


def _read_job(keys: _Keys, parsed: Parsed) -> None:
    job = parsed.job
    for knob in ("global_batch", "seq_len"):
        value = keys.get(knob, int)
        if value is not None:
            job[knob] = value
    precision = keys.choice("precision", ("bf16-mixed", "16-mixed", "32", "bf16", "16"))
    fp8 = keys.get("fp8", str)
    recipe = keys.choice("fp8_recipe", ("delayed", "tensorwise", "mxfp8", "blockwise"))
    if precision is not None or fp8 is not None:
        names = {value: name for name, value in FP8_RECIPES.items()}
        job["precision"] = names.get(recipe or "delayed", "fp8-current") if fp8 else "bf16"
        if fp8 and recipe == "blockwise":
            parsed.notes.append("precision: fp8_recipe blockwise costed as fp8-current")
    if keys.get("first_last_bf16", bool):
        job["bf16_first_blocks"] = keys.get("bf16_first", int, 1)
        job["bf16_last_blocks"] = keys.get("bf16_last", int, 1)
    if fp8 and keys.get("fp8_params", bool):
        job["fp8_params"] = True
    if precision in ("16-mixed", "16"):
        parsed.notes.append("precision: 16-mixed (fp16) is costed as bf16 (the same 16-bit peak)")
    elif precision == "32":
        parsed.notes.append("precision: 32 (fp32 training) is costed as bf16")
    reduce_fp32 = keys.get("grad_dtype", bool)
    if reduce_fp32 is not None:
        job["grad_dtype"] = "fp32" if reduce_fp32 else "bf16"
    backend = keys.choice("attention", ("flash", "fused", "unfused", "local", "auto"))
    if backend is not None:
        job["attention"] = "materialized" if backend in ("unfused", "local") else "flash"


def _read_shape(keys: _Keys, parsed: Parsed) -> None:
    shape = parsed.shape
    for knob in ("layers", "hidden", "heads", "ffn_hidden", "kv_heads", "head_dim", "vocab"):
        value = keys.get(knob, int)
        if value is not None:
            shape[knob] = value
    shape["ffn_kind"] = "swiglu" if keys.get("ffn_kind", bool, False) else "gelu"
    if "ffn_hidden" not in shape and "hidden" in shape:
        shape["ffn_hidden"] = 4 * shape["hidden"]  # TransformerConfig's default
    shape["tied_embeddings"] = keys.get("tied_embeddings", bool, True)
    dropouts = [keys.get("hidden_dropout", float, 0.1), keys.get("attention_dropout", float, 0.1)]
    shape["dropout"] = not all(value == 0 for value in dropouts)
    seq = keys.get("model_seq_len", int)
    if seq is not None:
        shape["seq_len"] = seq


def _read_latent_attention(keys: _Keys, parsed: Parsed) -> None:
    """Both latent ranks must be stated (null q_lora_rank: no query compression): the recipe's
    own values are not known here (DeepSeekConfig's differ from MLATransformerConfig's)."""
    if not keys.get("latent_attention", bool, False):
        return
    for knob in ("kv_lora_rank", "q_lora_rank"):
        if KEYS[knob] not in keys.flat:
            raise InputError(
                f"nemo key {KEYS['latent_attention']} = true needs {KEYS[knob]} "
                "(the latent width; null q_lora_rank: no query compression)"
            )
    ranks = {knob: keys.get(knob, int) for knob in ("kv_lora_rank", "q_lora_rank")}
    ranks |= {
        "head_dim": keys.get("qk_head_dim", int),
        "rope_head_dim": keys.get("rope_head_dim", int),
        "v_head_dim": keys.get("v_head_dim", int),
    }
    read_latent_attention(parsed, ranks)


def _read_experts(keys: _Keys, parsed: Parsed) -> None:
    dispatcher = keys.get("dispatcher", str)
    experts = keys.get("experts", int)
    frequency = keys.flat.get(KEYS["dense_layers"])
    keys.read.add(KEYS["dense_layers"])
    if not experts:
        return
    found: dict[str, object] = {name: keys.get(name, int) for name in EXPERT_COUNTS}
    found["dense_layers"] = frequency
    read_experts(parsed, experts, found, dispatcher, KEYS, "nemo key ")
