"""Co-design studies: many plans (or minimum-hardware queries) at once (``planner sweep``).

A study (planner.studies.study) expands to scenarios; each runs in a worker process (or as a Ray
task, planner.studies.ray_backend) and is solved into one row (planner.studies.scenario); each
finished row is appended as a JSON line to ``rows.jsonl`` at once, so an interrupted sweep loses
nothing it finished, and ``rows.csv`` is rewritten from it at the end (planner.studies.rows).
Running the same study into the same folder again skips the scenarios already there."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.specs.quantities import SWEEP_BACKENDS
from planner.studies.rows import (
    STUDY_FILE,
    Rows,
    read_study,
    repair_rows,
    replace_atomically,
    write_csv,
)
from planner.studies.scenario import run_scenario
from planner.studies.study import Study, preload_files, scenarios, spec_files


def eta_line(name: str, done: int, total: int, resumed: int, elapsed_s: float) -> str:
    """'study: 37/144 scenarios, 1 min 2 s, about 2 min 59 s left': the time left at the pace of
    the scenarios this run has finished (``resumed`` were there when it started)."""
    ran = done - resumed
    left = f"about {_duration(elapsed_s / ran * (total - done))} left" if ran else "starting"
    if done == total:
        left = "done"
    return f"{name}: {done}/{total} scenarios, {_duration(elapsed_s)}, {left}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def run_study(
    study: Study,
    out: Path,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    stop_after: int | None = None,
    backend: str = "local",
    address: str | None = None,
) -> list[dict[str, Any]]:
    """Run every scenario not yet in ``out/rows.jsonl``; return all rows (old and new).
    ``jobs`` worker processes on this machine (``backend="local"``), or Ray tasks
    (``backend="ray"``: a local Ray instance with ``jobs`` CPUs, or the cluster at ``address``);
    ``stop_after`` stops after that many new rows (to test interruption).

    Kill-safe: each row is appended by one ``write`` system call on an O_APPEND descriptor, so
    a process killed at any moment (even SIGKILL) leaves whole lines; a line cut short anyway
    (a full disk, a crash of the machine) is dropped when the sweep resumes, by rewriting the
    file atomically (a temporary file, then ``os.replace``). rows.csv is replaced the same way."""
    if backend not in SWEEP_BACKENDS:
        raise InputError(f"backend = {backend!r}: allowed: {', '.join(SWEEP_BACKENDS)}")
    if address is not None and backend != "ray":
        raise InputError(f"--address {address!r} names a Ray cluster: it needs --backend ray")
    rows_path = out / "rows.jsonl"
    _claim_folder(study, out)
    out.mkdir(parents=True, exist_ok=True)
    replace_atomically(out / STUDY_FILE, study.model_dump_json(indent=2) + "\n")
    done = {row["id"]: row for row in repair_rows(rows_path)}
    todo = [s for s in scenarios(study) if s["id"] not in done]
    total = len(done) + len(todo)
    if progress:
        progress(len(done), total)
    if stop_after is not None:
        todo = todo[:stop_after]
    if backend == "ray":
        from planner.studies.ray_backend import run_on_ray

        finished = run_on_ray(study, todo, jobs, address)
    else:
        finished = _run_locally(study, todo, jobs)
    sink = os.open(rows_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for row in finished:
            os.write(sink, (json.dumps(row) + "\n").encode("utf-8"))
            done[row["id"]] = row
            if progress:
                progress(len(done), total)
    finally:
        os.close(sink)
        finished.close()  # stops what is still queued or running (an interrupt, a failure)
    ordered = [done[s["id"]] for s in scenarios(study) if s["id"] in done]
    write_csv(out / "rows.csv", ordered)
    return ordered


def _claim_folder(study: Study, out: Path) -> None:
    """Refuse a results folder that holds another study's rows: a folder resumes only the
    study it was swept from (its study.json, every key compared), so rows of two studies never
    mix under one id."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"--out {out}: not a folder; name a new or a results folder")
    recorded = out / STUDY_FILE
    if not recorded.exists():
        if (out / "rows.jsonl").exists():
            raise InputError(
                f"--out {out}: holds rows.jsonl but no {STUDY_FILE}, so which study it holds "
                "is unknown; use another folder"
            )
        return
    before = read_study(out)
    if before is None:
        raise InputError(f"--out {out}: its {STUDY_FILE} is not a study; use another folder")
    old, new = before.model_dump(mode="json"), study.model_dump(mode="json")
    changed = [key for key in new if old.get(key) != new.get(key)]
    if changed:
        raise InputError(
            f"--out {out}: holds the rows of another study (differs in {', '.join(changed)}); "
            "resume only the same study there, or use another folder"
        )


def _run_locally(study: Study, todo: list[dict[str, Any]], jobs: int) -> Rows:
    """The rows of ``todo`` as they finish: in this process, or in ``jobs`` worker processes
    (closing the generator drops the scenarios not yet started)."""
    if jobs <= 1:
        for scenario in todo:
            yield run_scenario(study, scenario)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(
        max_workers=jobs, initializer=preload_files, initargs=(spec_files(study),)
    )
    try:
        futures = [pool.submit(run_scenario, study, s) for s in todo]
        for future in as_completed(futures):
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
