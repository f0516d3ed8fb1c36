"""torchtitan job TOML: the ``[model]``, ``[training]``, ``[parallelism]``,
``[activation_checkpoint]`` and ``[compile]`` sections of a ``--job.config_file``.

Keys and semantics are those of torchtitan v0.2.2 (commit 73a0e6979, 2026-02-20), the last
release with TOML job files (main replaced them by Python config functions in 9810191bb,
2026-02-23): ``torchtitan/config/job_config.py``, ``torchtitan/distributed/pipeline_parallel.py``
(virtual stages = ⌈(layers + first_stage_less_layers + last_stage_less_layers) /
layers_per_stage⌉; multi-stage schedules default to 2 stages per rank),
``torchtitan/models/llama3/infra/parallelize.py`` (FSDP2 when ``data_parallel_shard_degree`` > 1
or cp > 1, HSDP with a replicate degree too, DDP only alone) and
``torchtitan/models/llama3/__init__.py`` (the flavors 8B, 70B, 405B).

Mapping (planner knob ↔ key): tp, pp, cp ↔ ``parallelism.tensor_parallel_degree``,
``pipeline_parallel_degree``, ``context_parallel_degree``; dp and zero_stage ↔
``data_parallel_shard_degree`` (FSDP2 over dp·cp, torchtitan's fsdp mesh dp_shard × cp, so
any cp > 1 shards too: ``fsdp_reshard_after_forward = "always"`` ZeRO-3; ``"never"`` keeps the
parameters gathered from forward to backward, ZeRO-2 as PyTorch's ``fully_shard`` documents;
``"default"`` is "never" with pp > 1, else "always", and is read so but not emitted) and
``data_parallel_replicate_degree`` (DDP: ZeRO-0, only without TP, CP and PP; with a shard
degree too, HSDP, read as ZeRO-2/3 over all of dp); ZeRO-1 has no torchtitan equivalent.
micro_batch ↔
``pipeline_parallel_microbatch_size`` with pp (``training.local_batch_size`` = global batch / dp),
``training.local_batch_size`` without (gradient accumulation up to ``training.global_batch_size``);
interleave ↔ ``pipeline_parallel_schedule = "Interleaved1F1B"`` with
``pipeline_parallel_layers_per_stage`` = layers / (pp·v) (first/last stage less layers 0;
stage_layers of pp·v virtual stages f, m, ..., m, l with f, l ≤ m ↔ layers per stage m and first/
last stage less layers m − f, m − l);
recompute ↔ ``activation_checkpoint.mode`` (selective: ``selective_ac_option = "op"``, op-level
SAC); sequence_parallel: torchtitan's TP always shards norms over the sequence (tp > 1 ⇒ SP);
tp_overlap ↔ ``enable_async_tensor_parallel`` (needs ``compile.enable``); dp_overlap: FSDP2
always prefetches; offload of weights and optimizer to the host tier ↔
``training.enable_cpu_offload`` (FSDP2 CPU offload: parameters, gradients and optimizer state
together); precision ↔ ``model.converters`` and its section (_precision_sections:
fp8-current / fp8-rowwise ↔ ``quantize.linear.float8`` with ``recipe_name`` tensorwise /
rowwise, ``"float8"`` read too; mxfp8 ↔ ``quantize.linear.mx``); compile ↔
``compile.enable`` (JobSpec.compile: emitted where the job sets it or AsyncTP needs it; read
back only when off, on being the torchtitan stack's default); grad_dtype ↔
``training.mixed_precision_reduce`` (``float32`` only); ep ↔
``parallelism.expert_parallel_degree``, expert_tp ↔ ``expert_tensor_parallel_degree`` (1, or
the TP degree: planner's 0; ``torchtitan/distributed/parallel_dims.py`` allows no other) for
the MoE flavor torchtitan has (deepseek_v3 671B; other MoE models have none, and are refused).

What ``plan --emit torchtitan`` searches (``restriction``; planner.launch.restrict): ZeRO-2 or
ZeRO-3 (FSDP2), or ZeRO-0 as DDP without TP, CP and PP; no ZeRO-1. Sequence parallelism on
(with tp > 1 torchtitan always shards the norms), DP overlap on where the stack overlaps, the
default rank order, no partial recompute (torchtitan recomputes every block or every N-th),
no offloading (``enable_cpu_offload`` moves parameters, gradients and optimizer state together
and only under FSDP; torchtitan has no activation offloading), expert TP = TP. The job must
reduce gradients in fp32 and use flash attention (torchtitan has no other): otherwise an error.

Over 500 lines by design: this framework's one knob ↔ key table and both directions that use
it (emit writes a strategy in the framework's terms, read takes a launch file back), kept in
one module so that a key cannot change in one direction and not the other (tests/test_launch.py
round-trips every knob).
"""

from __future__ import annotations

import tomllib
from typing import Any

import hardware_catalog
from planner.errors import InputError
from planner.launch.common import (
    NO_OFFLOAD,
    SHAPE_FIELDS,
    LaunchConfig,
    Parsed,
    Restriction,
    host_offloads,
    host_tier,
    in_range,
    positive,
    refuse_precision,
    shown,
)
from planner.launch.nodes import multi_node_comments, node_layout, torchrun
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec
from planner.specs import limits as lim

FORMAT = "torchtitan"
VERSION = "torchtitan v0.2.2 @ 73a0e6979 (2026-02-20)"
STACK = "torchtitan"
"""The stack profile ``plan --emit torchtitan`` plans under unless --stack names another."""

KEYS: dict[str, str] = {
    "model": "model.name",
    "flavor": "model.flavor",
    "precision": "model.converters",
    "micro_batch": "parallelism.pipeline_parallel_microbatch_size",
    "local_batch": "training.local_batch_size",
    "global_batch": "training.global_batch_size",
    "seq_len": "training.seq_len",
    "param_dtype": "training.mixed_precision_param",
    "grad_dtype": "training.mixed_precision_reduce",
    "offload": "training.enable_cpu_offload",
    "replicate": "parallelism.data_parallel_replicate_degree",
    "shard": "parallelism.data_parallel_shard_degree",
    "reshard": "parallelism.fsdp_reshard_after_forward",
    "tp": "parallelism.tensor_parallel_degree",
    "tp_overlap": "parallelism.enable_async_tensor_parallel",
    "pp": "parallelism.pipeline_parallel_degree",
    "schedule": "parallelism.pipeline_parallel_schedule",
    "interleave": "parallelism.pipeline_parallel_layers_per_stage",
    "first_less": "parallelism.pipeline_parallel_first_stage_less_layers",
    "last_less": "parallelism.pipeline_parallel_last_stage_less_layers",
    "cp": "parallelism.context_parallel_degree",
    "recompute": "activation_checkpoint.mode",
    "selective_option": "activation_checkpoint.selective_ac_option",
    "float8_recipe": "quantize.linear.float8.recipe_name",
    "mx_recipe": "quantize.linear.mx.recipe_name",
    "compile": "compile.enable",
    "compile_components": "compile.components",
    "ep": "parallelism.expert_parallel_degree",
    "expert_tp": "parallelism.expert_tensor_parallel_degree",
}
"""The knob ↔ key table (section.key)."""

FLAVORS = {
    ("llama3", "8B"): "llama3-8b",
    ("llama3", "70B"): "llama3-70b",
    ("llama3", "405B"): "llama3-405b",
    ("deepseek_v3", "671B"): "deepseek-v3",
}
"""torchtitan model flavors ↔ planner catalog models of the same shape (llama3_args in
torchtitan/models/llama3/__init__.py: dim, n_layers, n_heads, n_kv_heads, FFN from
ffn_dim_multiplier and multiple_of, 128,256-token tokenizer; untied, no dropout;
deepseekv3_args["671B"] in torchtitan/models/deepseek_v3/__init__.py: 61 layers, 3 dense, 256
routed experts of width 2,048 and one shared, top 8 of 4 of 8 groups, MLA ranks 1,536/512)."""

FLOAT8 = ("quantize.linear.float8", "float8")
MX = "quantize.linear.mx"
FLOAT8_RECIPES = {"fp8-current": "tensorwise", "fp8-rowwise": "rowwise"}
"""planner recipe → torchao Float8Linear ``recipe_name`` (torchtitan/config/job_config.py
Float8Linear @ 73a0e6979: tensorwise, rowwise, rowwise_with_gw_hp; None is tensorwise)."""
MISSING_HINT: dict[str, str] = {}
"""torchtitan gives the model by flavor only (an unknown flavor is its own error)."""
SINGLE_STAGE = ("1F1B", "GPipe")
"""Schedules with one stage per rank (PipelineScheduleSingle); the others are multi-stage."""


def restriction(model: ModelSpec, system: SystemSpec, job: JobSpec) -> Restriction:
    """The strategies torchtitan runs (the module docstring); the job's fields it cannot run
    and a MoE or latent-attention model without a flavor are InputErrors."""
    refuse_precision("torchtitan", job, ("fp8-delayed", "nvfp4"), edges=False)
    if job.fp8_params:
        raise InputError(
            "--emit torchtitan: fp8_params = true: torchtitan keeps its parameters in bf16/fp32 "
            "(enable_fsdp_float8_all_gather gathers in float8, keeps no float8 parameters); "
            "allowed: false"
        )
    _flavor(model)
    grad_dtype = job.grad_dtype or hardware_catalog.load_stack(job.stack).grad_dtype
    if grad_dtype != "fp32":
        raise InputError(
            f"--emit torchtitan: grad_dtype = {grad_dtype} (the job's or its stack's): torchtitan "
            "reduces gradients in float32 only; allowed: --grad-dtype fp32"
        )
    if job.attention != "flash":
        raise InputError(
            f"--emit torchtitan: attention = {job.attention}: torchtitan runs SDPA / flex "
            "attention only; allowed: --attention flash"
        )
    zero = (
        {"zero_stage": 2},
        {"zero_stage": 3},
        {"zero_stage": 0, "tp": 1, "cp": 1, "pp": 1},
    )
    fixed = NO_OFFLOAD | {"sequence_parallel": 1, "recompute_layers": 0, "placement": 0}
    if hardware_catalog.load_stack(job.stack).dp_overlap:
        fixed["dp_overlap"] = 1
    if job.compile is False:  # AsyncTP needs compile.enable
        fixed["tp_overlap"] = 0
    if model.is_moe:
        fixed["expert_tp"] = 0
    caps = [
        "ZeRO-2/3 (FSDP2), or ZeRO-0 as DDP without TP, CP and PP (no ZeRO-1)",
        "sequence parallelism on, DP overlap on, the default rank order",
        "no partial recompute, no offloading (enable_cpu_offload moves parameters, gradients "
        "and optimizer state together, under FSDP only)",
    ]
    if model.is_moe:
        caps.append("expert TP = TP")
    return Restriction().times(zero, caps[0]).pinned(fixed, "; ".join(caps[1:]))


def _flavor(model: ModelSpec) -> tuple[str, str] | None:
    """The torchtitan flavor of ``model``; None for a dense SwiGLU model that has none (a
    Llama-3 shape, to be added to llama3_args); an InputError for a GELU (GPT-style) model,
    whose family torchtitan lacks, and for a MoE or latent-attention one."""
    flavor = next((key for key, name in FLAVORS.items() if name == model.name), None)
    if flavor is None and model.ffn_kind != "swiglu":
        raise InputError(
            f"--emit torchtitan: model {model.name!r} is a GPT-style model (ffn_kind = "
            f"{model.ffn_kind}: a GELU FFN with LayerNorm and learned positions); torchtitan "
            f"{VERSION.split(' @')[0].removeprefix('torchtitan ')} has no such model family (its "
            "dense ones, llama3 and qwen3, are SwiGLU, RMSNorm and RoPE); allowed: --emit "
            "megatron, --emit nemo"
        )
    if flavor is None and (model.is_moe or model.is_latent_attention):
        kind = "mixture-of-experts" if model.is_moe else "latent-attention"
        raise InputError(
            f"--emit torchtitan: model {model.name!r} is a {kind} model without a torchtitan "
            "flavor (the MoE flavor planner maps: deepseek_v3 671B); allowed: --emit megatron, "
            "--emit nemo"
        )
    return flavor


def emit(model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy) -> LaunchConfig:
    """The plan as a torchtitan job TOML."""
    s = strategy
    notes: list[str] = []
    flavor = _flavor(model)
    if flavor is None:
        flavor = ("llama3", model.name)
        notes.append(
            f"model: {model.name} is not a torchtitan flavor (llama3 8B, 70B, 405B); a Llama-3 "
            "shape (SwiGLU, RMSNorm, RoPE): add it to llama3_args in Python, flavor name as here"
        )
    if job.attention != "flash":
        notes.append("attention = materialized: torchtitan runs SDPA/flex attention (flash)")
    if job.grad_dtype != "fp32":
        notes.append("grad_dtype = bf16: torchtitan reduces gradients in float32 only")
    if s.tp > 1 and not s.sequence_parallel:
        notes.append("sequence_parallel = false: torchtitan's TP always shards norms (SP)")
    if not s.dp_overlap:
        notes.append("dp_overlap = false: torchtitan's FSDP2 always overlaps (prefetch)")
    if s.placement != "tp-cp-dp-pp":
        notes.append(f"placement = {s.placement}: torchtitan's device mesh puts pp outermost")
    if s.recompute_layers is not None:
        notes.append(
            f"recompute_layers = {s.recompute_layers}: torchtitan recomputes every block or "
            "every N-th (selective_ac_option = N), not the first r of a stage; emitted as full"
        )
    replicate, shard, reshard = _data_parallel(s, notes)
    offload = _offload(s, system, notes)
    per_rank = job.global_batch // s.dp
    sections: dict[str, dict[str, object]] = {
        "model": {"name": flavor[0], "flavor": flavor[1]},
        "training": {
            "local_batch_size": per_rank if s.pp > 1 else s.micro_batch,
            "global_batch_size": job.global_batch,
            "seq_len": job.seq_len_for(model),
            "mixed_precision_param": "bfloat16",
            "mixed_precision_reduce": "float32",
            "enable_cpu_offload": offload,
        },
        "parallelism": {
            "data_parallel_replicate_degree": replicate,
            "data_parallel_shard_degree": shard,
            "fsdp_reshard_after_forward": reshard,
            "tensor_parallel_degree": s.tp,
            "enable_async_tensor_parallel": s.tp_overlap,
            "pipeline_parallel_degree": s.pp,
            "context_parallel_degree": s.cp,
        },
        "activation_checkpoint": {"mode": s.recompute},
    }
    if model.is_moe:
        sections["parallelism"] |= {
            "expert_parallel_degree": s.ep,
            "expert_tensor_parallel_degree": 1 if s.expert_tp == 1 else s.tp,
        }
        notes += _expert_layout_notes(s)
    for name, values in _precision_sections(job, notes).items():
        sections.setdefault(name, {}).update(values)
    if job.precision != "bf16" and model.is_moe:
        notes.append(
            f"precision = {job.precision}: the routed experts' grouped GEMMs take float8 only "
            "with torchtitan's prototype converter quantize.grouped_mm.float8 (fqns = "
            '["experts"], torchao nightly); not emitted, so they run in bf16'
        )
    if s.pp > 1:
        sections["parallelism"] |= {
            "pipeline_parallel_schedule": "Interleaved1F1B" if s.interleave > 1 else "1F1B",
            "pipeline_parallel_microbatch_size": s.micro_batch,
            "pipeline_parallel_layers_per_stage": model.layers // (s.pp * s.interleave),
            "pipeline_parallel_first_stage_less_layers": 0,
            "pipeline_parallel_last_stage_less_layers": 0,
        }
        sections["parallelism"] |= _uneven_stages(s, model.layers, notes)
    if s.recompute == "selective":
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    if s.tp_overlap and job.compile is False:
        notes.append("compile = false: enable_async_tensor_parallel needs compile.enable; enabled")
    if job.compile or s.tp_overlap:
        sections["compile"] = {"enable": True, "components": ["model", "loss"]}
    elif job.compile is False:
        sections["compile"] = {"enable": False}
    lines = [
        f"# torchtitan job config: {model.name} on {s.gpus} GPUs of {system.name}",
        f"# planner strategy: {s.describe()}",
        f"# keys as in {VERSION}",
        *(f"# note: {note}" for note in notes),
        *_launch_lines(s.gpus, system.gpus_per_node),
    ]
    for name, values in sections.items():
        lines += ["", f"[{name}]"] + [f"{key} = {_toml(value)}" for key, value in values.items()]
    return LaunchConfig(format=FORMAT, text="\n".join(lines) + "\n", notes=notes)


def _launch_lines(gpus: int, per_node: int) -> list[str]:
    """How to run the file: on one node torchtitan's run_train.sh (NGPU processes, one
    torchrun); on many, the torchrun line of its multinode_trainer.slurm (v0.2.2: c10d
    rendezvous at the first node, -m torchtitan.train --job.config_file), the same on every
    node."""
    nodes, nproc = node_layout(gpus, per_node)
    if nodes == 1:
        lines = [f"# run on one node: NGPU={nproc} CONFIG_FILE=<this file> ./run_train.sh"]
        if gpus > per_node:
            lines.append(
                f"# note: gpus: {gpus} is not a whole number of {per_node}-GPU nodes; adapt "
                "--nnodes/--nproc-per-node of multinode_trainer.slurm"
            )
        return lines
    command = f"{torchrun(nodes, nproc)} -m torchtitan.train --job.config_file <this file>"
    return [
        *multi_node_comments(nodes, nproc, command),
        f"#   (on each node without Slurm: {command})",
    ]


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def _data_parallel(s: Strategy, notes: list[str]) -> tuple[int, int, str]:
    """(replicate degree, shard degree, fsdp_reshard_after_forward) for dp and zero_stage.
    FSDP2 shards over dp·cp (torchtitan's fsdp mesh is dp_shard × cp) and reshards after the
    forward ("always": ZeRO-3) or keeps the parameters to the backward ("never": ZeRO-2;
    "default" is "never" with pp > 1, so it is not emitted); DDP (the replicate degree) runs
    only without TP, CP and PP."""
    if s.dp * s.cp == 1:
        if s.zero_stage:
            notes.append(f"zero_stage = {s.zero_stage}: no data parallelism to shard over")
        return 1, 1, "default"
    if s.zero_stage == 0 and s.tp == s.cp == s.pp == 1:
        return s.dp, 1, "default"
    if s.zero_stage == 0:
        notes.append(
            "zero_stage = 0: torchtitan's DDP (data_parallel_replicate_degree) runs only "
            "without TP, CP and PP (parallelize.py: 'DDP has not supported > 1D parallelism'); "
            "emitted as ZeRO-2 (FSDP2, fsdp_reshard_after_forward = never)"
        )
    if s.zero_stage == 1:
        notes.append(
            "zero_stage = 1: no torchtitan equivalent (FSDP2 shards gradients too); emitted as "
            "ZeRO-2 (fsdp_reshard_after_forward = never)"
        )
    return 1, s.dp, "always" if s.zero_stage == 3 else "never"


def _offload(s: Strategy, system: SystemSpec, notes: list[str]) -> bool:
    to_host, offload_notes = host_offloads(s, system, "torchtitan")
    notes += offload_notes
    if "offload_activations" in to_host:
        notes.append("offload_activations: torchtitan v0.2.2 has no activation offloading")
    pair = {"offload_weights", "offload_optimizer"}
    if pair <= to_host:
        if s.zero_stage < 2 or s.dp == 1:
            notes.append("offload_weights: enable_cpu_offload applies with FSDP (dp > 1) only")
        return True
    for knob in sorted(pair & to_host):
        notes.append(
            f"{knob}: torchtitan's enable_cpu_offload moves parameters, gradients and "
            "optimizer state together; one alone is not expressible"
        )
    return False


class _Keys:
    """The parsed TOML with typed access by ``section.key``; remembers which keys were read."""

    def __init__(self, data: dict[str, object]) -> None:
        self.flat: dict[str, object] = {}
        self._flatten("", data)
        self.read: set[str] = set()

    def _flatten(self, prefix: str, data: dict[str, object]) -> None:
        """Sections' keys as dotted keys, and deeper tables (``[quantize.linear.float8]``)
        where a key of the table lies below them; any other table stays one value (a type
        error where a key's value is expected)."""
        for key, value in data.items():
            path = f"{prefix}{key}"
            nested = not prefix or any(k.startswith(f"{path}.") for k in KEYS.values())
            if isinstance(value, dict) and nested:
                self._flatten(f"{path}.", value)
            else:
                self.flat[path] = value

    def get(self, knob: str, kind: type, default: Any = None) -> Any:
        key = KEYS[knob]
        self.read.add(key)
        value = self.flat.get(key, default)
        if value is default:
            return value
        wrong = isinstance(value, bool) != (kind is bool) or not isinstance(value, kind)
        if wrong:
            names = {int: "a whole number", bool: "true or false", str: "a string", list: "a list"}
            raise InputError(f"torchtitan key {key} = {shown(value)}: expected {names[kind]}")
        return value


def read(text: str, system: SystemSpec) -> Parsed:
    """A torchtitan job TOML; the job runs under the torchtitan stack profile (``STACK``) unless
    the command names another (--stack)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"torchtitan job config: not valid TOML ({error})") from None
    except RecursionError:
        raise InputError("torchtitan job config: nested too deeply") from None
    keys = _Keys(data)
    parsed = Parsed(fmt=FORMAT)
    parsed.job["stack"] = STACK
    tp = in_range(f"torchtitan key {KEYS['tp']}", keys.get("tp", int, 1), 1, lim.MAX_GPUS)
    pp = in_range(f"torchtitan key {KEYS['pp']}", keys.get("pp", int, 1), 1, lim.MAX_LAYERS)
    parsed.knobs = {
        "tp": tp,
        "pp": pp,
        "cp": keys.get("cp", int, 1),
        "sequence_parallel": tp > 1,
        "tp_overlap": keys.get("tp_overlap", bool, False),
        "dp_overlap": True,
    }
    keys.get("compile_components", list)
    _read_model(keys, parsed)
    _read_experts(keys, parsed, tp)
    _read_batch(keys, parsed, pp)
    _read_data_parallel(keys, parsed, tp, pp)
    _read_pipeline(keys, parsed, pp)
    _read_recompute(keys, parsed)
    _read_job(keys, parsed)
    if keys.get("offload", bool, False):
        host = host_tier(system)
        if host is None:
            parsed.notes.append(
                f"offload_weights: system {system.name!r} has no host-memory tier; "
                "enable_cpu_offload ignored"
            )
        else:
            parsed.knobs |= {"offload_weights": host, "offload_optimizer": host}
    parsed.unsupported = [key for key in keys.flat if key not in keys.read]
    return parsed


def _read_model(keys: _Keys, parsed: Parsed) -> None:
    name = keys.get("model", str, "llama3")
    flavor = keys.get("flavor", str, "debugmodel")
    catalog = FLAVORS.get((name, flavor))
    if catalog is None:
        known = ", ".join(f"{n} {f}" for n, f in FLAVORS)
        parsed.unknown_model = (
            f"torchtitan model {name} flavor {flavor} has no planner catalog model of its shape "
            f"(known: {known})"
        )
        parsed.notes.append(f"model: torchtitan flavor {name} {flavor} is not one of {known}")
        return
    model = hardware_catalog.load_model(catalog)
    parsed.shape |= {field: getattr(model, field) for field in SHAPE_FIELDS}


def _expert_layout_notes(s: Strategy) -> list[str]:
    """What torchtitan's expert mesh cannot say of the plan's (parallel_dims.py: expert TP 1 or
    the TP degree; with expert TP 1 the ep group takes the TP ranks first; apply_moe_ep_tp:
    without expert parallelism the experts are split over TP)."""
    notes = []
    if s.expert_tp not in (0, 1, s.tp):
        notes.append(
            f"expert_tp = {s.expert_tp}: torchtitan allows expert TP 1 or the TP degree; "
            f"emitted as {s.tp}"
        )
    if s.ep == 1 and s.expert_tp == 1 and s.tp > 1:
        notes.append(
            "expert_tp = 1: without expert parallelism torchtitan splits the experts over TP"
        )
    if s.ep > 1 and s.expert_tp == 1 and s.ep % s.tp:
        notes.append(
            f"ep = {s.ep}: with expert TP 1 torchtitan's expert group takes all {s.tp} TP ranks "
            "first, so ep must be a multiple of tp"
        )
    return notes


def _read_experts(keys: _Keys, parsed: Parsed, tp: int) -> None:
    """ep and expert TP of an MoE flavor: torchtitan's expert TP degree (default 1) is 1 or the
    TP degree, and without expert parallelism the experts follow TP (planner's 0); a dense
    flavor ignores both, as torchtitan does."""
    ep, expert_tp = keys.get("ep", int, 1), keys.get("expert_tp", int, 1)
    positive(KEYS["ep"], ep)
    if expert_tp not in (1, tp):
        raise InputError(
            f"torchtitan key {KEYS['expert_tp']} = {expert_tp}: allowed 1 or the TP degree {tp}"
        )
    if parsed.shape.get("experts"):
        split_over_tp = ep == 1 or expert_tp == tp
        parsed.knobs |= {"ep": ep, "expert_tp": 0 if split_over_tp else 1}


def _read_batch(keys: _Keys, parsed: Parsed, pp: int) -> None:
    local = keys.get("local_batch", int, 8)
    micro = keys.get("micro_batch", int, 1)
    parsed.knobs["micro_batch"] = micro if pp > 1 else local
    global_batch = keys.get("global_batch", int, -1)
    if global_batch > 0:
        parsed.job["global_batch"] = global_batch
    else:
        parsed.global_per_dp = local
    seq = keys.get("seq_len", int, 2048)
    parsed.job["seq_len"] = seq


def _read_data_parallel(keys: _Keys, parsed: Parsed, tp: int, pp: int) -> None:
    """dp and zero_stage: FSDP2 wherever the shard degree (-1: the GPUs left) or cp exceeds 1,
    ZeRO-3 when it reshards after the forward ("always", or "default" without pp), else
    ZeRO-2; DDP (a replicate degree alone) is ZeRO-0 and refuses TP and PP, as torchtitan
    does."""
    replicate = keys.get("replicate", int, 1)
    shard = keys.get("shard", int, -1)
    if replicate < 1 or (shard < 1 and shard != -1):
        raise InputError(
            f"torchtitan keys {KEYS['replicate']} = {replicate}, {KEYS['shard']} = {shard}: "
            "allowed: whole numbers ≥ 1 (the shard degree may be -1: the remaining GPUs)"
        )
    reshard = keys.get("reshard", str, "default")
    if reshard not in ("default", "always", "never"):
        raise InputError(
            f"torchtitan key {KEYS['reshard']} = {shown(reshard)}: allowed: default, always, never"
        )
    if shard == 1 and parsed.knobs["cp"] == 1:
        if replicate > 1 and max(tp, pp) > 1:
            raise InputError(
                f"torchtitan keys {KEYS['replicate']} = {replicate}, {KEYS['shard']} = 1 (DDP) "
                "with tensor or pipeline parallelism: torchtitan refuses it ('DDP has not "
                "supported > 1D parallelism'); allowed: a shard degree > 1 (FSDP2)"
            )
        parsed.knobs["zero_stage"] = 0
    else:
        gathered = reshard == "never" or (reshard == "default" and pp > 1)
        parsed.knobs["zero_stage"] = 2 if gathered else 3
    if shard != -1:
        parsed.dp = replicate * shard
    else:
        parsed.dp_multiple = replicate
    if replicate > 1 and parsed.knobs["zero_stage"]:
        parsed.notes.append(
            f"zero_stage: HSDP (replicate and shard degrees) read as ZeRO-"
            f"{parsed.knobs['zero_stage']} over all of dp; planner does not model sharding over "
            "a subgroup"
        )


def _read_pipeline(keys: _Keys, parsed: Parsed, pp: int) -> None:
    schedule = keys.get("schedule", str, "1F1B")
    per_stage = keys.get("interleave", int)
    first, last = keys.get("first_less", int, 1), keys.get("last_less", int, 1)
    if pp == 1:
        parsed.knobs["interleave"] = 1
        return
    if schedule not in ("1F1B", "Interleaved1F1B", "GPipe", "InterleavedZeroBubble"):
        parsed.notes.append(f"interleave: schedule {schedule} costed as (interleaved) 1F1B")
    if per_stage is not None and schedule in SINGLE_STAGE and (first or last):
        ends = (per_stage - first, per_stage - last)
        if min(ends) < 1:
            raise InputError(
                f"torchtitan: {per_stage} layers per stage less {first}/{last} on the first/last "
                "stage leaves a stage without layers"
            )
        parsed.knobs["interleave"] = 1
        parsed.knobs["stage_layers"] = (ends[0], *[per_stage] * (pp - 2), ends[1])
        return
    if (first or last) and per_stage is None:
        parsed.notes.append(
            f"pp: first/last stages carry {first}/{last} fewer layers; planner splits evenly"
        )
    parsed.virtual_less_layers = (first, last)
    if per_stage is None:
        parsed.knobs["interleave"] = 1 if schedule in SINGLE_STAGE else 2
    else:
        parsed.layers_per_virtual_stage = per_stage
        parsed.extra_stage_layers = first + last


def _read_recompute(keys: _Keys, parsed: Parsed) -> None:
    mode = keys.get("recompute", str, "selective")
    option = keys.get("selective_option", str, "2")
    if mode not in ("none", "selective", "full", "memory_budget"):
        raise InputError(
            f"torchtitan key {KEYS['recompute']} = {shown(mode)}: allowed: none, selective, full, "
            "memory_budget"
        )
    if mode == "memory_budget":
        parsed.notes.append("recompute: memory_budget (compiler-chosen) costed as selective")
        mode = "selective"
    elif mode == "selective" and option != "op":
        parsed.notes.append(
            f"recompute: selective_ac_option = {option} (every {option}th layer fully "
            "recomputed) costed as selective"
        )
    parsed.knobs["recompute"] = mode


def _precision_sections(job: JobSpec, notes: list[str]) -> dict[str, dict[str, object]]:
    """``model.converters`` and the converter's section for the job's recipe: fp8-current and
    fp8-rowwise ↔ ``quantize.linear.float8`` with ``recipe_name`` tensorwise / rowwise;
    mxfp8 ↔ ``quantize.linear.mx`` (recipe_name mxfp8_cublas); Transformer Engine's
    fp8-delayed (torchao dropped delayed scaling) is emitted as tensorwise and nvfp4 (no
    torchtitan converter at this version) as bf16, both noted."""
    if job.precision == "bf16":
        return {}
    if job.precision == "nvfp4":
        notes.append("precision = nvfp4: torchtitan has no NVFP4 linear converter; emitted as bf16")
        return {}
    if job.precision == "mxfp8":
        return {"model": {"converters": [MX]}, MX: {"recipe_name": "mxfp8_cublas"}}
    recipe = FLOAT8_RECIPES.get(job.precision)
    if recipe is None:
        notes.append(
            f"precision = {job.precision}: torchao has no delayed scaling; emitted as "
            "recipe_name tensorwise (fp8-current)"
        )
        recipe = "tensorwise"
    return {"model": {"converters": [FLOAT8[0]]}, FLOAT8[0]: {"recipe_name": recipe}}


def _read_job(keys: _Keys, parsed: Parsed) -> None:
    converters = keys.get("precision", list, [])
    recipe = keys.get("float8_recipe", str, "tensorwise")
    keys.get("mx_recipe", str)
    if any(name in FLOAT8 for name in converters):
        if recipe not in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
            raise InputError(
                f"torchtitan key {KEYS['float8_recipe']} = {shown(recipe)}: allowed: tensorwise, "
                "rowwise, rowwise_with_gw_hp"
            )
        parsed.job["precision"] = "fp8-current" if recipe == "tensorwise" else "fp8-rowwise"
        if recipe == "rowwise_with_gw_hp":
            parsed.notes.append(
                "precision: rowwise_with_gw_hp (weight gradient in bf16) costed as fp8-rowwise"
            )
    elif MX in converters:
        parsed.job["precision"] = "mxfp8"
    else:
        parsed.job["precision"] = "bf16"
    if keys.get("compile", bool) is False:  # on is the torchtitan stack's default (None)
        parsed.job["compile"] = False
    if keys.get("param_dtype", str, "bfloat16") != "bfloat16":
        parsed.notes.append("precision: mixed_precision_param float32 is costed as bf16")
    reduce = keys.get("grad_dtype", str, "float32")
    if reduce != "float32":
        raise InputError(f"torchtitan key {KEYS['grad_dtype']} = {shown(reduce)}: allowed: float32")
    parsed.job["grad_dtype"] = "fp32"


def _uneven_virtual_stages(s: Strategy, notes: list[str]) -> dict[str, int]:
    """Virtual stages (f, m, ..., m, l) with f, l ≤ m as layers_per_stage m and
    first/last_stage_less_layers m − f, m − l (torchtitan's generate_split_points: its 405B
    interleaved run's 7,8x14,7); other layouts cannot be said."""
    stages = s.stage_layers
    middle = stages[1]
    if len(set(stages[1:-1])) > 1 or stages[0] > middle or stages[-1] > middle:
        notes.append(
            f"stage_layers of {len(stages)} virtual stages: torchtitan takes equal virtual "
            "stages with a lighter first and last; emitted as an even split"
        )
        return {}
    return {
        "pipeline_parallel_layers_per_stage": middle,
        "pipeline_parallel_first_stage_less_layers": middle - stages[0],
        "pipeline_parallel_last_stage_less_layers": middle - stages[-1],
    }


def _uneven_stages(s: Strategy, layers: int, notes: list[str]) -> dict[str, int]:
    """stage_layers (f, m, ..., m, l) as layers_per_stage m with first/last_stage_less_layers
    m − f and m − l (torchtitan counts the missing layers as the embedding's and head's
    weight); a first or last stage heavier than the middle ones cannot be said."""
    if s.stage_layers is None:
        return {}
    if len(s.stage_layers) != s.pp:
        return _uneven_virtual_stages(s, notes)
    first, middle, last = s.stage_blocks(layers)
    if first > middle or last > middle:
        notes.append(
            f"stage_layers = {','.join(map(str, s.stage_layers))}: torchtitan cannot give the "
            "first or last stage more layers than the others; emitted as an even split"
        )
        return {}
    return {
        "pipeline_parallel_layers_per_stage": middle,
        "pipeline_parallel_first_stage_less_layers": middle - first,
        "pipeline_parallel_last_stage_less_layers": middle - last,
    }
