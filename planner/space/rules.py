"""The rules a strategy must satisfy for a model, job and system (Megatron-LM's constraints).

``strategy_violations`` lists every broken rule as one line naming the knob, its value and what
is allowed; ``check_strategy`` raises the first as an InputError. The CP-SAT model encodes the
same rules as constraints (constraints/), and the tests check the two agree.
"""

from __future__ import annotations

from planner.errors import InputError
from planner.specs import OFFLOAD_KINDS, JobSpec, ModelSpec, StackProfile, Strategy, SystemSpec


def divisors(value: int) -> list[int]:
    """Positive divisors of ``value`` in increasing order."""
    small = [d for d in range(1, int(value**0.5) + 1) if value % d == 0]
    return sorted(set(small + [value // d for d in small]))


def cp_allowed(cp: int, seq_len: int) -> bool:
    """Megatron-Core's causal load balancing splits each sequence into 2·cp equal chunks."""
    return cp == 1 or seq_len % (2 * cp) == 0


def cp_values(gpus: int, seq_len: int) -> list[int]:
    """The cp values that divide the GPU count and split the sequence (cp_allowed)."""
    return [c for c in divisors(gpus) if cp_allowed(c, seq_len)]


def _allowed(values: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (", ..." if len(values) > limit else "")


def strategy_violations(
    model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy, gpus: int | None = None
) -> list[str]:
    """Every rule the strategy breaks, one line each (empty when it is valid)."""
    s = strategy
    problems: list[str] = []
    if gpus is not None and s.gpus != gpus:
        problems.append(f"{s.product_text()} must equal gpus = {gpus}")
    if system.max_gpus is not None and s.gpus > system.max_gpus:
        problems.append(f"gpus = {s.gpus}: system {system.name!r} has at most {system.max_gpus}")
    tp_ok = [t for t in divisors(model.heads) if model.splits_over(t)]
    if s.tp not in tp_ok:
        problems.append(
            f"tp = {s.tp} must divide {model.tp_widths} (or be a multiple of the KV heads); "
            f"allowed: {_allowed(tp_ok)}"
        )
    if s.stage_layers is not None:
        problems.extend(_layout_violations(model, s))
    elif model.layers % s.pp:
        problems.append(
            f"pp = {s.pp} must divide layers ({model.layers}) unless stage_layers states the "
            f"blocks per stage (--stage-layers); allowed: {_allowed(divisors(model.layers))}"
        )
    if job.global_batch % (s.dp * s.micro_batch):
        problems.append(
            f"global batch {job.global_batch} must be divisible by dp·micro_batch = "
            f"{s.dp}·{s.micro_batch} = {s.dp * s.micro_batch}"
        )
    if s.interleave > 1:
        problems.extend(_interleave_violations(model, job, s))
    if s.recompute_layers is not None:
        problems.extend(_partial_recompute_violations(s))
    if s.placement == "tp-pp-dp" and s.cp > 1:
        problems.append(
            f"placement = tp-pp-dp needs cp = 1 (Megatron's --use-tp-pp-dp-mapping has no CP); "
            f"it has cp = {s.cp}"
        )
    problems.extend(_expert_violations(model, s))
    seq_len = job.seq_len_for(model)
    if not cp_allowed(s.cp, seq_len):
        problems.append(
            f"cp = {s.cp}: the sequence ({seq_len}) must split into 2·cp = {2 * s.cp} equal "
            f"chunks (Megatron-Core's causal load balancing); allowed: "
            f"{_allowed([c for c in divisors(seq_len // 2) if c > 1] if seq_len % 2 == 0 else [])}"
        )
    problems.extend(calculon_violations(model, job, s))
    problems.extend(axonn_violations(model, job, s))
    problems.extend(stack_violations(job, s))
    tiers = len(system.memory_tiers) - 1
    for kind in OFFLOAD_KINDS:
        knob = f"offload_{kind}"
        tier, fraction = getattr(s, knob), getattr(s, f"{knob}_fraction")
        if tier > tiers:
            allowed = "0 (no offload tier in this system)" if tiers == 0 else f"0..{tiers}"
            problems.append(f"{knob} = {tier}: allowed tiers are {allowed}")
        if tier == 0 and fraction != 1:
            problems.append(
                f"{knob}_fraction = {fraction:g} needs {knob} ≥ 1 (the tier that share goes to)"
            )
    return problems


MIN_OFFLOAD_BLOCKS = 3
"""Calculon refuses any offloading with fewer blocks per processor (llm.py compile)."""


def calculon_arithmetic(job: JobSpec) -> bool:
    """Whether the job's stack runs Calculon's arithmetic (StackProfile.arithmetic)."""
    import hardware_catalog

    return hardware_catalog.load_stack(job.stack).arithmetic == "calculon"


def stack_violations(job: JobSpec, s: Strategy) -> list[str]:
    """What the job's stack does not run: an interleaved schedule where it has none
    (StackProfile.interleaved_schedule), a ZeRO stage beyond its deepest (max_zero_stage)."""
    import hardware_catalog

    stack = hardware_catalog.load_stack(job.stack)
    problems = []
    if s.interleave > 1 and not stack.interleaved_schedule:
        problems.append(
            f"interleave = {s.interleave}: stack {stack.name!r} runs no interleaved pipeline "
            "schedule; allowed: 1"
        )
    if s.zero_stage > stack.max_zero_stage:
        problems.append(
            f"zero_stage = {s.zero_stage}: stack {stack.name!r} implements ZeRO up to stage "
            f"{stack.max_zero_stage}; allowed: 0..{stack.max_zero_stage}"
        )
    return problems


def calculon_violations(model: ModelSpec, job: JobSpec, s: Strategy) -> list[str]:
    """Calculon's space, under its arithmetic (calculon-ai/calculon llm.py): no context
    parallelism; optimizer sharding or none (zero_stage 0 or 1, planner/cost/calculon.py), no
    ZeRO-2/3; whole tensor classes offloaded (no shares), and only with at least 3 blocks per
    processor (compile); pp dividing the blocks, no stage layout or partial recompute; tp
    dividing the heads, the hidden size and the FFN (_build_attn_block's asserts) and the
    micro-batch's tokens (compile: batch_seq % tensor_par)."""
    if not calculon_arithmetic(job):
        return []
    problems = []
    if s.cp != 1:
        problems.append(f"cp = {s.cp}: Calculon has no context parallelism; allowed: 1")
    if s.zero_stage > 1:
        problems.append(
            f"zero_stage = {s.zero_stage}: Calculon has optimizer sharding (1) or none (0); "
            "allowed: 0, 1"
        )
    for kind in OFFLOAD_KINDS:
        fraction = getattr(s, f"offload_{kind}_fraction")
        if getattr(s, f"offload_{kind}") and fraction != 1:
            problems.append(
                f"offload_{kind}_fraction = {fraction:g}: Calculon offloads whole tensor "
                "classes; allowed: 1"
            )
    offloaded = s.offload_weights or s.offload_activations or s.offload_optimizer
    if offloaded and model.layers < MIN_OFFLOAD_BLOCKS * s.pp:
        problems.append(
            f"offloading with pp = {s.pp}: {model.layers / s.pp:g} blocks per GPU; Calculon "
            f"offloads only with at least {MIN_OFFLOAD_BLOCKS} (pp ≤ {model.layers // 3})"
        )
    if s.stage_layers is not None or s.recompute_layers is not None:
        problems.append(
            "stage_layers and recompute_layers: Calculon has even stages and whole-stage "
            "recompute only; allowed: unset"
        )
    widths = (model.hidden, model.ffn_hidden)
    if any(width % s.tp for width in widths):
        problems.append(
            f"tp = {s.tp} must divide the hidden size ({model.hidden}) and the FFN "
            f"({model.ffn_hidden}) under Calculon's arithmetic"
        )
    if (s.micro_batch * job.seq_len_for(model)) % s.tp:
        problems.append(
            f"tp = {s.tp} must divide the micro-batch's tokens "
            f"({s.micro_batch}·{job.seq_len_for(model)}) under Calculon's arithmetic"
        )
    return problems


def axonn_grid_allowed(
    model: ModelSpec, tp: int, column: int, depth: int, micro_batch: int | None = None
) -> bool:
    """Whether AxoNN's grid X = ``column``, Z = ``depth`` (row Y = tp/(X·Z)) fits the model's
    shapes (axonn_violations); X = Z = 1 always does."""
    return not _grid_problems(model, tp, column, depth, micro_batch)


def _grid_problems(
    model: ModelSpec, tp: int, column: int, depth: int, micro_batch: int | None
) -> list[str]:
    """The shape rules of AxoNN's grid (axonn_violations), one line each."""
    if column * depth == 1:
        return []
    if tp % (column * depth):
        return [f"tp_column·tp_depth = {column}·{depth} must divide tp ({tp})"]
    x, y, z = column, tp // (column * depth), depth
    problems = []
    if model.is_moe or model.is_latent_attention:
        problems.append(
            f"tp_column = {x}, tp_depth = {z}: AxoNN's grid is modelled for dense models with "
            "multi-head or grouped-query attention; allowed: 1, 1"
        )
    if model.hidden % x or model.ffn_hidden % x:
        problems.append(
            f"tp_column = {x} must divide the hidden size ({model.hidden}) and the FFN "
            f"({model.ffn_hidden}) (AxoNN: in_features % X, fully_connected.py:246-248)"
        )
    if model.heads % y or model.ffn_hidden % y or model.kv_heads % y or tp > model.kv_heads:
        problems.append(
            f"row = tp/(tp_column·tp_depth) = {y} must divide the heads ({model.heads}), the "
            f"KV heads ({model.kv_heads}) and the FFN ({model.ffn_hidden}), with tp ≤ the KV "
            "heads (AxoNN's grid is modelled without KV replication)"
        )
    blocks = (model.hidden * model.hidden // (x * y), model.hidden * model.ffn_hidden // (x * y))
    if any(block % z for block in blocks):
        problems.append(f"tp_depth = {z} must divide each layer's weight block (icomm:29, 75)")
    if micro_batch is not None and micro_batch % z:
        problems.append(
            f"micro_batch = {micro_batch} must be a multiple of tp_depth = {z} (AxoNN splits "
            "the micro-batch over the depth group)"
        )
    return problems


def axonn_violations(model: ModelSpec, job: JobSpec, s: Strategy) -> list[str]:
    """AxoNN's tensor parallelism (planner/cost/axonn_comm.py; axonn-ai/axonn@660a224,
    Megatron-AxoNN@6d60f45). A grid beyond Megatron's form (tp_column·tp_depth > 1) needs a stack
    that runs it (StackProfile.tp_form), X·Z dividing tp, X dividing the hidden size and the FFN
    (in_features % X), Y = tp/(X·Z) the heads, the KV heads and the FFN (out_features % Y),
    Z each layer's flattened block and the micro-batch. Megatron-AxoNN itself (an ``axonn``
    stack, any grid) has AxoNN's rank order (column, row, depth, pipeline, data: placement
    tp-pp-dp, so no CP), no sequence parallelism (AxoNN's layers replace Megatron's),
    Megatron's distributed optimizer at most (zero_stage ≤ 1) and no offloading."""
    import hardware_catalog

    axonn = hardware_catalog.load_stack(job.stack).tp_form == "axonn"
    problems = []
    if s.axonn_grid:
        if not axonn:
            problems.append(
                f"tp_column = {s.tp_column}, tp_depth = {s.tp_depth}: stack {job.stack!r} runs "
                "Megatron's 1D tensor parallelism; allowed: 1, 1 (AxoNN's grid needs an axonn "
                "stack, e.g. --stack axonn)"
            )
            return problems
        problems.extend(_grid_problems(model, s.tp, s.tp_column, s.tp_depth, s.micro_batch))
    if s.sequence_parallel and (axonn or s.axonn_grid):
        problems.append("sequence_parallel: AxoNN's tensor parallelism has none; allowed: false")
    if axonn:
        if s.placement != "tp-pp-dp":
            problems.append(
                f"placement = {s.placement}: Megatron-AxoNN orders ranks column, row, depth, "
                "pipeline, data (axonn/communication.py:76-88); allowed: tp-pp-dp"
            )
        if s.zero_stage > 1:
            problems.append(
                f"zero_stage = {s.zero_stage}: Megatron-AxoNN shards the optimizer at most "
                "(Megatron's distributed optimizer); allowed: 0, 1"
            )
        for kind in OFFLOAD_KINDS:
            if getattr(s, f"offload_{kind}"):
                problems.append(f"offload_{kind}: Megatron-AxoNN has no offloading; allowed: 0")
    return problems


def _expert_violations(model: ModelSpec, s: Strategy) -> list[str]:
    """Megatron-Core's expert layout (planner/cost/experts.py): ep divides the experts, each
    expert splits over etp ranks that divide tp and the expert width, ep·etp ranks come out of
    a stage's tp·cp·dp; MoE with tp > 1 needs sequence parallelism; the expert layout follows
    the default rank order."""
    problems = []
    if not model.is_moe:
        dense = f"{model.name!r} is a dense model (no experts)"
        if s.ep != 1:
            problems.append(f"ep = {s.ep}: {dense}; allowed: 1")
        if s.expert_tp:
            problems.append(f"expert_tp = {s.expert_tp}: {dense}; allowed: 0 (= tp)")
        return problems
    if model.experts % s.ep:
        problems.append(
            f"ep = {s.ep} must divide the experts ({model.experts}); allowed: "
            f"{_allowed(divisors(model.experts))}"
        )
    etp = s.expert_tp_size
    if s.tp % etp or model.expert_width % etp:
        problems.append(
            f"expert_tp = {s.expert_tp} must divide tp ({s.tp}) and the expert width "
            f"({model.expert_width}); allowed: 0 (= tp), "
            f"{_allowed([v for v in divisors(s.tp) if model.expert_width % v == 0])}"
        )
    elif (s.tp * s.cp * s.dp) % (s.ep * etp):
        problems.append(
            f"ep·expert_tp = {s.ep}·{etp} must divide the ranks of a pipeline stage, "
            f"tp·cp·dp = {s.tp * s.cp * s.dp} (Megatron-Core's expert rank grid)"
        )
    if s.tp > 1 and not s.sequence_parallel:
        problems.append(
            f"tp = {s.tp} on a mixture-of-experts model needs sequence_parallel "
            "(Megatron-Core requires it of MoE with tensor parallelism)"
        )
    if s.ep > 1 and s.placement != "tp-cp-dp-pp":
        problems.append(
            f"ep = {s.ep} is modelled with placement tp-cp-dp-pp (Megatron-Core's expert rank "
            f"order), not {s.placement}"
        )
    return problems


def _layout_violations(model: ModelSpec, s: Strategy) -> list[str]:
    """Megatron's layouts (planner.specs.layouts): pp stages holding all the blocks, the first and
    the last stage free, the stages between them equal, each divisible by the interleave
    (``--decoder-first/last-pipeline-num-layers``); or pp·v virtual stages, any split with every
    rank holding a block (``--pipeline-model-parallel-layout``)."""
    layers = s.stage_layers or ()
    text = ",".join(map(str, layers))
    per_virtual = len(layers) == s.pp * s.interleave and s.interleave > 1
    if len(layers) != s.pp and not per_virtual:
        wanted = f"pp = {s.pp}" + (
            f" or pp·interleave = {s.pp * s.interleave}" if s.interleave > 1 else ""
        )
        return [f"stage_layers = {text}: {len(layers)} stages, {wanted}"]
    if sum(layers) != model.layers:
        return [f"stage_layers = {text}: {sum(layers)} blocks, the model has {model.layers}"]
    if per_virtual:
        if min(s.rank_blocks()) < 1:
            return [f"stage_layers = {text}: every pipeline rank must hold a block"]
        return []
    if min(layers) < 1:
        return [f"stage_layers = {text}: every stage must hold a block"]
    if len(set(layers[1:-1])) > 1:
        return [
            f"stage_layers = {text}: the stages between the first and the last must be equal "
            "(Megatron's --decoder-first/last-pipeline-num-layers; or give pp·interleave "
            "virtual stages)"
        ]
    if s.interleave > 1 and any(blocks % s.interleave for blocks in layers):
        return [
            f"stage_layers = {text}: with interleave = {s.interleave} each stage's blocks must "
            "divide by it (Megatron splits a stage evenly over its model chunks; or give "
            "pp·interleave virtual stages)"
        ]
    return []


def _interleave_violations(model: ModelSpec, job: JobSpec, s: Strategy) -> list[str]:
    problems = []
    if s.pp == 1:
        problems.append(f"interleave = {s.interleave} needs pp > 1")
    elif (
        s.stage_layers is None
        and model.layers % s.pp == 0
        and (model.layers // s.pp) % s.interleave
    ):
        per_stage = model.layers // s.pp
        problems.append(
            f"interleave = {s.interleave} must divide the {per_stage} layers per stage; "
            f"allowed: {_allowed(divisors(per_stage))}"
        )
    micro_batches = job.global_batch // max(1, s.dp * s.micro_batch)
    if s.pp > 1 and micro_batches % s.pp:
        problems.append(
            f"interleave = {s.interleave} needs the micro-batches per step ({micro_batches}) to be "
            f"a multiple of pp ({s.pp}) (Megatron's interleaved schedule)"
        )
    return problems


def _partial_recompute_violations(s: Strategy) -> list[str]:
    """Megatron's block recompute: part of each stage's blocks fully recomputed, the same count
    in every model chunk. Modelled without offloading (the offload stalls of a partly recomputed
    stage are not). With ZeRO-3 (Megatron-Bridge's H100 8B FP8 recipe: 5 blocks fully recomputed
    under Megatron-FSDP) the recomputed blocks' forward runs inside their own backward, whose
    weights are gathered for it: no re-gather is charged for them (as for FSDP stacks under full
    recompute, parallel_comm.dp_comm_times_s); a ZeRO-3 that gathers again (DeepSpeed) is
    charged too little by one gather of r/k of the stage per micro-batch."""
    r = s.recompute_layers
    problems = []
    if s.recompute != "full":
        problems.append(f"recompute_layers = {r} needs recompute = full (it has {s.recompute})")
    if r is not None and r % s.interleave:
        problems.append(
            f"recompute_layers = {r} must be a multiple of interleave = {s.interleave} "
            "(Megatron recomputes the same number of blocks in every model chunk)"
        )
    if s.offload_weights or s.offload_activations or s.offload_optimizer:
        problems.append(f"recompute_layers = {r} is modelled without offloading (offload_* = 0)")
    return problems


def strategy_warnings(
    system: SystemSpec,
    strategy: Strategy,
    stack: StackProfile | None = None,
) -> list[str]:
    """Legal but unusual choices worth a word, and overlaps the stack does not have."""
    warnings = []
    if stack is not None:
        for knob in ("dp_overlap", "tp_overlap"):
            if getattr(strategy, knob) and not getattr(stack, knob):
                warnings.append(
                    f"{knob}: stack {stack.name!r} cannot overlap this communication; "
                    "it is estimated as exposed"
                )
    domain = system.network_tiers[0].domain_gpus
    if domain is not None and len(system.network_tiers) > 1 and strategy.tp > domain:
        warnings.append(
            f"tp = {strategy.tp} spans more than one {system.network_tiers[0].name} domain "
            f"({domain} GPUs): TP traffic runs on {system.network_tiers[1].name}"
        )
    if strategy.sequence_parallel and strategy.tp == 1:
        warnings.append("sequence_parallel has no effect with tp = 1")
    s = strategy
    expert_replicas = s.tp * s.cp * s.dp // (s.ep * s.expert_tp_size)
    if s.zero_stage and s.dp * s.cp == 1 and expert_replicas == 1:
        # ZeRO shards over the dp·cp ranks that hold the same weights (and the experts over
        # theirs): without any, it has no effect (constraints.structure.add_canonical).
        warnings.append(f"ZeRO-{s.zero_stage} has no effect with dp·cp = 1")
    return warnings


def check_strategy(
    model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy, gpus: int | None = None
) -> None:
    """Raise InputError naming the first broken rule."""
    problems = strategy_violations(model, system, job, strategy, gpus)
    if problems:
        raise InputError(problems[0])
