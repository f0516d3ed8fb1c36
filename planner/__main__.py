from planner.cli import run

run()
