"""Plan from Python: the same operations as the CLI, returning pydantic objects.

python examples/plan_from_python.py
"""

from pathlib import Path

from planner import JobSpec, Strategy, evaluate, plan

SPECS = Path(__file__).parent / "specs"

job = JobSpec(global_batch=1024, train_tokens=2e12)
result = plan(str(SPECS / "my-model.yaml"), str(SPECS / "my-cluster.yaml"), job, gpus=256, top=3)
print(result.status, result.strategy.describe(), f"{result.estimate.step_time_s:.2f} s/step")
print(f"MFU {result.estimate.mfu:.1%}, {result.estimate.training.days:.1f} days for 2T tokens")
for alternative in result.alternatives:
    strategy = alternative.strategy.describe()
    print(f"  #{alternative.rank} {strategy}: {alternative.step_time_s:.2f} s")

# What if we pinned a launch configuration we already know?
mine = Strategy(tp=8, pp=2, dp=16, micro_batch=1, recompute="full", sequence_parallel=True)
estimate = evaluate(str(SPECS / "my-model.yaml"), str(SPECS / "my-cluster.yaml"), job, mine)
print(f"tp=8 pp=2 full recompute: {estimate.step_time_s:.2f} s/step ({estimate.mfu:.1%} MFU)")
