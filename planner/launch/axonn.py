"""Megatron-AxoNN command-line arguments: emit a plan as ``torchrun ... pretrain_gpt.py --flags``
for axonn-ai/Megatron-AxoNN, read such a command line back.

Megatron-AxoNN (@6d60f45) is a Megatron-LM fork whose tensor-parallel layers are AxoNN's 3D
grid; its arguments are Megatron-LM's (planner.launch.megatron: the model, batch, pipeline,
recompute, precision and optimizer flags are written and read by that module's table) with these
of its own, from its ``megatron/arguments.py``:

- tp_column X ↔ ``--column-tensor-model-parallel-size``; the row Y = tp/(X·Z) ↔
  ``--row-tensor-model-parallel-size``; tp_depth Z ↔ ``--depth-tensor-model-parallel-size``
  (``args.tensor_model_parallel_size = row·column·depth``, arguments.py:63; they replace
  ``--tensor-model-parallel-size``);
- tp_overlap ↔ ``--overlap-axonn-comm --overlap-axonn-reduce-scatter --overlap-axonn-all-gather``
  (arguments.py:995-1008; any of them reads as tp_overlap, which planner/cost/axonn_comm.py
  prices as all three);
- ``--num-layers-for-caching-weights-in-depth-tensor-parallel-all-gather`` 0 (planner keeps no
  layer's gathered weights across the step; a reader notes another value and costs it as 0);
- the rank order is AxoNN's (column, row, depth, pipeline, data: planner's tp-pp-dp), without a
  flag; flash attention ↔ ``--use-flash-attn`` (examples/run_axonn_amd.sh); the fork's
  architecture flags and its ``export CUDA_DEVICE_MAX_CONNECTIONS=1`` (always: its validate_args
  raises without it) from planner.launch.architecture; Megatron's
  ``--overlap-grad-reduce`` is rejected by the fork (arguments.py:180-181) and never written.

A configuration read here runs under the ``axonn`` stack (hardware_catalog/stacks/axonn.yaml).
What ``plan --emit axonn`` searches (``restriction``): no offloading (the fork has none).
"""

from __future__ import annotations

import shlex

from hardware_catalog import load_stack
from planner.errors import InputError
from planner.launch import megatron, shell
from planner.launch.common import LaunchConfig, Parsed, Restriction
from planner.specs import JobSpec, ModelSpec, Strategy, SystemSpec

FORMAT = "axonn"
VERSION = "Megatron-AxoNN @ 6d60f45 (axonn-ai/Megatron-AxoNN, megatron/arguments.py)"
STACK = "axonn"
"""The stack profile a configuration read here runs under."""

GRID_FLAGS = {
    "row": "--row-tensor-model-parallel-size",
    "tp_column": "--column-tensor-model-parallel-size",
    "tp_depth": "--depth-tensor-model-parallel-size",
}
OVERLAP_FLAGS = (
    "--overlap-axonn-comm",
    "--overlap-axonn-reduce-scatter",
    "--overlap-axonn-all-gather",
)
CACHE_FLAG = "--num-layers-for-caching-weights-in-depth-tensor-parallel-all-gather"
FLASH_FLAG = "--use-flash-attn"

MISSING_HINT = megatron.MISSING_HINT


def restriction(model: ModelSpec, system: SystemSpec, job: JobSpec) -> Restriction:
    """What Megatron-AxoNN runs of planner's space: no weight, activation or optimizer
    offloading (the axonn stack's rules already fix its rank order, ZeRO ≤ 1, no SP); a job
    under another stack is refused (its plan would not be Megatron-AxoNN's)."""
    if load_stack(job.stack).tp_form != "axonn":
        raise InputError(
            f"--emit axonn: stack {job.stack!r} does not run AxoNN's tensor parallelism; "
            "plan for Megatron-AxoNN with --stack axonn"
        )
    return Restriction().pinned(
        {"offload_weights": 0, "offload_activations": 0, "offload_optimizer": 0},
        "no offloading (Megatron-AxoNN has none)",
    )


def emit(model: ModelSpec, system: SystemSpec, job: JobSpec, strategy: Strategy) -> LaunchConfig:
    """Megatron-LM's command line (planner.launch.megatron.emit) with AxoNN's grid, overlap and
    caching flags in place of Megatron's tensor-parallel ones."""
    s = strategy
    # AxoNN's rank order needs no flag; its TP overlap flags replace Megatron's; the fork
    # rejects Megatron's --overlap-grad-reduce (arguments.py:180-181).
    base = strategy.model_copy(
        update={"placement": "tp-cp-dp-pp", "tp_overlap": False, "dp_overlap": False}
    )
    config = megatron.emit(model, system, job, base, fmt=FORMAT)
    grid = [
        f"{GRID_FLAGS['row']} {s.tp_row}",
        f"{GRID_FLAGS['tp_column']} {s.tp_column}",
        f"{GRID_FLAGS['tp_depth']} {s.tp_depth}",
    ]
    tp_flag = megatron.FLAGS["tp"]
    lines = []
    for line in config.text.split("\n"):
        body = line.strip().removesuffix("\\").strip()
        if line.startswith("# Megatron-LM arguments"):
            line = line.replace("Megatron-LM arguments", "Megatron-AxoNN arguments")
        elif line.startswith("# flags as in"):
            line = f"# flags as in {VERSION} and {megatron.VERSION}"
        if body.startswith(f"{tp_flag} "):
            extra = [*grid, *(OVERLAP_FLAGS if s.tp_overlap else ()), f"{CACHE_FLAG} 0"]
            lines += [f"    {flag} \\" for flag in extra]
            continue
        if body.startswith(f"{megatron.FLAGS['cp']} "):
            continue  # AxoNN's grid has no context parallelism (the rules keep cp = 1)
        lines.append(line)
    notes = list(config.notes)
    if s.dp_overlap:
        notes.append("dp_overlap: Megatron-AxoNN rejects --overlap-grad-reduce; not written")
    return LaunchConfig(format=FORMAT, text="\n".join(lines), notes=notes)


def read(text: str, system: SystemSpec) -> Parsed:
    """A Megatron-AxoNN command line or file of arguments: AxoNN's flags turned into the
    strategy's grid and tp_overlap, the rest read by planner.launch.megatron.read; the job runs
    under the axonn stack."""
    tokens = shell.words(text)
    flags = shell.flags(tokens)
    sizes = {}
    for knob, flag in GRID_FLAGS.items():
        values = flags.get(flag) or ["1"]
        sizes[knob] = megatron._Args({flag: values}).whole(flag, 1)
    overlap = any(flag in flags for flag in OVERLAP_FLAGS)
    cached = _cached_layers(flags)
    tp = sizes["row"] * sizes["tp_column"] * sizes["tp_depth"]
    _check_stated_tp(flags, sizes, tp)
    skip = {*GRID_FLAGS.values(), *OVERLAP_FLAGS, CACHE_FLAG, megatron.FLAGS["tp"]}
    kept: list[str] = []
    dropping = False
    for token in tokens:
        if token.startswith("--"):
            dropping = token in skip
        if not dropping:
            kept.append(token)
    kept += [megatron.FLAGS["tp"], str(tp), megatron.FLAGS["placement"]]
    if overlap:
        kept.append(megatron.FLAGS["tp_overlap"])
    parsed = megatron.read(shlex.join(kept), system)
    parsed.fmt = FORMAT
    parsed.knobs.update(tp_column=sizes["tp_column"], tp_depth=sizes["tp_depth"])
    parsed.job["stack"] = STACK
    if cached:
        parsed.notes.append(
            f"{CACHE_FLAG} {cached}: costed as 0 (planner keeps no gathered weights across the "
            "step)"
        )
    return parsed


def _cached_layers(flags: dict[str, list[str]]) -> int:
    """The layers whose depth-gathered weights AxoNN caches (CACHE_FLAG; 0 when absent): a
    whole number ≥ 0, else a one-line InputError (-1, nan, 1.5 or abc read as 0 before)."""
    if CACHE_FLAG not in flags:
        return 0
    layers = megatron._Args(flags).whole(CACHE_FLAG, 0) or 0
    if layers < 0:
        raise InputError(
            f"megatron argument {CACHE_FLAG} = {layers}: allowed: a whole number of layers, 0 "
            "or more"
        )
    return layers


def _check_stated_tp(flags: dict[str, list[str]], sizes: dict[str, int], tp: int) -> None:
    """A one-line InputError unless Megatron's --tensor-model-parallel-size, where given, is a
    whole number equal to the grid's row·column·depth (Megatron-AxoNN sets it to that product,
    arguments.py:63, so another value is a misread configuration, not a setting)."""
    flag = megatron.FLAGS["tp"]
    if flag not in flags:
        return
    stated = megatron._Args(flags).whole(flag)
    if stated != tp:
        grid = "·".join(str(sizes[knob]) for knob in ("row", "tp_column", "tp_depth"))
        raise InputError(
            f"megatron argument {flag} = {stated}: contradicts the AxoNN grid row·column·depth "
            f"= {grid} = {tp}; allowed: {tp}, or leave it out (Megatron-AxoNN sets it to the "
            "grid's product)"
        )
