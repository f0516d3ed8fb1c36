"""Structural constraint families: factorization, divisibility, network placement, pins, and
the canonical values of knobs that have no effect.

- factorization: gpus = tp·cp·pp·dp, as one linear equation per prime q of the GPU count on the
  exponents of q in tp, cp, pp and dp (DESIGN.md §5);
- batch: global batch = dp·micro_batch·n (n micro-batches per step), the same way over the
  primes of the batch and of the GPU count;
- divisibility: tp divides heads and ffn_hidden and divides or is a multiple of kv_heads (pp
  needs a layout of the blocks, SearchSpace.layouts, which a pp beyond the layers lacks); the
  sequence splits into 2·cp equal chunks; with interleaving, n is a
  multiple of pp (Megatron's interleaved schedule; the pair literals already admit only
  interleaves that divide the layers per stage);
- partial recompute: recompute_layers fewer than every stage's blocks, a multiple of the
  interleave, only as full recompute without offloading (planner.space.rules);
- rank order: TP, PP, DP only with cp = 1;
- placement: a TP group stays inside one scale-up domain unless the system allows otherwise;
- pins: each user pin is its own family, so a conflict can name it.
"""

from __future__ import annotations

import math

from ortools.sat.python import cp_model

from constraints.variables import GPU_FACTORS, LOG_SCALE, Variables, prime_exponent, prime_factors
from planner.space.rules import MIN_OFFLOAD_BLOCKS, axonn_grid_allowed, cp_allowed
from planner.space.search_space import FRACTION_PINS, pinned_values
from planner.specs import JobSpec, ModelSpec, SystemSpec
from planner.specs.quantities import OFFLOAD_STEPS


def add_factorization(variables: Variables) -> None:
    """A fixed GPU count: the exponents of each of its primes in tp, cp, pp, dp add up. A free
    one: tp·cp·pp·dp (through its logarithm) at most the bound, a multiple of
    ``gpu_multiple`` (exponent sums at least those of the multiple)."""
    space, m = variables.space, variables.model
    if space.gpus is not None:
        literal = variables.family("factorization", f"tp·cp·pp·dp = {space.gpus} GPUs")
        for prime, power in prime_factors(space.gpus).items():
            exponents = sum(variables.exponent(k, prime) for k in GPU_FACTORS)
            m.Add(exponents == power).OnlyEnforceIf(literal)
        return
    literal = variables.family(
        "gpu_count", f"GPUs ≤ {space.max_gpus}, a multiple of {space.gpu_multiple}"
    )
    bound = round(LOG_SCALE * math.log(space.max_gpus)) + 2
    m.Add(variables.log_gpu_count() <= bound).OnlyEnforceIf(literal)
    for prime, power in prime_factors(space.gpu_multiple).items():
        exponents = sum(variables.exponent(k, prime) for k in GPU_FACTORS)
        m.Add(exponents >= power).OnlyEnforceIf(literal)


def add_batch(variables: Variables, job: JobSpec) -> None:
    literal = variables.family("batch", "global batch = dp·micro-batch·micro-batches")
    primes = set(prime_factors(job.global_batch))
    for name in ("dp", "micro_batch"):
        for value in variables.domains[name]:
            primes |= set(prime_factors(value))
    for prime in sorted(primes):
        power = prime_factors(job.global_batch).get(prime, 0)
        exponents = sum(
            variables.exponent(k, prime) for k in ("dp", "micro_batch", "micro_batches")
        )
        variables.model.Add(exponents == power).OnlyEnforceIf(literal)


def add_divisibility(variables: Variables, model: ModelSpec, seq_len: int) -> None:
    literal = variables.family(
        "divisibility",
        "tp | heads, ffn (and kv heads); 2·cp | sequence; micro-batches % pp",
    )
    m = variables.model
    for value, chosen in zip(variables.domains["cp"], variables.onehot["cp"], strict=True):
        if not cp_allowed(value, seq_len):
            m.AddImplication(literal, chosen.Not())
    for value, chosen in zip(variables.domains["tp"], variables.onehot["tp"], strict=True):
        if not model.splits_over(value):
            m.AddImplication(literal, chosen.Not())

    interleaved = [
        lit for (_, c), lit in variables.pairs.items() if variables.domains["interleave"][c] > 1
    ]
    if interleaved:
        is_interleaved = m.NewBoolVar("interleaved")
        m.Add(sum(interleaved) == is_interleaved)
        for prime in {q for value in variables.domains["pp"] for q in prime_factors(value)}:
            m.Add(
                variables.exponent("micro_batches", prime) >= variables.exponent("pp", prime)
            ).OnlyEnforceIf([literal, is_interleaved])


def add_experts(variables: Variables, model: ModelSpec) -> None:
    """Expert parallelism (planner.space.rules, planner/cost/experts.py): ep divides the experts;
    expert TP (code 0: = tp) divides tp and the expert width; ep·etp divides a stage's
    tp·cp·dp ranks, per prime q as exponents, e_q(ep) + e_q(etp) ≤ e_q(tp) + e_q(cp) + e_q(dp)
    (with etp = tp: e_q(ep) ≤ e_q(cp) + e_q(dp)); an MoE model with tp > 1 has sequence
    parallelism; ep > 1 keeps the default rank order. One family, so a pin that breaks it is
    named."""
    if not model.is_moe:
        return
    literal = variables.family(
        "experts", "ep | experts; ep·expert_tp | tp·cp·dp; MoE with tp > 1 needs SP"
    )
    m, domains, onehot = variables.model, variables.domains, variables.onehot

    def forbid(*chosen: cp_model.IntVar) -> None:
        m.AddBoolOr([literal.Not(), *(c.Not() for c in chosen)])

    for value, chosen in zip(domains["ep"], onehot["ep"], strict=True):
        if model.experts % value:
            forbid(chosen)
    for code, chosen in zip(domains["expert_tp"], onehot["expert_tp"], strict=True):
        if code and model.expert_width % code:
            forbid(chosen)
        for tp, tp_chosen in zip(domains["tp"], onehot["tp"], strict=True):
            if code and tp % code:
                forbid(chosen, tp_chosen)
    stage_ranks = ("tp", "cp", "dp")
    values = [v for name in ("ep", "expert_tp", *stage_ranks) for v in domains[name]]
    for prime in sorted({q for v in values if v > 0 for q in prime_factors(v)}):
        ranks = sum(variables.exponent(name, prime) for name in stage_ranks)
        ep = variables.exponent("ep", prime)
        for code, chosen in zip(domains["expert_tp"], onehot["expert_tp"], strict=True):
            etp = variables.exponent("tp", prime) if code == 0 else prime_exponent(code, prime)
            m.Add(ep + etp <= ranks).OnlyEnforceIf([literal, chosen])
    sp_on = variables.is_value("sequence_parallel", 1)
    for tp, chosen in zip(domains["tp"], onehot["tp"], strict=True):
        if tp > 1:
            if sp_on is None:
                forbid(chosen)
            else:
                m.AddBoolOr([literal.Not(), chosen.Not(), sp_on])
    for value, chosen in zip(domains["ep"], onehot["ep"], strict=True):
        for code, placed in zip(domains["placement"], onehot["placement"], strict=True):
            if value > 1 and code != 0:
                forbid(chosen, placed)


def add_partial_recompute(variables: Variables) -> None:
    """Partial recompute (recompute_layers r > 0, encoded as recompute none + r fully
    recomputed blocks per stage): fewer blocks than the lightest stage holds, a multiple
    of the interleave, without offloading (planner.space.rules). Not a family: the
    step-time and memory encodings assume it (r·X per stage), so it is never relaxed; a pin that
    breaks it is the conflict a diagnosis names."""
    partial = variables.partial_literal()
    if partial is None:
        return
    values, m = variables.domains["recompute_layers"], variables.model
    forbidden = [variables.is_value("recompute", code) for code in (1, 2)]
    forbidden += [
        chosen
        for knob in ("offload_weights", "offload_activations", "offload_optimizer")
        for value, chosen in zip(variables.domains[knob], variables.onehot[knob], strict=True)
        if value > 0
    ]
    for chosen in forbidden:
        if chosen is not None:
            m.AddBoolOr([partial.Not(), chosen.Not()])
    lightest = sum(
        (layout.lightest - 1) * chosen
        for layout, chosen in zip(variables.space.layouts, variables.onehot["layout"], strict=True)
    )
    m.Add(variables.value("recompute_layers") <= lightest)
    for r, chosen_r in zip(values, variables.onehot["recompute_layers"], strict=True):
        for v, chosen_v in zip(
            variables.domains["interleave"], variables.onehot["interleave"], strict=True
        ):
            if r % v:
                m.AddBoolOr([chosen_r.Not(), chosen_v.Not()])


def add_rank_order(variables: Variables) -> None:
    """The TP, PP, DP rank order has no CP (Megatron's --use-tp-pp-dp-mapping). Not a family:
    a pin that breaks it is the conflict a diagnosis names."""
    pp_inside = variables.is_value("placement", 1)
    cp_one = variables.is_value("cp", 1)
    if pp_inside is not None:
        if cp_one is None:
            variables.model.AddBoolOr([pp_inside.Not()])
        else:
            variables.model.AddImplication(pp_inside, cp_one)


def add_placement(variables: Variables, system: SystemSpec) -> None:
    """TP inside one scale-up domain; on AxoNN's grid the column·row groups, tp/Z (its depth
    group shards the weights like ZeRO-3 and may span domains; planner.space.oracle states the
    same cap)."""
    if system.tp_across_domain or len(system.network_tiers) == 1:
        return
    domain = system.network_tiers[0].domain_gpus or 0
    literal = variables.family(
        "placement", f"TP inside one {system.network_tiers[0].name} domain ({domain} GPUs)"
    )
    depths = variables.domains["tp_depth"]
    for value, chosen in zip(variables.domains["tp"], variables.onehot["tp"], strict=True):
        if value <= domain:
            continue
        if depths == (1,):
            variables.model.AddImplication(literal, chosen.Not())
            continue
        for z, z_chosen in zip(depths, variables.onehot["tp_depth"], strict=True):
            if value // z > domain or value % z:
                variables.model.AddBoolOr([literal.Not(), chosen.Not(), z_chosen.Not()])


def add_calculon(variables: Variables, model: ModelSpec, seq_len: int) -> None:
    """Calculon's space under its arithmetic (rules.calculon_violations), for what the domains
    (search_space.build_search_space) do not already say: offloading needs at least 3 blocks
    per GPU; tp divides the hidden size, the FFN and the micro-batch's tokens."""
    literal = variables.family(
        "calculon", f"Calculon's space (offload with ≥ {MIN_OFFLOAD_BLOCKS} blocks per GPU)"
    )
    m, domains, onehot = variables.model, variables.domains, variables.onehot
    few = [
        chosen
        for layout, chosen in zip(variables.space.layouts, onehot["layout"], strict=True)
        if layout.lightest < MIN_OFFLOAD_BLOCKS
    ]
    for knob in ("offload_weights", "offload_activations", "offload_optimizer"):
        for code, offloaded in zip(domains[knob], onehot[knob], strict=True):
            if code:
                for chosen in few:
                    m.AddBoolOr([literal.Not(), chosen.Not(), offloaded.Not()])
    for t, tp_chosen in zip(domains["tp"], onehot["tp"], strict=True):
        if model.hidden % t or model.ffn_hidden % t:
            m.AddImplication(literal, tp_chosen.Not())
            continue
        for b, mb_chosen in zip(domains["micro_batch"], onehot["micro_batch"], strict=True):
            if (b * seq_len) % t:
                m.AddBoolOr([literal.Not(), tp_chosen.Not(), mb_chosen.Not()])


def add_axonn(variables: Variables, model: ModelSpec, axonn: bool) -> None:
    """AxoNN's grid (planner.space.rules.axonn_violations): X = tp_column and Z = tp_depth > 1
    only under a stack that runs it (``axonn``), with X·Z dividing tp and the layer shapes
    allowing the grid (rules.axonn_grid_allowed), Z dividing the micro-batch; no sequence
    parallelism on AxoNN's grid or under an axonn stack. One family, so that a pin that breaks
    it is named; nothing where the domains hold only X = Z = 1 and no SP to forbid."""
    domains, onehot = variables.domains, variables.onehot
    sp_on = variables.is_value("sequence_parallel", 1)
    grid = max(domains["tp_column"]) > 1 or max(domains["tp_depth"]) > 1
    if not grid and not (axonn and sp_on is not None):
        return
    literal = variables.family(
        "axonn", "AxoNN's grid: X·Z | tp, shapes split over X, Y, Z; Z | micro-batch; no SP"
    )
    m = variables.model
    if axonn and sp_on is not None:  # AxoNN's layers have no sequence parallelism
        m.AddImplication(literal, sp_on.Not())

    def forbid(*chosen: cp_model.IntVar) -> None:
        m.AddBoolOr([literal.Not(), *(c.Not() for c in chosen)])

    for x, x_chosen in zip(domains["tp_column"], onehot["tp_column"], strict=True):
        for z, z_chosen in zip(domains["tp_depth"], onehot["tp_depth"], strict=True):
            if x * z == 1:
                continue
            for t, t_chosen in zip(domains["tp"], onehot["tp"], strict=True):
                if not axonn or not axonn_grid_allowed(model, t, x, z):
                    forbid(x_chosen, z_chosen, t_chosen)
    for knob in ("tp_column", "tp_depth"):
        for value, chosen in zip(domains[knob], onehot[knob], strict=True):
            if value > 1 and sp_on is not None:
                forbid(chosen, sp_on)
    for z, z_chosen in zip(domains["tp_depth"], onehot["tp_depth"], strict=True):
        for b, b_chosen in zip(domains["micro_batch"], onehot["micro_batch"], strict=True):
            if b % z:
                forbid(z_chosen, b_chosen)


def add_pins(variables: Variables) -> None:
    """Each pin a family: its knob takes one of the values the pin allows
    (search_space.pinned_values; none when the value is outside the domain, e.g. dp not
    dividing the GPU count)."""
    for name, value in variables.space.pins.items():
        shown = f"{value}/{OFFLOAD_STEPS}" if name in FRACTION_PINS else value
        literal = variables.family(f"pin:{name}", f"pin {name}={shown}")
        knob, allowed = pinned_values(variables.space, name, value)
        chosen = [variables.is_value(knob, v) for v in allowed if v in variables.domains[knob]]
        variables.model.AddBoolOr([literal.Not(), *chosen])


def add_canonical(variables: Variables, model: ModelSpec) -> None:
    """Knobs without effect take one value (not a family: it never excludes a distinct plan).

    Why each cut keeps every step time and memory need (planner.space.reductions.canonical_values
    states the same cuts; tests/test_raw_oracle.py checks both against an enumeration of the
    raw product of knob values, which applies none of them):

    - tp = 1: sequence parallelism, TP overlap and expert TP change nothing. With t = 1 there
      is no TP collective to overlap (tp_comm_s is 0), SP divides activations by t = 1, and the
      expert TP codes 0 (= tp) and 1 both mean one rank. Kept off / 0.
    - no replicated state (dp·cp = 1 and, for a mixture of experts, also tp = 1): ZeRO and DP
      overlap change nothing. ZeRO shards the dense state over the dp·cp ranks that hold the
      same weights and the routed experts over edp = tp·cp·dp/(ep·etp) ranks
      (planner/cost/memory.py, step.py); with one rank in each group no shard is smaller, every
      ring transfer and latency has (g−1) = 0 steps, so the DP exposure is 0 with or without
      overlap. dp = 1 alone is not enough: context parallelism (and, for MoE, expert data
      parallelism inside tp) still shard (issue 40). Kept at ZeRO 0, DP overlap on.
    - placement: TP, PP, DP is the default order's twin when pp = 1 (both put the DP group on
      t·c·d GPUs and there is no pipeline traffic) or when the state is not replicated (both
      put the pipeline on t·c·p GPUs, and the DP groups move nothing). Kept at the default.
    """
    m, pins = variables.model, variables.space.pins
    tp_one = variables.is_value("tp", 1)
    if tp_one is not None:
        for knob in ("sequence_parallel", "tp_overlap", "expert_tp"):
            if knob not in pins:
                m.AddImplication(tp_one, variables.onehot[knob][0])
    single = _unreplicated(variables, model)
    pp_one = variables.is_value("pp", 1)
    if "placement" not in pins and len(variables.domains["placement"]) > 1:
        for one in (single, pp_one):
            if one is not None:
                m.AddImplication(one, variables.onehot["placement"][0])
    if single is None:
        return
    if "zero_stage" not in pins:
        m.AddImplication(single, variables.onehot["zero_stage"][0])
    if "dp_overlap" not in pins and 1 in variables.domains["dp_overlap"]:
        m.AddImplication(single, variables.onehot["dp_overlap"][1])


def _unreplicated(variables: Variables, model: ModelSpec) -> cp_model.IntVar | None:
    """The literal 'every rank holds its own state': dp = cp = 1, and tp = 1 for a mixture of
    experts (add_canonical); None where the domains rule it out."""
    knobs = ("dp", "cp", "tp") if model.is_moe else ("dp", "cp")
    ones = [variables.is_value(knob, 1) for knob in knobs]
    if any(one is None for one in ones):
        return None
    single = variables.model.NewBoolVar("unreplicated")
    variables.model.AddBoolAnd(ones).OnlyEnforceIf(single)
    variables.model.AddBoolOr([single, *(one.Not() for one in ones)])
    return single
