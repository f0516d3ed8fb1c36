"""Errors a user can cause, each rendered as one line naming the field, the value and what is
allowed (the CLI prints it and exits with code 2)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ValidationError


class InputError(ValueError):
    """Bad input: unknown name, malformed file, impossible combination. ``str()`` is one line."""


class InternalError(RuntimeError):
    """A bug in planner, not in the input (the CLI says so in one line, exit code 1)."""


_VALIDATOR_TAG = re.compile(r"^[a-z-]+\[.*\]$")
"""A location part that names how pydantic validated a union member, not a field:
``function-after[_check_experts(), ModelSpec]``, ``tagged-union[...]``."""


def _is_tag(part: object) -> bool:
    """Whether a pydantic location part names a union member's validator or model class
    (``ModelSpec`` in ``model.ModelSpec.layers``) rather than a field, key or index."""
    text = str(part)
    return bool(_VALIDATOR_TAG.match(text)) or text in _model_class_names()


def _model_class_names() -> set[str]:
    """The names of every pydantic model class defined so far."""
    names, pending = set(), [BaseModel]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub.__name__ not in names:
                names.add(sub.__name__)
                pending.append(sub)
    return names


def describe_validation_error(error: ValidationError, where: str) -> str:
    """One line for the first problem of a pydantic error, e.g.
    ``model.hidden = -5: Input should be greater than 0``; the location names fields and
    indices only (pydantic's union-member tags such as ``function-after[...]`` are left out)."""
    first = error.errors()[0]
    parts = [part for part in first["loc"] if not _is_tag(part)]
    path = ".".join(str(part) for part in parts)
    location = f"{where}.{path}" if path else where
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"{location}: unknown field (check the spelling; see `planner catalog show`)"
    if first["type"] == "missing":
        return f"{location}: required field is missing"
    if "input" in first and not isinstance(first["input"], dict | list):
        return f"{location} = {first['input']!r}: {message}"
    return f"{location}: {message}"
