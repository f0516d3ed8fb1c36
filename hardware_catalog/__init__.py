"""The built-in catalog: systems (``systems/*.yaml``), model presets (``models/*.yaml``),
training-stack profiles (``stacks/*.yaml``), reliability profiles (``reliability/*.yaml``:
failure rates, checkpoint storage, restart costs) and low-precision recipes
(``precisions/*.yaml``).

Every data file of the package (these and ``calibration/``) is read through
``importlib.resources`` (``CATALOG``), never a path relative to the source tree, so an installed
wheel reads the same files as a checkout; pyproject.toml's package-data ships them all.

Each file is a spec of the same shape a user can write (planner.specs); every number in a
catalog file carries its source in the file's ``sources`` mapping. Names are case-insensitive
and aliases are accepted; an unknown name gets a "did you mean" suggestion. A name that is a path
to a ``.yaml``/``.yml``/``.json`` file loads that file instead.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import BinaryIO, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import InputError, describe_validation_error
from planner.specs import (
    ModelSpec,
    PrecisionRecipe,
    ReliabilityProfile,
    StackProfile,
    SystemSpec,
)

CATALOG: Traversable = files(__name__)
"""The package's data as an importlib.resources tree: ``CATALOG / "systems" / "dgx-h100.yaml"``."""
SpecT = TypeVar("SpecT", bound=BaseModel)


def read_spec_file(path: Traversable, spec_type: type[SpecT], what: str) -> SpecT:
    """Load a YAML or JSON file (a user's ``Path`` or a packaged resource) into ``spec_type``;
    every failure is an InputError (one line). Reads at most MAX_SPEC_FILE_BYTES + 1 bytes."""
    return _validate(read_spec_data(path, what), spec_type, what, path.name)


def read_bounded_text(opener: Callable[[], ContextManager[BinaryIO]], where: str) -> str:
    """The UTF-8 text of the stream ``opener`` gives, at most MAX_SPEC_FILE_BYTES (MAX + 1
    bytes are read, so a larger input is refused without reading it whole); every failure is an
    InputError naming ``where``."""
    try:
        with opener() as stream:
            raw = stream.read(MAX_SPEC_FILE_BYTES + 1)
    except OSError as error:
        raise InputError(f"{where}: cannot read ({error.strerror or error})") from None
    if len(raw) > MAX_SPEC_FILE_BYTES:
        raise InputError(f"{where}: larger than {MAX_SPEC_FILE_BYTES >> 20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where}: not a UTF-8 text file") from None


def read_spec_data(path: Traversable, what: str) -> dict:
    """The mapping a YAML or JSON spec file holds, unvalidated; every failure is an InputError
    (one line). Reads at most MAX_SPEC_FILE_BYTES + 1 bytes."""
    where = f"{what} file {str(path)!r}"
    text = read_bounded_text(lambda: path.open("rb"), where)
    try:
        is_json = path.name.endswith(".json")
        data = json.loads(text) if is_json else yaml.load(text, Loader=SAFE_LOADER)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"{where}: not valid YAML/JSON ({first_line})") from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping of fields at the top")
    if _node_count(data, MAX_SPEC_NODES) > MAX_SPEC_NODES:
        raise InputError(
            f"{where}: more than {MAX_SPEC_NODES:,} values (YAML aliases expand; a spec is small)"
        )
    return data


def _validate(data: dict, spec_type: type[SpecT], what: str, file_name: str) -> SpecT:
    try:
        return spec_type.model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(error, f"{what} ({file_name})")) from None


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (10× faster, and no Python recursion on
deep nesting), else the pure-Python one; both refuse ``!!python/...`` tags."""
MAX_SPEC_FILE_BYTES = 16 << 20
"""Spec, study and dataset files are at most 16 MiB (the bundled dataset is ~60 KiB)."""
MAX_SPEC_NODES = 1_000_000
"""Values in a parsed file, each alias counted every time it is used: a YAML "billion laughs"
file is small on disk and expands past any limit."""


def _node_count(data: object, limit: int) -> int:
    """Values in a parsed YAML/JSON tree, counting shared (aliased) ones at each use; stops
    counting past ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return count


@cache
def _file_names(kind: str) -> frozenset[str]:
    """The file names in ``CATALOG / kind`` (one directory listing, no file read)."""
    return frozenset(entry.name for entry in (CATALOG / kind).iterdir())


@cache
def _catalog_data(kind: str, file_name: str) -> dict:
    """A catalog file's parsed YAML, read once per process: the name index and the spec loaded
    from it share one parse (start-up time, issue 17)."""
    return read_spec_data(CATALOG / kind / file_name, kind.removesuffix("s"))


@cache
def _entries(kind: str) -> dict[str, str]:
    """Map every lower-case name and alias of the catalog kind ('systems', 'models', 'stacks') to
    its file's name in ``CATALOG / kind``."""
    table: dict[str, str] = {}
    for file_name in sorted(_file_names(kind)):
        if file_name.endswith(".yaml"):
            data = _catalog_data(kind, file_name)
            for name in (data["name"], *data.get("aliases", ())):
                table[str(name).lower()] = file_name
    return table


def _file_for(kind: str, name: str) -> str | None:
    """The catalog file of a name or alias, None if there is none. A canonical name is its
    file's name (tests/test_catalog.py guards it, and that names and aliases are unique), so
    it is found without reading every file of the catalog for the alias index."""
    key = name.strip().lower()
    if f"{key}.yaml" in _file_names(kind):
        return f"{key}.yaml"
    return _entries(kind).get(key)


def _names(kind: str) -> list[str]:
    return sorted(file_name.removesuffix(".yaml") for file_name in set(_entries(kind).values()))


def system_names() -> list[str]:
    """Canonical names of the built-in systems."""
    return _names("systems")


def model_names() -> list[str]:
    """Canonical names of the built-in model presets."""
    return _names("models")


def stack_names() -> list[str]:
    """Canonical names of the built-in training-stack profiles."""
    return _names("stacks")


def reliability_names() -> list[str]:
    """Canonical names of the built-in reliability profiles."""
    return _names("reliability")


def precision_names() -> list[str]:
    """Canonical names of the built-in precision recipes."""
    return _names("precisions")


def is_spec_path(name: str) -> bool:
    """Whether a name stands for a user's spec file rather than a catalog entry."""
    return name.endswith((".yaml", ".yml", ".json")) or "/" in name or "\\" in name


_PRELOADED: dict[tuple[str, str], BaseModel] = {}
"""User spec files read elsewhere, by (kind, path as written): see ``preload``."""


def preload(kind: str, name: str, spec: BaseModel | None) -> None:
    """Answer ``name`` (a spec file's path) of ``kind`` ("systems", "models", "stacks",
    "reliability") with
    ``spec`` in this process, without reading the file: a sweep's remote workers get the
    driver's files this way (they may run on machines that do not have them). ``None`` forgets
    the name: it is read from the file again."""
    if spec is None:
        _PRELOADED.pop((kind, name), None)
    else:
        _PRELOADED[(kind, name)] = spec


def _resolve(kind: str, name: str, spec_type: type[SpecT], what: str) -> SpecT:
    if is_spec_path(name):
        preloaded = _PRELOADED.get((kind, name))
        if isinstance(preloaded, spec_type):
            return preloaded
        return read_spec_file(Path(name), spec_type, what)
    file_name = _file_for(kind, name)
    if file_name is None:
        close = difflib.get_close_matches(name.lower(), _entries(kind).keys(), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise InputError(
            f"{what} {name!r} is not in the catalog; {hint}"
            f"see `planner catalog {kind}`, or pass a path to a YAML/JSON spec file"
        )
    return _load_catalog_file(kind, file_name, spec_type, what)


@cache
def _load_catalog_file(kind: str, file_name: str, spec_type: type[SpecT], what: str) -> SpecT:
    return _validate(_catalog_data(kind, file_name), spec_type, what, file_name)


def load_system(name: str) -> SystemSpec:
    """A built-in system by name or alias, or a system spec file by path."""
    return _resolve("systems", name, SystemSpec, "system")


def load_model(name: str) -> ModelSpec:
    """A built-in model preset by name or alias, or a model spec file by path."""
    return _resolve("models", name, ModelSpec, "model")


def load_stack(name: str) -> StackProfile:
    """A built-in training-stack profile by name or alias, or a profile spec file by path."""
    return _resolve("stacks", name, StackProfile, "stack")


def load_reliability(name: str) -> ReliabilityProfile:
    """A built-in reliability profile by name or alias, or a profile spec file by path."""
    return _resolve("reliability", name, ReliabilityProfile, "reliability profile")


def load_precision(name: str) -> PrecisionRecipe:
    """A built-in precision recipe by name or alias (``precisions/*.yaml``)."""
    return _resolve("precisions", name, PrecisionRecipe, "precision recipe")
