"""How ``plan --top K`` grows with K, on the README's main job (and two more), in one run.

    python benchmarks/top_k_latency.py [--repeats 3]

Ranks are distinct structures by default (planner.queries.ranking): per rank, one re-solve with the
structures found so far excluded (the last objective a lower bound), then up to MAX_VARIANTS
short solves for its tied variants with the structure held. The table shows the median wall time
of plan() per K and the cost per extra rank.
"""

from __future__ import annotations

import argparse

from timing import timed

from planner.queries.plan import plan
from planner.specs import JobSpec

PROBLEMS = (
    ("gpt3-175b", "dgx-a100-80g", 1024, 1536),  # the README's main job
    ("megatron-1t", "dgx-h100", 4096, 3072),
    ("llama3-70b", "dgx-h100", 512, 1024),
)
KS = (1, 3, 5, 10, 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'model':12s} {'system':13s} "
        + " ".join(f"{'top ' + str(k):>8s}" for k in KS)
        + f" {'s/rank':>7s}"
    )
    for model, system, gpus, batch in PROBLEMS:
        job = JobSpec(global_batch=batch)
        medians = [
            timed(args.repeats, plan, model, system, job, gpus, top=k, diagnose=False)[1]
            for k in KS
        ]
        per_rank = (medians[-1] - medians[0]) / (KS[-1] - KS[0])
        print(
            f"{model:12s} {system:13s} "
            + " ".join(f"{m:8.2f}" for m in medians)
            + f" {per_rank:7.3f}"
        )


if __name__ == "__main__":
    main()
