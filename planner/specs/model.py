"""The model to train (ModelSpec): the transformer's shape, its experts and its default sequence, as
the catalog's model files state them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.specs import limits as lim
from planner.specs.base import Spec

FfnKind = Literal["gelu", "swiglu"]
NormKind = Literal["layernorm", "rmsnorm"]
PositionEmbedding = Literal["learned", "rope", "alibi", "relative"]


MODEL_NAMING_FIELDS = ("name", "description", "aliases", "sources")
"""The ModelSpec fields that name and document a model rather than shape it."""

ARCHITECTURE_FIELDS = ("norm", "norm_eps", "position_embedding", "rope_base", "linear_bias")
"""The ModelSpec fields a launch file must state for the framework to build this model, but
that planner's cost model does not distinguish (a norm's or a bias's few parameters per block;
positions cost nothing it counts): the launch writers emit them (planner.launch.architecture)
and the readers check them against the model."""


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

    Architecture (ARCHITECTURE_FIELDS, for the launch files): ``norm`` (``layernorm`` or
    ``rmsnorm``) with epsilon ``norm_eps``; ``position_embedding`` ``learned`` (absolute, GPT),
    ``rope`` (rotary, base ``rope_base``), ``alibi`` (BLOOM) or ``relative`` (Gopher);
    ``linear_bias`` whether the attention and FFN matrices have biases. The defaults are GPT's
    (and Megatron-LM's): LayerNorm, ε 1e-5, learned positions, biases.
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
    norm: NormKind = "layernorm"
    norm_eps: float = Field(default=1e-5, gt=0, lt=1)
    position_embedding: PositionEmbedding = "learned"
    rope_base: float = Field(default=10000.0, gt=1, le=1e12)
    """RoPE's base θ (rope_theta), with ``position_embedding: rope``."""
    linear_bias: bool = True
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
