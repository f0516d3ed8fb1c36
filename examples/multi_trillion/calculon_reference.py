"""Ground truth from Calculon itself for the poster problems (issue 39).

Runs calculon-ai/calculon (its own code, imported from a local checkout) on the multi-trillion
poster's problems and writes ``calculon_reference.json`` beside this file: for each entry the
model, system and execution JSON Calculon read, the command line that reproduces it with
Calculon's CLI, the Calculon commit, and every statistic Calculon reports
(``Llm.get_stats_json``), plus the HBM (tier 1) requirement split by kind as Calculon's
``Llm._get_mem_cap_reqs`` adds it up.

Fixed-strategy entries are evaluated exactly as ``calculon llm`` does (``Llm.compile`` then
``Llm.run``); when the strategy does not fit, Calculon's CLI prints ``ERROR: Mem tier1 needs
...`` and no stats, so this script also records the stats computed before the capacity check
(``_compute_block_stats`` + ``_compute_batch_stats``, the same calls ``run`` makes).

Search entries run Calculon's own per-strategy evaluation over a *restricted* space (Calculon's
``llm-optimal-execution`` enumerates 5.6–7.8 million executions for the smallest problems here,
hours on one core): see ``SEARCH_SPACE`` below for what is fixed and why.

Usage (Calculon needs numpy only for io, pandas/psutil for its search modules)::

    python -m venv /tmp/calculon-venv && /tmp/calculon-venv/bin/pip install numpy pandas psutil
    git --git-dir=<mirror of calculon-ai/calculon> archive HEAD | tar -x -C /tmp/calculon
    CALCULON=/tmp/calculon /tmp/calculon-venv/bin/python \
        examples/multi_trillion/calculon_reference.py [entry names]
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

CALCULON_DIR = Path(os.environ.get("CALCULON", "/tmp/calculon"))
# calculon-ai/calculon HEAD (2024-02-22) as fetched for issue 39
CALCULON_COMMIT = "caa4b11f8fe1fee3ba57adaacb7590d7deabd053"
OUT_PATH = Path(__file__).with_name("calculon_reference.json")

sys.path.insert(0, str(CALCULON_DIR))
from calculon import System  # noqa: E402
from calculon.llm import Llm  # noqa: E402

# --- system -------------------------------------------------------------------------------
# Calculon's systems/h100_80g_nvl8.json at CALCULON_COMMIT, with mem2 (the offload tier) at the
# poster's 100 GB/s instead of the file's 450 GB/s; its capacity (512 GiB) is the file's.
_SYS_FILE = CALCULON_DIR / "systems" / "h100_80g_nvl8.json"
SYSTEM_POSTER: dict[str, Any] = json.loads(_SYS_FILE.read_text())
SYSTEM_POSTER["mem2"]["GBps"] = 100
SYSTEM_NAME = "h100_80g_nvl8 (calculon systems/h100_80g_nvl8.json) with mem2.GBps = 100"

# --- models -------------------------------------------------------------------------------
# hidden/blocks from the poster's Table II; heads x 128 and ffn 4 x hidden, seq 2048 as the
# planner catalog's mt-*.yaml assume (hardware_catalog/models/mt-*.yaml).
MODELS: dict[str, dict[str, int]] = {
    "mt-1t": {"hidden": 24576, "feedforward": 98304, "seq_size": 2048,
              "attn_heads": 192, "attn_size": 128, "num_blocks": 128},
    "mt-11t": {"hidden": 60416, "feedforward": 241664, "seq_size": 2048,
               "attn_heads": 472, "attn_size": 128, "num_blocks": 256},
    "mt-128t": {"hidden": 148480, "feedforward": 593920, "seq_size": 2048,
                "attn_heads": 1160, "attn_size": 128, "num_blocks": 480},
    # Calculon's generator scripts/find_huge.py, row "128T": heads = blocks = 480, attn_size =
    # round(148480 / 480) = 309 (heads x attn_size = 148,320, not hidden), ffn 4 x hidden;
    # the generator prints seq 8192 and batch 3072, here seq 2048 to match the catalog problem.
    "mt-128t-gen": {"hidden": 148480, "feedforward": 593920, "seq_size": 2048,
                    "attn_heads": 480, "attn_size": 309, "num_blocks": 480},
    # Same row, the generator's own sequence length.
    "mt-128t-gen-s8192": {"hidden": 148480, "feedforward": 593920, "seq_size": 8192,
                          "attn_heads": 480, "attn_size": 309, "num_blocks": 480},
    # Calculon models/gpt3-175B.json
    "gpt3-175b": json.loads((CALCULON_DIR / "models" / "gpt3-175B.json").read_text()),
}

# Calculon's best 11T strategy on the poster problem (issue 39).
BASE_EXE: dict[str, Any] = {
    "num_procs": 16384, "tensor_par": 8, "pipeline_par": 64, "data_par": 32,
    "tensor_par_net": 0, "pipeline_par_net": 1, "data_par_net": 1,
    "batch_size": 4096, "microbatch_size": 1, "datatype": "float16",
    "fused_activation": True, "attention_type": "multihead",
    "activation_recompute": "none", "pipeline_interleaving": 4,
    "optimizer_sharding": True, "tensor_par_comm_type": "rs_ag",
    "tensor_par_overlap": "ring", "seq_par_ag_redo": False, "data_par_overlap": True,
    "weight_offload": False, "activations_offload": True, "optimizer_offload": True,
    "training": True,
}


def exe(**changes: Any) -> dict[str, Any]:
    """BASE_EXE with ``changes``; ``num_procs`` follows tp·pp·dp."""
    e = dict(BASE_EXE)
    e.update(changes)
    e["num_procs"] = e["tensor_par"] * e["pipeline_par"] * e["data_par"]
    return e


FIXED: list[tuple[str, str, str, dict[str, Any]]] = [
    ("11t-poster-b4096", "mt-11t", "Calculon's best 11T strategy, batch 4,096 (issue 39)", exe()),
    ("11t-poster-b16384", "mt-11t", "same strategy, batch 16,384", exe(batch_size=16384)),
    ("11t-no-offload", "mt-11t", "same, no activation/optimizer offload",
     exe(activations_offload=False, optimizer_offload=False)),
    ("11t-no-tp-overlap", "mt-11t", "same, TP overlap none", exe(tensor_par_overlap="none")),
    ("11t-tp-overlap-pipe", "mt-11t", "same, TP overlap pipe", exe(tensor_par_overlap="pipe")),
    ("11t-no-dp-overlap", "mt-11t", "same, no DP overlap", exe(data_par_overlap=False)),
    ("11t-no-sharding", "mt-11t", "same, no optimizer sharding", exe(optimizer_sharding=False)),
    ("11t-full-recompute", "mt-11t", "full recompute, weights+optimizer offloaded, mbs 2",
     exe(activation_recompute="full", activations_offload=False, weight_offload=True,
         microbatch_size=2)),
    ("11t-attn-only", "mt-11t", "attention-only recompute", exe(activation_recompute="attn_only")),
    ("11t-pp128", "mt-11t", "pp 128 dp 16 interleave 2 (2 blocks per GPU: offload forbidden)",
     exe(pipeline_par=128, data_par=16, pipeline_interleaving=2)),
    ("11t-pp128-nooffload", "mt-11t", "pp 128 dp 16 interleave 2, no offload",
     exe(pipeline_par=128, data_par=16, pipeline_interleaving=2,
         activations_offload=False, optimizer_offload=False)),
    ("1t-4096", "mt-1t", "mt-1t on 4,096 GPUs, tp 8 pp 16 dp 32, batch 4,096",
     exe(pipeline_par=16, data_par=32, pipeline_interleaving=2)),
    ("1t-4096-nooffload", "mt-1t", "mt-1t on 4,096 GPUs, no offload",
     exe(pipeline_par=16, data_par=32, pipeline_interleaving=2,
         activations_offload=False, optimizer_offload=False)),
    ("1t-16384", "mt-1t", "mt-1t on 16,384 GPUs, tp 8 pp 16 dp 128, batch 4,096",
     exe(pipeline_par=16, data_par=128, pipeline_interleaving=2)),
    ("128t-gen-tp8-nvlink", "mt-128t-gen",
     "128T generator shapes, tp 8 (NVLink) pp 32 dp 64, weights+act+optim offloaded",
     exe(pipeline_par=32, data_par=64, weight_offload=True, pipeline_interleaving=1)),
    ("128t-gen-tp32-ib", "mt-128t-gen",
     "128T generator shapes, tp 32 across InfiniBand (net 1), pp 16 dp 32",
     exe(tensor_par=32, tensor_par_net=1, pipeline_par=16, data_par=32,
         pipeline_interleaving=1)),
    ("128t-gen-tp16-ib", "mt-128t-gen",
     "128T generator shapes, tp 16 across InfiniBand (net 1), pp 32 dp 32",
     exe(tensor_par=16, tensor_par_net=1, pipeline_par=32, data_par=32,
         pipeline_interleaving=1)),
    ("search-1t-512-planner-optimum", "mt-1t",
     "planner's optimum of search-1t-512-b512 under Calculon's arithmetic (tp 8 pp 2 dp 32, "
     "mbs 8, interleave 32, attn_only, weights+activations offloaded), evaluated by Calculon",
     exe(pipeline_par=2, data_par=32, batch_size=512, microbatch_size=8,
         pipeline_interleaving=32, activation_recompute="attn_only", weight_offload=True,
         activations_offload=True, optimizer_offload=False)),
    ("1t-512-pp1", "mt-1t",
     "tp 8 pp 1 dp 64, mbs 8, attn_only, weights+activations offloaded (an earlier planner "
     "optimum under a DP window Calculon does not have; checks the one-chunk DP exposure)",
     exe(pipeline_par=1, data_par=64, batch_size=512, microbatch_size=8,
         pipeline_interleaving=1, activation_recompute="attn_only", weight_offload=True,
         activations_offload=True, optimizer_offload=False)),
]


def quiet_logger() -> logging.Logger:
    """A logger that drops Calculon's debug lines (they cost 80 % of its run time)."""
    log = logging.Logger("calculon-reference")
    log.setLevel(logging.WARNING)
    return log


def tier1_by_kind(m: Llm) -> dict[str, float]:
    """HBM requirement split by kind, as ``Llm._get_mem_cap_reqs`` (llm.py) adds it up."""
    e = m.exe
    parts: dict[str, float] = {}
    parts["weights"] = m.get_weight_space_min() if e.weight_offload else m.get_weight_space()
    if e.activations_offload:
        parts["activations"] = m.get_act_space_min()
        if e.activation_recompute == "full":
            parts["activations"] += m.get_act_checkpoint_size_min()
    else:
        parts["activations"] = m.get_act_space() + m.get_act_checkpoint_size()
    if e.optimizer_offload:
        parts["weight_grads"] = m.get_weight_grad_space_min()
        parts["optimizer"] = m.get_optimizer_space_min()
    else:
        parts["weight_grads"] = m.get_weight_grad_space()
        parts["optimizer"] = m.get_optimizer_space()
    parts["activation_grads"] = m.get_act_grad_space()
    parts["total"] = sum(parts.values())
    return parts


def evaluate(model: dict[str, int], exe_json: dict[str, Any],
             system: dict[str, Any]) -> dict[str, Any]:
    """Calculon's ``llm`` command (runner.py ``Runner.run_command``) in process."""
    app = Llm.Application(model)
    syst = System(copy.deepcopy(system))
    m = Llm(app, quiet_logger())
    try:
        m.compile(syst, Llm.Execution.from_json(exe_json))
    except Llm.Error as err:
        return {"error": str(err), "stage": "compile"}
    m._compute_block_stats()
    m._compute_batch_stats()
    error = None
    try:
        m._check_mem_caps()
    except Llm.Error as err:
        error = str(err)
    m._executed = True
    stats = m.get_stats_json(False)
    gib = 1024**3
    return {
        "fits": error is None,
        "error": error,
        "stats": stats,
        "tier1_by_kind_gib": {k: v / gib for k, v in tier1_by_kind(m).items()},
        "tier2_gib": m.get_mem_tier2_cap_req() / gib,
        "blocks_per_proc": m._blocks_per_proc,
        "num_microbatches": m.exe._num_microbatches,
        "summary": {
            "total_time_s": stats["total_time"],
            "mfu": stats["total_efficiency"],
            "tier1_gib": stats["proc_mem_tier1_cap_req"] / gib,
        },
    }


# --- restricted search ----------------------------------------------------------------------
SEARCH_SPACE = {
    "enumerated_like_calculon": (
        "tp over Llm.get_all_tensor_parallelisms, pp over get_all_pipeline_parallelisms, "
        "interleave over get_valid_pipeline_interleavings, micro-batch over "
        "get_valid_microbatch_sizes (ascending, with llm-optimal-execution's -m break), "
        "batch = OptimalExecution.get_batch_size(dp, max_batch), recompute full/attn_only/none, "
        "optimizer_sharding True/False (dp > 1), weight/activation/optimizer offload True/False "
        "(activation offload never with full recompute), network of each of tp/pp/dp: 0 or 1"),
    "fixed": {
        "tensor_par_comm_type": "rs_ag (sequence parallel) or ar; p2p_rs_ag skipped",
        "tensor_par_overlap": "none or ring; pipe skipped (ring's schedule minus one tile)",
        "seq_par_ag_redo": False, "data_par_overlap": True, "fused_activation": True,
    },
}


def search(model_name: str, num_procs: int, max_batch: int,
           system: dict[str, Any]) -> dict[str, Any]:
    """Best sample rate over the restricted space, Calculon's evaluation for each point."""
    from calculon.llm.optimal_execution import OptimalExecution

    app = Llm.Application(MODELS[model_name])
    syst = System(copy.deepcopy(system))
    log = quiet_logger()
    nets = range(syst.num_networks)
    best: tuple[float, dict[str, Any]] | None = None
    count = good = 0
    t0 = time.time()
    for tp in Llm.get_all_tensor_parallelisms(num_procs, app.hidden, app.attn_heads):
        for pp in Llm.get_all_pipeline_parallelisms(num_procs, tp, app.num_blocks):
            dp = Llm.get_data_parallelism(num_procs, tp, pp)
            batch = OptimalExecution.get_batch_size(dp, max_batch)
            if batch is None:
                continue
            for ppint, recompute, sharding, comm, tpov, wo, ao, oo in itertools.product(
                    Llm.get_valid_pipeline_interleavings(app.num_blocks, pp),
                    ["full", "attn_only", "none"], [True, False] if dp > 1 else [False],
                    ["rs_ag", "ar"], ["none", "ring"] if tp > 1 else ["none"],
                    [True, False], [True, False], [True, False]):
                if ao and recompute == "full":
                    continue
                for mbs in Llm.get_valid_microbatch_sizes(app.seq_size, tp, dp, batch, pp):
                    good_before = good
                    for tn in (nets if tp > 1 else [0]):
                        for pn in (nets if pp > 1 else [0]):
                            for dn in (nets if dp > 1 else [0]):
                                count += 1
                                e = {
                                    "num_procs": num_procs, "tensor_par": tp,
                                    "pipeline_par": pp, "data_par": dp,
                                    "tensor_par_net": tn, "pipeline_par_net": pn,
                                    "data_par_net": dn, "batch_size": batch,
                                    "microbatch_size": mbs, "datatype": "float16",
                                    "fused_activation": True, "attention_type": "multihead",
                                    "activation_recompute": recompute,
                                    "pipeline_interleaving": ppint,
                                    "optimizer_sharding": sharding,
                                    "tensor_par_comm_type": comm, "tensor_par_overlap": tpov,
                                    "seq_par_ag_redo": False,
                                    "data_par_overlap": dp > 1, "weight_offload": wo,
                                    "activations_offload": ao, "optimizer_offload": oo,
                                    "training": True,
                                }
                                try:
                                    m = Llm(app, log)
                                    m.compile(syst, Llm.Execution.from_json(e))
                                    m.run(syst)
                                except Llm.Error:
                                    continue
                                good += 1
                                rate = m.get_sample_rate()
                                if best is None or rate > best[0]:
                                    best = (rate, e)
                    if good == good_before:
                        break  # llm-optimal-execution -m: larger micro-batches fit less
    wall = time.time() - t0
    assert best is not None, f"nothing fits for {model_name} on {num_procs}"
    result = evaluate(MODELS[model_name], best[1], system)
    return {"best_execution": best[1], "evaluated": count, "fitting": good,
            "wall_s_one_core": wall, "result": result}


SEARCHES: list[tuple[str, str, int, int]] = [
    ("search-1t-512-b512", "mt-1t", 512, 512),
    # ("search-gpt3-175b-256-b256", "gpt3-175b", 256, 256): stopped unfinished after 12 min
    # of one core (more pipeline splits of 96 blocks than of 128); not in the JSON.
]


def cli_line(name: str, exe_json: dict[str, Any], model_name: str) -> str:
    """The Calculon CLI invocation that reproduces an entry, run in Calculon's checkout with the
    entry's ``model`` and ``execution`` and the file's top-level ``system`` saved as JSON."""
    return (f"PYTHONPATH=. ./bin/calculon llm {model_name}.json {name}.exe.json "
            "h100_poster.json -")


def write(entries: list[dict[str, Any]]) -> None:
    """calculon_reference.json with ``entries``."""
    out = {
        "calculon": {"repository": "https://github.com/calculon-ai/calculon",
                     "commit": CALCULON_COMMIT},
        "system_name": SYSTEM_NAME,
        "system": SYSTEM_POSTER,
        "notes": ("stats are Llm.get_stats_json() (seconds, bytes); total_efficiency is "
                  "Calculon's MFU; proc_mem_tier1_cap_req is HBM bytes"),
        "entries": entries,
    }
    OUT_PATH.write_text(json.dumps(out, indent=1) + "\n")


def main() -> None:
    only = set(sys.argv[1:])
    entries: list[dict[str, Any]] = []
    if OUT_PATH.exists():
        entries = json.loads(OUT_PATH.read_text())["entries"]
    done = {e["name"]: i for i, e in enumerate(entries)}

    def put(entry: dict[str, Any]) -> None:
        if entry["name"] in done:
            entries[done[entry["name"]]] = entry
        else:
            done[entry["name"]] = len(entries)
            entries.append(entry)
        write(entries)  # after every entry: a long search may be stopped

    for name, model_name, desc, e in FIXED:
        if only and name not in only:
            continue
        put({"name": name, "kind": "llm", "description": desc, "model_name": model_name,
             "model": MODELS[model_name], "execution": e,
             "command": cli_line(name, e, model_name),
             "result": evaluate(MODELS[model_name], e, SYSTEM_POSTER)})
        print(name, entries[done[name]]["result"].get("summary"), flush=True)
    for name, model_name, procs, max_batch in SEARCHES:
        if (only and name not in only) or (not only and name in done):
            continue
        res = search(model_name, procs, max_batch, SYSTEM_POSTER)
        put({"name": name, "kind": "search", "model_name": model_name,
             "model": MODELS[model_name], "num_procs": procs, "max_batch_size": max_batch,
             "search_space": SEARCH_SPACE,
             "command": f"examples/multi_trillion/calculon_reference.py {name}",
             **res})
        print(name, res["best_execution"], res["result"]["summary"], res["wall_s_one_core"],
              flush=True)
    write(entries)


if __name__ == "__main__":
    main()
