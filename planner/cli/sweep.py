"""`planner sweep`: run a study file, many plans at once, with progress on the terminal or the
log."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from planner.cli.arg_types import whole
from planner.cli.output import EXIT_OK
from planner.errors import InputError
from planner.specs import limits as lim
from planner.specs.quantities import SWEEP_BACKENDS

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `sweep` command's parser, under ``commands``."""
    sweep_cmd = commands.add_parser("sweep", help="run a study file: many plans at once")
    sweep_cmd.add_argument("study", help="YAML/JSON study file")
    sweep_cmd.add_argument("--out", required=True, help="results folder (resumed if present)")
    sweep_cmd.add_argument(
        "--jobs",
        type=whole(1, lim.MAX_JOBS),
        default=1,
        help="worker processes (with --backend ray and no --address: the local Ray's CPUs)",
    )
    sweep_cmd.add_argument(
        "--backend",
        choices=SWEEP_BACKENDS,
        default="local",
        help="local: this machine's processes; ray: Ray tasks (pip install 'planner[ray]')",
    )
    sweep_cmd.add_argument(
        "--address",
        help="with --backend ray: the cluster to join (HOST:PORT of its head, ray://HOST:PORT "
        "or auto); default: a local Ray instance for this sweep",
    )
    sweep_cmd.add_argument(
        "--max-scenarios",
        type=whole(1, lim.MAX_SCENARIOS),
        default=lim.DEFAULT_MAX_SCENARIOS,
        metavar="N",
        help=f"refuse a study of more than N scenarios before running any (default "
        f"{lim.DEFAULT_MAX_SCENARIOS:,}; at most {lim.MAX_SCENARIOS:,})",
    )
    sweep_cmd.add_argument(
        "--diagnose",
        action="store_true",
        help="name the conflicting constraints of each infeasible plan (one more solve each; "
        "the study's `diagnose: true` does the same)",
    )


@contextlib.contextmanager
def _sweep_progress(console: Console, name: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback (done, total): a live bar with elapsed time and ETA on a terminal;
    elsewhere (a log, CI) one line per tenth of the study, with the same ETA."""
    if console.is_terminal:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        ) as bar:
            task = bar.add_task(name, total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    import time

    from planner.studies.sweep import eta_line

    started = time.perf_counter()
    first: list[int] = []
    shown: set[int] = set()

    def progress(done: int, total: int) -> None:
        if not first:
            first.append(done)  # rows already there when the sweep resumed
            return
        tenth = (10 * done) // max(total, 1)
        if tenth not in shown or done == total:
            shown.add(tenth)
            line = eta_line(name, done, total, first[0], time.perf_counter() - started)
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    yield progress


def run(args: argparse.Namespace, console: Console) -> int:
    """`planner sweep` with the parsed ``args``; its exit code."""
    from pathlib import Path

    from planner.studies.study import load_study
    from planner.studies.sweep import run_study

    study = load_study(args.study)
    if study.scenario_count > args.max_scenarios:
        raise InputError(
            f"study {study.name!r}: {study.scenario_count:,} scenarios, more than --max-scenarios "
            f"{args.max_scenarios:,} (each is a plan of seconds); allowed: split the study, or "
            f"pass --max-scenarios {study.scenario_count} to run them all"
        )
    if args.diagnose:
        study = study.model_copy(update={"diagnose": True})
    out = Path(args.out)
    with _sweep_progress(console, study.name) as progress:
        rows = run_study(
            study,
            out,
            jobs=args.jobs,
            progress=progress,
            backend=args.backend,
            address=args.address,
        )
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    console.print(
        f"{len(rows)} scenarios in {out}/rows.jsonl and rows.csv: "
        + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    )
    return EXIT_OK
