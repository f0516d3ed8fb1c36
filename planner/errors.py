"""Errors a user can cause, each rendered as one line naming the field, the value and what is
allowed (the CLI prints it and exits with code 2)."""

from __future__ import annotations

from pydantic import ValidationError


class InputError(ValueError):
    """Bad input: unknown name, malformed file, impossible combination. ``str()`` is one line."""


class InternalError(RuntimeError):
    """A bug in planner, not in the input (the CLI says so in one line, exit code 1)."""


def describe_validation_error(error: ValidationError, where: str) -> str:
    """One line for the first problem of a pydantic error, e.g.
    ``model.hidden = -5: Input should be greater than 0``."""
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    location = f"{where}.{path}" if path else where
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"{location}: unknown field (check the spelling; see `planner catalog show`)"
    if first["type"] == "missing":
        return f"{location}: required field is missing"
    if "input" in first and not isinstance(first["input"], dict | list):
        return f"{location} = {first['input']!r}: {message}"
    return f"{location}: {message}"
