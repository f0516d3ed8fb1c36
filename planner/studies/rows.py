"""The rows of a sweep's results folder: rows.jsonl (one JSON line per finished scenario, appended
as each finishes), rows.csv, and the study.json the rows were swept from; reading them back whole
after an interruption."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.studies.study import Study

STUDY_FILE = "study.json"
"""The study as run, written next to its rows (plots title themselves with it)."""


Rows = Generator[dict[str, Any], None, None]
"""Rows of a study as its scenarios finish, in any order (a backend's answer)."""


def read_study(out: Path) -> Study | None:
    """The study a results folder was swept from (None for a folder without one, or whose
    study.json is not a study)."""
    try:
        return Study.model_validate_json((out / STUDY_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValidationError):
        return None


def read_rows(out: Path) -> list[dict[str, Any]]:
    """Rows already written, one per scenario id (lines that are not whole rows are skipped)."""
    return read_rows_counted(out)[0]


def read_rows_counted(out: Path) -> tuple[list[dict[str, Any]], int]:
    """(rows already written, one per scenario id; how many lines were not whole rows)."""
    rows, unreadable = _parse_rows(out / "rows.jsonl")
    return list(rows.values()), unreadable


def _parse_rows(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """(rows by id, how many lines are something else: torn, not JSON, not UTF-8, a row without
    an id, a repeated id)."""
    if not path.exists():
        return {}, 0
    rows: dict[str, dict[str, Any]] = {}
    lines = path.read_bytes().split(b"\n")
    whole = lines[:-1]  # the last piece is empty when the file ends a line, else torn
    unreadable = int(lines[-1] != b"")
    for line in whole:
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            unreadable += 1
            continue
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or row["id"] in rows:
            unreadable += 1
            continue
        rows[row["id"]] = row
    return rows, unreadable


def repair_rows(path: Path) -> list[dict[str, Any]]:
    """The whole rows of ``path``; rewritten atomically first if it holds anything else."""
    rows, unreadable = _parse_rows(path)
    if unreadable:
        replace_atomically(path, "".join(json.dumps(row) + "\n" for row in rows.values()))
    return list(rows.values())


def replace_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    replace_atomically(path, buffer.getvalue())
