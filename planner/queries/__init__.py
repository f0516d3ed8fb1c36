"""The questions planner answers, each over the cost model and the search space: evaluate one
strategy (evaluate), find the provably optimal one (plan, with ranking for the next best and
solving for running CP-SAT under deterministic work limits), explain infeasibility (diagnosis),
and find the least hardware that meets a goal (min_hardware)."""
