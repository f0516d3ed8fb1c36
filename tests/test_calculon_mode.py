"""Calculon's arithmetic (stack ``calculon``, planner/cost/calculon.py) against Calculon itself.

The reference is examples/multi_trillion/calculon_reference.json: Calculon (calculon-ai/calculon
@ caa4b11) run on the poster system (h100_80g_nvl8 with the offload tier at 100 GB/s) for fixed
strategies and a restricted exhaustive search. Each entry's step time must agree within
TOLERANCE (3 %) unless EXCEPTIONS states a wider bound and why; memory within 0.5 % (one entry
2.5 %, see below) and the fit the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import hardware_catalog
from planner.queries.evaluate import evaluate
from planner.queries.plan import plan
from planner.specs import JobSpec, Strategy

REFERENCE = json.loads(
    (Path(__file__).parent.parent / "examples/multi_trillion/calculon_reference.json").read_text()
)
SYSTEM = "h100-offload-512g-poster"
MODELS = {"mt-1t": "mt-1t", "mt-11t": "mt-11t", "mt-128t-gen": "mt-128t-calculon"}
TOLERANCE = 0.03
EXCEPTIONS = {
    # Calculon's TP overlap 'none' builds Q, K and V as three GEMMs behind a 3-user fork and
    # keeps the full (not SP-split) fork input; the mode keeps the overlapped block's layers
    # (fused QKV) for every TP choice: 1.5 % faster, 2 % less HBM (fits where Calculon's
    # 71.5 GiB does not).
    "11t-no-tp-overlap": (0.03, 0.025),
    # 'pipe' overlap exposes one more tile than 'ring'; planner's tp_overlap is the ring.
    "11t-tp-overlap-pipe": (0.03, 0.005),
    # pp 1: the whole stage is Calculon's last chunk, whose DP window its code shrinks by the
    # recompute's memory time summed as running totals (llm.py _compute_block_stats,
    # _block_re_mem_time); the mode takes the recompute's time: 5 % faster.
    "1t-512-pp1": (0.055, 0.005),
}


def _strategy(e: dict[str, Any]) -> Strategy:
    """Calculon's execution as planner's knobs (calculon_compare.py's mapping)."""
    return Strategy(
        tp=e["tensor_par"],
        pp=e["pipeline_par"],
        dp=e["data_par"],
        micro_batch=e["microbatch_size"],
        interleave=e["pipeline_interleaving"],
        recompute={"none": "none", "attn_only": "selective", "full": "full"}[
            e["activation_recompute"]
        ],
        sequence_parallel=e["tensor_par_comm_type"] == "rs_ag",
        zero_stage=1 if e["optimizer_sharding"] else 0,
        tp_overlap=e["tensor_par_overlap"] != "none",
        dp_overlap=e["data_par_overlap"],
        offload_weights=int(e["weight_offload"]),
        offload_activations=int(e["activations_offload"]),
        offload_optimizer=int(e["optimizer_offload"]),
    )


def _entries() -> list[dict[str, Any]]:
    return [e for e in REFERENCE["entries"] if e["kind"] == "llm" and "stats" in e["result"]]


def _evaluate(entry: dict[str, Any]):
    e = entry["execution"]
    job = JobSpec(global_batch=e["batch_size"], stack="calculon")
    return evaluate(MODELS[entry["model_name"]], SYSTEM, job, _strategy(e))


def test_calculons_11t_strategy_takes_its_time_and_fits_in_its_memory() -> None:
    """Issue 39's acceptance: Calculon's best 11T strategy (tp 8, pp 64, dp 32, mbs 1, v 4,
    SP, sharding, activations and optimizer offloaded, TP and DP overlap) within 3 % of 52.14 s
    and fitting, with HBM within 5 % of 70.0 GiB (the mode: 52.137 s, 70.03 GiB)."""
    entry = next(e for e in _entries() if e["name"] == "11t-poster-b4096")
    est = _evaluate(entry)
    assert est.step_time_s == pytest.approx(52.14, rel=0.03)
    assert est.fits
    assert est.memory_gib["hbm"]["total"] == pytest.approx(70.0, rel=0.05)


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e["name"])
def test_each_reference_strategy_agrees_with_calculon(entry: dict[str, Any]) -> None:
    """Step time, HBM and the fit of every fixed strategy Calculon evaluated."""
    est = _evaluate(entry)
    result = entry["result"]
    time_tol, memory_tol = EXCEPTIONS.get(entry["name"], (TOLERANCE, 0.005))
    assert est.step_time_s == pytest.approx(result["stats"]["total_time"], rel=time_tol)
    assert est.memory_gib["hbm"]["total"] == pytest.approx(
        result["summary"]["tier1_gib"], rel=memory_tol
    )
    if entry["name"] != "11t-no-tp-overlap":
        assert est.fits == result["fits"]


def test_offloading_needs_three_blocks_per_gpu_as_in_calculon() -> None:
    """Calculon refuses the 11T strategy on pp 128 (2 blocks per GPU) with offload; so do the
    mode's rules."""
    entry = next(e for e in REFERENCE["entries"] if e["name"] == "11t-pp128")
    assert "at least 3 blocks" in entry["result"]["error"]
    job = JobSpec(global_batch=4096, stack="calculon")
    with pytest.raises(Exception, match="at least 3"):
        evaluate("mt-11t", SYSTEM, job, _strategy(entry["execution"]))


def test_the_planners_optimum_is_calculons_on_the_restricted_search() -> None:
    """mt-1t on 512 GPUs, batch 512: Calculon's search found 15.787 s (tp 8 pp 2 dp 32, mbs 8,
    v 32, attn_only, weights + activations + optimizer offloaded). The mode's proven optimum is
    within 2 % of it, and Calculon evaluates the mode's optimum (the same but the optimizer
    kept in HBM: entry search-1t-512-planner-optimum) at the same 15.787 s."""
    search = next(e for e in REFERENCE["entries"] if e["name"] == "search-1t-512-b512")
    best = search["result"]["summary"]["total_time_s"]
    job = JobSpec(global_batch=512, stack="calculon")
    result = plan("mt-1t", SYSTEM, job, 512)
    assert result.status == "optimal"
    assert result.estimate.step_time_s == pytest.approx(best, rel=0.02)
    s = result.strategy
    mine = next(e for e in REFERENCE["entries"] if e["name"] == "search-1t-512-planner-optimum")
    assert _strategy(mine["execution"]).model_dump() == s.model_dump()
    assert mine["result"]["summary"]["total_time_s"] == pytest.approx(best, rel=0.02)


def test_the_mode_leaves_out_what_calculon_does_not_have() -> None:
    """No context parallelism, no ZeRO-2/3, whole offload classes, a dense GPT block."""
    job = JobSpec(global_batch=4096, stack="calculon")
    base = dict(tp=8, pp=64, dp=16, micro_batch=1, interleave=4, sequence_parallel=True)
    for extra, text in (
        ({"cp": 2}, "no context parallelism"),
        ({"zero_stage": 2, "dp": 32}, "optimizer sharding"),
        ({"offload_activations": 1, "offload_activations_fraction": 0.5, "dp": 32}, "whole"),
    ):
        with pytest.raises(Exception, match=text):
            evaluate("mt-11t", SYSTEM, job, Strategy(**{**base, **extra}))
    with pytest.raises(Exception, match="dense GPT blocks"):
        evaluate("llama3-8b", SYSTEM, JobSpec(global_batch=8, stack="calculon"), Strategy())


def test_tp_across_infiniband_shows_calculons_exposure_on_the_generators_128t() -> None:
    """TP 32 across InfiniBand on Calculon's 128T shapes: Calculon exposes 132.65 s of TP
    communication per step; the mode exposes it too (per-GEMM tiles whose communication
    outlasts their compute), where planner's arithmetic hid it under the block's GEMMs."""
    entry = next(e for e in _entries() if e["name"] == "128t-gen-tp32-ib")
    est = _evaluate(entry)
    assert est.breakdown_s["tp_comm"] == pytest.approx(132.65, rel=0.06)
    assert hardware_catalog.load_model("mt-128t-calculon").heads == 480
