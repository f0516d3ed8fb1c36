"""What a launch file must say beyond the strategy for the job to start as planned: the model's
architecture (norm, positions, biases), the attention kernel the stack profile costs, and the
environment the framework asserts at start-up. Shared by the Megatron-LM, Megatron-AxoNN and
NeMo writers and readers (planner.launch.megatron, .axonn, .nemo).

Sources (the commits the format modules cite):

- Megatron-LM main @ d98e8a64dd (2026-08-22), ``megatron/training/arguments.py``
  ``_add_network_size_args``: ``--position-embedding-type`` (choices learned_absolute, rope,
  yarn, mrope, relative, none; default learned_absolute), ``--rotary-base`` (``type=int``,
  default 10000), ``--untie-embeddings-and-output-weights``, ``--swiglu``,
  ``--group-query-attention``; and ``megatron/core/transformer/transformer_config.py``
  (flags generated from its fields): ``normalization: Literal['LayerNorm', 'RMSNorm'] =
  "LayerNorm"`` (``--normalization``), ``layernorm_epsilon`` = 1e-5 (``--norm-epsilon``),
  ``add_bias_linear`` = True (``--disable-bias-linear``), ``attention_backend: AttnBackend =
  auto`` (``--attention-backend``; ``megatron/core/transformer/enums.py`` ``AttnBackend``:
  flash, fused, unfused, local, auto), ``flash_attention_version: Optional[Literal[2, 3, 4]]``
  (``--flash-attention-version``, pins Transformer Engine's FlashAttention generation), and
  MLATransformerConfig ``rope_type = "yarn"`` (``--rope-type {rope, yarn}``; multi-latent
  attention takes YaRN unless told ``rope``). ``--attention-backend fused`` is Transformer
  Engine's cuDNN fused attention: ``megatron/core/models/common/language_module/
  language_module.py`` ``_set_attention_backend`` sets ``NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1``
  for it.
- The start-up assertion, ``megatron/training/arguments.py`` ``validate_args`` @ d98e8a64dd::

      if (args.tensor_model_parallel_size > 1 or args.context_parallel_size > 1) \\
          and get_device_arch_version() < 10:
          # CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since the Blackwell
          # architecture   [one line in the source]
          if args.use_torch_fsdp2 or args.use_megatron_fsdp:
              warn_rank_0(...)
          elif args.overlap_moe_expert_parallel_comm:
              warn_rank_0(...)
          else:
              assert os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') == "1", \\
                  "Using tensor model parallelism or context parallelism require setting the "
                  "environment variable " "CUDA_DEVICE_MAX_CONNECTIONS to 1"   [two lines there]

  and, with Megatron-FSDP, ``assert os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') != "1",
  'FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.'``. So the file exports it as 1 with
  tp > 1 or cp > 1 and no Megatron-FSDP (ZeRO ≤ 1; planner never writes the MoE overlap), on
  every architecture (Blackwell does not assert it and accepts 1).
- Megatron-AxoNN @ 6d60f45 (2024-01-09), ``megatron/arguments.py``: ``validate_args`` raises
  unless ``CUDA_DEVICE_MAX_CONNECTIONS`` is "1" whenever sequence parallelism or
  ``async_tensor_model_parallel_allreduce`` is on (lines 333-341; the latter defaults to True,
  ``--no-async-tensor-model-parallel-allreduce``), so its file always exports it; it has
  ``--normalization {LayerNorm, RMSNorm}``, ``--norm-epsilon``, ``--position-embedding-type
  {learned_absolute, rope}``, ``--disable-bias-linear``, but no ``--rotary-base`` (its
  RotaryEmbedding keeps base 10000) and no ``--attention-backend`` (``--use-flash-attn``).
- NeMo 2.6.0rc0 @ 8cfedd7203: ``nemo/collections/llm/gpt/model/base.py`` GPTConfig
  ``position_embedding_type: Literal["learned_absolute", "rope"]``, ``rotary_base: int = 10000``
  with Megatron-Core's TransformerConfig fields above; ``nemo/lightning/run/plugins.py``
  ``PerfEnvPlugin.setup`` sets ``executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"`` with
  tp > 1 or cp > 1 before SM100 ("32" from SM100), and
  ``nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py`` warns without it.
"""

from __future__ import annotations

from planner.specs import ARCHITECTURE_FIELDS, JobSpec, ModelSpec, Strategy

ENV_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
ENV_EXPORT = f"export {ENV_VAR}=1"
"""The line the Megatron-LM and Megatron-AxoNN files run before torchrun (module docstring)."""

MEGATRON_NORMS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
MEGATRON_POSITIONS = {"learned": "learned_absolute", "rope": "rope"}
"""planner ↔ Megatron-Core names; ALiBi and Gopher's relative encoding have none."""
DEFAULT_NORM_EPS = 1e-5
DEFAULT_ROPE_BASE = 10000
"""Megatron-LM's (and NeMo GPTConfig's) defaults: ``--norm-epsilon``, ``--rotary-base``."""

MEGATRON_BACKENDS = {"flash2": "flash", "flash3": "flash", "cudnn": "fused", "none": "unfused"}
"""A stack profile's ``attention_kernel`` ↔ Megatron-Core's ``--attention-backend``."""
FLASH_VERSIONS = {"flash2": 2, "flash3": 3}
"""The FlashAttention generation ``--flash-attention-version`` pins for the flash kernels."""


def needs_single_connection(strategy: Strategy, fmt: str = "megatron") -> bool:
    """Whether the framework asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for ``strategy``: Megatron-LM
    with tp > 1 or cp > 1 and no Megatron-FSDP; Megatron-AxoNN always (module docstring)."""
    if fmt == "axonn":
        return True
    return (strategy.tp > 1 or strategy.cp > 1) and strategy.zero_stage < 2


def env_reason(fmt: str = "megatron") -> str:
    """Why the file exports ENV_VAR, for the comment beside it."""
    if fmt == "axonn":
        return "Megatron-AxoNN's validate_args raises without it (arguments.py:333-341)"
    return "Megatron-LM's validate_args asserts it with tp > 1 or cp > 1 before Blackwell"


def megatron_flags(
    model: ModelSpec, fmt: str = "megatron"
) -> tuple[list[tuple[str, object]], list[str]]:
    """Megatron-LM's architecture flags for ``model`` beyond the defaults (LayerNorm ε 1e-5,
    learned absolute positions, biased linears), and notes for what it cannot state.
    ``fmt`` ``axonn``: Megatron-AxoNN's older set (no ``--rotary-base``, no ``--rope-type``)."""
    flags: list[tuple[str, object]] = []
    notes: list[str] = []
    if model.norm != "layernorm":
        flags.append(("--normalization", MEGATRON_NORMS[model.norm]))
    if model.norm_eps != DEFAULT_NORM_EPS:
        flags.append(("--norm-epsilon", model.norm_eps))
    if model.position_embedding == "rope":
        flags.append(("--position-embedding-type", "rope"))
        base = model.rope_base
        if fmt == "axonn":
            if base != DEFAULT_ROPE_BASE:
                notes.append(
                    f"rope_base = {base:g}: Megatron-AxoNN has no --rotary-base (its RoPE keeps "
                    f"base {DEFAULT_ROPE_BASE}); set rotary_base in its RotaryEmbedding"
                )
        else:
            if base != int(base):
                notes.append(f"rope_base = {base:g}: Megatron-LM's --rotary-base is a whole number")
            flags.append(("--rotary-base", round(base)))
            if model.is_latent_attention:
                flags.append(("--rope-type", "rope"))
    elif model.position_embedding != "learned":
        notes.append(
            f"position_embedding = {model.position_embedding}: Megatron-LM's GPT has no such "
            "--position-embedding-type; written with learned absolute positions (another model)"
        )
    if not model.linear_bias:
        flags.append(("--disable-bias-linear", None))
    return flags, notes


MEGATRON_POSITION_CHOICES = ("learned_absolute", "rope", "yarn", "mrope", "relative", "none")
"""``--position-embedding-type``'s choices at d98e8a64dd (YaRN and M-RoPE read as RoPE)."""


def read_megatron(
    norm: str | None,
    position: str | None,
    norm_eps: float | None,
    rope_base: float | None,
    no_bias: bool,
) -> dict[str, object]:
    """ModelSpec architecture fields from Megatron-LM's flags as read (None where absent:
    Megatron's default); ``none`` positions state nothing."""
    fields: dict[str, object] = {
        "norm": "rmsnorm" if norm == "RMSNorm" else "layernorm",
        "norm_eps": DEFAULT_NORM_EPS if norm_eps is None else norm_eps,
        "linear_bias": not no_bias,
    }
    position = position or "learned_absolute"
    if position in ("rope", "yarn", "mrope"):
        fields["position_embedding"] = "rope"
        fields["rope_base"] = DEFAULT_ROPE_BASE if rope_base is None else rope_base
    elif position in ("learned_absolute", "relative"):
        fields["position_embedding"] = "learned" if position == "learned_absolute" else position
    return fields


def megatron_attention(job: JobSpec, kernel: str) -> tuple[list[tuple[str, object]], list[str]]:
    """Megatron-Core's attention flags for the kernel the stack profile costs (``kernel``, its
    ``attention_kernel``): cudnn → ``--attention-backend fused``, flash2/flash3 → ``flash``
    pinned to that FlashAttention generation, a materialised job (or ``none``) → ``unfused``;
    Triton has no Megatron-Core backend (noted, written as flash)."""
    if job.attention != "flash" or kernel == "none":
        return [("--attention-backend", "unfused")], []
    if kernel not in MEGATRON_BACKENDS:
        note = (
            f"attention: the stack costs the {kernel} kernel, which Megatron-Core has no backend "
            "for (flash, fused = cuDNN, unfused, local); written as --attention-backend flash"
        )
        return [("--attention-backend", "flash")], [note]
    flags: list[tuple[str, object]] = [("--attention-backend", MEGATRON_BACKENDS[kernel])]
    if kernel in FLASH_VERSIONS:
        flags.append(("--flash-attention-version", FLASH_VERSIONS[kernel]))
    return flags, []


NEMO_KEYS = {
    "norm": "normalization",
    "norm_eps": "layernorm_epsilon",
    "position_embedding": "position_embedding_type",
    "rope_base": "rotary_base",
    "linear_bias": "add_bias_linear",
    "rope_type": "rope_type",
}
"""planner field ↔ NeMo ``model.config.<key>`` (GPTConfig / TransformerConfig fields)."""


def nemo_values(model: ModelSpec) -> tuple[dict[str, object], list[str]]:
    """NeMo's architecture keys for ``model`` (under ``model.config.``), every one written
    (the recipes' configs differ from GPTConfig's defaults), and notes for what has none."""
    values: dict[str, object] = {
        NEMO_KEYS["norm"]: MEGATRON_NORMS[model.norm],
        NEMO_KEYS["norm_eps"]: model.norm_eps,
        NEMO_KEYS["linear_bias"]: model.linear_bias,
    }
    notes: list[str] = []
    if model.position_embedding in MEGATRON_POSITIONS:
        values[NEMO_KEYS["position_embedding"]] = MEGATRON_POSITIONS[model.position_embedding]
    else:
        notes.append(
            f"position_embedding = {model.position_embedding}: NeMo's GPTConfig has no such "
            "position_embedding_type (learned_absolute, rope); left to the recipe"
        )
    if model.position_embedding == "rope":
        values[NEMO_KEYS["rope_base"]] = round(model.rope_base)
        if model.is_latent_attention:
            values[NEMO_KEYS["rope_type"]] = "rope"
    return values, notes


def read_nemo(stated: dict[str, object | None]) -> dict[str, object]:
    """ModelSpec architecture fields from NeMo's keys (``stated``: field → the key's value, None
    where absent): only what the file states (absent keys are the recipe's, unknown here)."""
    fields: dict[str, object] = {}
    if stated.get("norm") is not None:
        fields["norm"] = "rmsnorm" if stated["norm"] == "RMSNorm" else "layernorm"
    if stated.get("norm_eps") is not None:
        fields["norm_eps"] = stated["norm_eps"]
    if stated.get("linear_bias") is not None:
        fields["linear_bias"] = stated["linear_bias"]
    position = stated.get("position_embedding")
    if position is not None:
        fields["position_embedding"] = "rope" if position == "rope" else "learned"
    if position == "rope" and stated.get("rope_base") is not None:
        fields["rope_base"] = stated["rope_base"]
    return fields


def mismatch_note(stated: dict[str, object], model: ModelSpec, fmt: str) -> str | None:
    """A note where the configuration's architecture (``stated``: the ARCHITECTURE_FIELDS it
    gives) differs from ``model``'s: the framework would build another model than the one
    planned (planner's estimate does not change: module docstring of planner.specs.model)."""
    differ = [
        f"{name} {_shown(stated[name])} vs {_shown(getattr(model, name))}"
        for name in ARCHITECTURE_FIELDS
        if name in stated and stated[name] != getattr(model, name)
    ]
    if not differ:
        return None
    return (
        f"architecture: the {fmt} configuration builds another model than {model.name} "
        f"({', '.join(differ)}); planner's estimate is the same"
    )


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
