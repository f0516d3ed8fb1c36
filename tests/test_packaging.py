"""The wheel ships every data file the code reads (issue 18), checked without building one.

pytest runs from the checkout, where the source tree shadows the installed package, so a data
file left out of ``package-data`` is invisible here; these tests compare the tree with
pyproject.toml instead. ``.ci/smoke`` runs the CLI from an installed wheel.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "setuptools"
]
PACKAGES = sorted(pattern.rstrip("*") for pattern in SETUPTOOLS["packages"]["find"]["include"])


def unpackaged(package_dir: Path, patterns: list[str]) -> list[str]:
    """Files under ``package_dir`` that are not Python source, bytecode or hidden (editor
    droppings) and that no package-data glob matches (globs relative to the package folder,
    ``**`` = any depth, as setuptools expands them)."""
    shipped = {path for pattern in patterns for path in package_dir.glob(pattern)}
    return sorted(
        path.relative_to(package_dir).as_posix()
        for path in package_dir.rglob("*")
        if path.is_file()
        and path.suffix not in (".py", ".pyc")
        and not path.name.startswith(".")
        and "__pycache__" not in path.parts
        and path not in shipped
    )


def patterns_for(package: str) -> list[str]:
    data = SETUPTOOLS.get("package-data", {})
    return [*data.get("*", []), *data.get(package, [])]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_data_file_in_a_package_is_in_package_data(package: str) -> None:
    assert unpackaged(ROOT / package, patterns_for(package)) == []


def test_the_check_sees_issue_18() -> None:
    """The package-data of issue 18 left the calibration data out; the check must say so."""
    old = ["systems/*.yaml", "models/*.yaml"]
    assert "calibration/published_runs.yaml" in unpackaged(ROOT / "hardware_catalog", old)


def file_uses(source: str) -> list[int]:
    """Lines of ``source`` that use ``__file__``."""
    tree = ast.parse(source)
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "__file__"]


def test_the_source_check_sees_a_path_relative_to_the_module() -> None:
    assert file_uses("from pathlib import Path\nDATA = Path(__file__).parent / 'x.yaml'\n") == [2]


def test_no_module_reads_files_relative_to_its_source() -> None:
    """Data is read through importlib.resources (hardware_catalog.CATALOG), not ``__file__``."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in file_uses(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
