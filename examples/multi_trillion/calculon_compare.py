"""Planner's ``evaluate --stack calculon`` on each strategy of ``calculon_reference.json``.

For every entry (fixed strategies, and the optimum of each search) this maps Calculon's
execution to planner's knobs, runs ``planner evaluate ... --stack calculon --json`` on the
poster system (``h100-offload-512g-poster``; for TP wider than the NVLink domain a copy of it
with ``tp_across_domain: true``) and prints a Markdown table of Calculon's components beside
planner's. Mapping:

- tensor_par_comm_type rs_ag → ``--sequence-parallel``; ar → none;
- activation_recompute none/attn_only/full → ``--recompute none/selective/full``;
- optimizer_sharding → ``--zero-stage 1`` (under the ``calculon`` stack's arithmetic,
  Calculon's optimizer sharding: planner/cost/calculon.py);
- weight/activations/optimizer offload → ``--offload-{weights,activations,optimizer} 1``;
- tensor_par_overlap ring/pipe → ``--tp-overlap``; data_par_overlap false → ``--no-dp-overlap``;
- ``--attention materialized`` (Calculon keeps the s×s scores).

Components (seconds per step; Calculon's ``get_stats_json`` names → planner's ``breakdown_s``):
forward ``fw_time`` → forward; backward ``bw_time`` → backward; recompute ``recompute_time``
→ recompute; TP ``tp_comm_exposed_time + recomm_exposed_time`` → tp_comm; PP
``pp_comm_exposed_time`` → pp_comm; DP ``dp_comm_exposed_time`` → dp_comm; offload
``fw_offload_exposed_time + bw_offload_exposed_time`` → offload; bubble ``bubble_time`` →
bubble; optimizer ``optim_step_time`` → optimizer.

Usage: ``PYTHONPATH=. python examples/multi_trillion/calculon_compare.py [--json OUT]``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
REPO = HERE.parent.parent
GIB = 1024**3
PLANNER = [sys.executable, "-m", "planner"]

CATALOG_MODEL = {"mt-1t": "mt-1t", "mt-11t": "mt-11t", "mt-128t": "mt-128t",
                 "mt-128t-gen": "mt-128t-calculon", "gpt3-175b": "gpt3-175b"}


def model_arg(entry: dict[str, Any], tmp: Path) -> str:
    """A catalog name, or a spec file for Calculon-generator shapes (heads = blocks)."""
    name = entry["model_name"]
    if name in CATALOG_MODEL and entry["model"]["seq_size"] == 2048:
        return CATALOG_MODEL[name]
    m = entry["model"]
    base = yaml.safe_load((REPO / "hardware_catalog/models/mt-128t.yaml").read_text())
    base.update(name=name, aliases=[], hidden=m["hidden"], layers=m["num_blocks"],
                heads=m["attn_heads"], kv_heads=m["attn_heads"], head_dim=m["attn_size"],
                ffn_hidden=m["feedforward"], seq_len=m["seq_size"],
                description=f"{name}: Calculon scripts/find_huge.py shapes")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(base))
    return str(path)


def system_arg(e: dict[str, Any], tmp: Path) -> str:
    """The poster system, allowing TP across the NVLink domain where Calculon puts it on IB."""
    if e["tensor_par"] <= 8 and e["tensor_par_net"] == 0:
        return "h100-offload-512g-poster"
    spec = yaml.safe_load(
        (REPO / "hardware_catalog/systems/h100-offload-512g-poster.yaml").read_text())
    spec.update(name="h100-offload-512g-poster-tp-ib", aliases=[], tp_across_domain=True)
    path = tmp / "poster-tp-ib.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def planner_args(entry: dict[str, Any], e: dict[str, Any], tmp: Path) -> list[str]:
    """``planner evaluate`` arguments for Calculon execution ``e``."""
    args = ["evaluate", "--model", model_arg(entry, tmp), "--system", system_arg(e, tmp),
            "--gpus", str(e["num_procs"]), "--global-batch", str(e["batch_size"]),
            "--stack", "calculon", "--attention", "materialized", "--json",
            "--tp", str(e["tensor_par"]), "--pp", str(e["pipeline_par"]),
            "--dp", str(e["data_par"]), "--micro-batch", str(e["microbatch_size"]),
            "--interleave", str(e["pipeline_interleaving"]),
            "--recompute", {"none": "none", "attn_only": "selective",
                            "full": "full"}[e["activation_recompute"]],
            "--zero-stage", "1" if e["optimizer_sharding"] else "0"]
    if e["tensor_par_comm_type"] == "rs_ag":
        args.append("--sequence-parallel")
    if e["tensor_par_overlap"] != "none":
        args.append("--tp-overlap")
    if not e["data_par_overlap"]:
        args.append("--no-dp-overlap")
    for key, flag in (("weight_offload", "--offload-weights"),
                      ("activations_offload", "--offload-activations"),
                      ("optimizer_offload", "--offload-optimizer")):
        if e[key]:
            args += [flag, "1"]
    return args


def calculon_components(stats: dict[str, float]) -> dict[str, float]:
    """Calculon's step split as planner's breakdown names it (module docstring)."""
    return {
        "forward": stats["fw_time"], "backward": stats["bw_time"],
        "recompute": stats["recompute_time"],
        "tp_comm": stats["tp_comm_exposed_time"] + stats["recomm_exposed_time"],
        "pp_comm": stats["pp_comm_exposed_time"], "dp_comm": stats["dp_comm_exposed_time"],
        "offload": stats["fw_offload_exposed_time"] + stats["bw_offload_exposed_time"],
        "bubble": stats["bubble_time"], "optimizer": stats["optim_step_time"],
        "total": stats["total_time"],
    }


def main() -> None:
    ref = json.loads((HERE / "calculon_reference.json").read_text())
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for entry in ref["entries"]:
            if entry["kind"] == "search":
                e, result = entry["best_execution"], entry["result"]
            else:
                e, result = entry["execution"], entry["result"]
            if "stats" not in result:
                rows.append({"name": entry["name"], "calculon_error": result.get("error")})
                continue
            args = planner_args(entry, e, tmp)
            proc = subprocess.run(PLANNER + args, capture_output=True, text=True, cwd=REPO)
            row: dict[str, Any] = {"name": entry["name"], "planner_args": args,
                                   "calculon": calculon_components(result["stats"]),
                                   "calculon_mfu": result["stats"]["total_efficiency"],
                                   "calculon_hbm_gib": result["summary"]["tier1_gib"],
                                   "calculon_fits": result["fits"]}
            try:  # a plan that does not fit exits 1 but prints its estimate
                est = json.loads(proc.stdout)["estimate"]
            except (json.JSONDecodeError, KeyError):
                row["planner_error"] = (proc.stderr or proc.stdout).strip()[-400:]
            else:
                comp = dict(est["breakdown_s"])
                comp["total"] = est["step_time_s"]
                row.update(planner={k: comp.get(k, 0.0) for k in row["calculon"]},
                           planner_mfu=est["mfu"],
                           planner_hbm_gib=est["memory_gib"]["hbm"]["total"],
                           planner_hbm_by_kind=est["memory_gib"]["hbm"],
                           planner_fits=est["fits"])
            rows.append(row)
    if "--json" in sys.argv:
        out = Path(sys.argv[sys.argv.index("--json") + 1])
        out.write_text(json.dumps(rows, indent=1) + "\n")
    keys = ["forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "offload",
            "bubble", "optimizer", "total"]
    print("| entry | " + " | ".join(keys) + " | MFU | HBM GiB (fits) |")
    print("|---" * (len(keys) + 3) + "|")
    for row in rows:
        if "calculon" not in row:
            print(f"| {row['name']} | Calculon: {row.get('calculon_error')} |")
            continue
        c = row["calculon"]
        if "planner" not in row:
            print(f"| {row['name']} | planner error: {row['planner_error']} |")
            continue
        p = row["planner"]
        cells = [f"{c[k]:.2f} / {p[k]:.2f}" for k in keys]
        mfu = f"{100 * row['calculon_mfu']:.1f} / {100 * row['planner_mfu']:.1f}"
        hbm = (f"{row['calculon_hbm_gib']:.1f} ({'y' if row['calculon_fits'] else 'n'}) / "
               f"{row['planner_hbm_gib']:.1f} ({'y' if row['planner_fits'] else 'n'})")
        print(f"| {row['name']} | " + " | ".join(cells) + f" | {mfu} | {hbm} |")


if __name__ == "__main__":
    main()
