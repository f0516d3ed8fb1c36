"""The built-in catalog: systems (``systems/*.yaml``) and model presets (``models/*.yaml``).

Each file is a spec of the same shape a user can write (planner.specs); every number in a
catalog file carries its source in the file's ``sources`` mapping. Names are case-insensitive
and aliases are accepted; an unknown name gets a "did you mean" suggestion. A name that is a path
to a ``.yaml``/``.yml``/``.json`` file loads that file instead.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import InputError, describe_validation_error
from planner.specs import ModelSpec, SystemSpec

CATALOG_DIR = Path(__file__).resolve().parent
SpecT = TypeVar("SpecT", bound=BaseModel)


def read_spec_file(path: Path, spec_type: type[SpecT], what: str) -> SpecT:
    """Load a YAML or JSON file into ``spec_type``; every failure is an InputError (one line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{what} file {str(path)!r}: cannot read ({error.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        first_line = str(error).splitlines()[0]
        raise InputError(f"{what} file {str(path)!r}: not valid YAML/JSON ({first_line})") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} file {str(path)!r}: expected a mapping of fields at the top")
    try:
        return spec_type.model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(error, f"{what} ({path.name})")) from None


@cache
def _entries(kind: str) -> dict[str, Path]:
    """Map every lower-case name and alias of the catalog kind ('systems'/'models') to its file."""
    table: dict[str, Path] = {}
    for path in sorted((CATALOG_DIR / kind).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for name in (data["name"], *data.get("aliases", ())):
            table[str(name).lower()] = path
    return table


def _names(kind: str) -> list[str]:
    return sorted(path.stem for path in set(_entries(kind).values()))


def system_names() -> list[str]:
    """Canonical names of the built-in systems."""
    return _names("systems")


def model_names() -> list[str]:
    """Canonical names of the built-in model presets."""
    return _names("models")


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml", ".json")) or "/" in name or "\\" in name


def _resolve(kind: str, name: str, spec_type: type[SpecT], what: str) -> SpecT:
    if _looks_like_path(name):
        return read_spec_file(Path(name), spec_type, what)
    path = _entries(kind).get(name.strip().lower())
    if path is None:
        close = difflib.get_close_matches(name.lower(), _entries(kind).keys(), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise InputError(
            f"{what} {name!r} is not in the catalog; {hint}"
            f"see `planner catalog {kind}`, or pass a path to a YAML/JSON spec file"
        )
    return _load_catalog_file(path, spec_type, what)


@cache
def _load_catalog_file(path: Path, spec_type: type[SpecT], what: str) -> SpecT:
    return read_spec_file(path, spec_type, what)


def load_system(name: str) -> SystemSpec:
    """A built-in system by name or alias, or a system spec file by path."""
    return _resolve("systems", name, SystemSpec, "system")


def load_model(name: str) -> ModelSpec:
    """A built-in model preset by name or alias, or a model spec file by path."""
    return _resolve("models", name, ModelSpec, "model")
