"""What every command writes besides its tables: exit codes, strict JSON on stdout, one-line
errors and progress on stderr. Apart so that each command module and main() share them
without importing one another."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_TIME_LIMIT = 0, 1, 2, 3, 4


def print_json(payload: object) -> None:
    """``payload`` as strict JSON: a non-finite number (which JSON cannot hold; Python would
    write ``Infinity``) becomes null."""
    print(json.dumps(_finite(payload), indent=2, sort_keys=False, allow_nan=False))


def _finite(value: object) -> object:
    """``value`` with every non-finite float, however deep in dicts and lists, replaced by
    None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def print_error(message: str) -> None:
    """One line on stderr, through rich (which wraps and colours like the rest of the output);
    rich.console loads here, not at start-up, for the paths that print nothing else."""
    from rich.console import Console

    Console(stderr=True).print(message, markup=False, highlight=False, soft_wrap=True)


PROGRESS_AFTER_S = 5.0
"""A command that has run this long reports its progress on stderr (a short one says nothing)."""


def slow_progress(command: str) -> Callable[[str], None]:
    """A progress callback that prints each line on stderr ('planner validate: ...') once the
    command has run PROGRESS_AFTER_S; the lines before that are dropped."""
    import time

    started = time.perf_counter()

    def progress(line: str) -> None:
        if time.perf_counter() - started >= PROGRESS_AFTER_S:
            print_error(f"planner {command}: {line}")

    return progress
