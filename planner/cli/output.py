"""What every command writes besides its tables: exit codes, strict JSON on stdout, one-line
errors and progress on stderr. Apart so that each command module and main() share them
without importing one another."""

from __future__ import annotations

import codecs
import io
import json
import math
import sys
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


ASCII_FALLBACKS = {
    "…": "...", "→": "->", "←": "<-", "↔": "<->", "⇒": "=>", "×": "x", "·": ".", "÷": "/",
    "≤": "<=", "≥": ">=", "≈": "~", "−": "-", "–": "-", "—": "--", "±": "+-", "Σ": "sum",
    "√": "sqrt", "µ": "u", "²": "^2", "³": "^3", "‘": "'", "’": "'", "“": '"', "”": '"',
    "§": "S", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
}  # fmt: skip
"""What a character the output's encoding cannot write becomes (ascii_fallback): its ASCII
spelling where it has one, else ``?``."""

ASCII_FALLBACK = "planner-ascii"
"""The codec error handler that writes ASCII_FALLBACKS (registered by degrade_to_encoding)."""


def ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: each character that cannot be encoded becomes its
    ASCII_FALLBACKS spelling, else ``?``."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(ASCII_FALLBACKS.get(char, "?") for char in text), error.end


def degrade_to_encoding(*streams: object) -> None:
    """Let each text stream (default: stdout and stderr) write what its encoding cannot hold
    (an ASCII terminal, ``PYTHONIOENCODING=ascii``, a latin-1 locale) as ASCII_FALLBACKS rather
    than fail with UnicodeEncodeError: planner's tables and notes use "…", "→", "×", "≤". A
    stream that can encode them, or is no reconfigurable text file, is left as it is."""
    codecs.register_error(ASCII_FALLBACK, ascii_fallback)
    for stream in streams or (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper) or _encodes(stream, "…→×"):
            continue
        stream.reconfigure(errors=ASCII_FALLBACK)


def _encodes(stream: io.TextIOWrapper, sample: str) -> bool:
    try:
        sample.encode(stream.encoding or "ascii")
    except (UnicodeError, LookupError):
        return False
    return True


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
