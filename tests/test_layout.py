"""The package's layout (issue 36): imports run downward through the layers, no module imports
itself back through others, and no module grows past ~500 lines without saying why at its top.

The layers, lowest first (README, "Layout"): errors; specs (the inputs); cost (the analytical
model); space (rules, domains, the raw oracle); constraints (the CP-SAT encoding); queries
(evaluate, plan, ranking, diagnosis, min-hardware); launch, studies and accuracy (what is built on
the queries); cli (the command line). A module may import from its own layer or any layer below,
at its top or inside a function. The one exception is the top package ``planner`` itself, whose
``__init__`` holds only the version and the lazily loaded public API, read by the Ray backend to
compare versions across nodes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("planner", "constraints")
LAYERS: tuple[tuple[str, int], ...] = (
    ("planner.errors", 0),
    ("planner.specs", 1),
    ("planner.cost", 2),
    ("planner.space", 3),
    ("constraints", 4),
    ("planner.queries", 5),
    ("planner.launch", 6),
    ("planner.studies", 6),
    ("planner.accuracy", 6),
    ("planner.cli", 7),
    ("planner.__main__", 8),
)
MAX_LINES = 500
REASON = "Over 500 lines"
"""What a longer module's docstring says before its reason."""


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(name: str, path: Path) -> set[str]:
    """The package modules ``name`` imports when it runs (at its top or in a function; not
    those imported for type checking only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node)
        for inner in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    found.add(full)
                elif base in MODULES:
                    found.add(base)
    found.discard(name)
    return found


GRAPH = {name: _imported(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int | None:
    matches = [rank for prefix, rank in LAYERS if name == prefix or name.startswith(prefix + ".")]
    return max(matches) if matches else None


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in MODULES if name not in PACKAGES and _layer(name) is None]
    assert not unplaced, (
        f"modules outside every layer (add them to LAYERS and the README): {unplaced}"
    )


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_run_downward(name: str) -> None:
    if name in PACKAGES:
        return
    upward = [
        target
        for target in GRAPH[name]
        if target not in PACKAGES and (_layer(target) or 0) > (_layer(name) or 0)
    ]
    assert not upward, f"{name} (layer {_layer(name)}) imports a higher layer: {upward}"


def test_no_import_circles() -> None:
    """Tarjan's strongly connected components of the import graph: each must be one module."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in GRAPH:
        if node not in order:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_the_checker_sees_a_circle_and_an_upward_import() -> None:
    """The graph is read from real import statements: constraints.tables imports the cost model
    (downward, seen) and planner.queries.plan imports constraints (seen)."""
    assert "planner.cost.step" in GRAPH["constraints.tables"]
    assert any(target.startswith("constraints") for target in GRAPH["planner.queries.plan"])
    assert _layer("planner.cli.plan") > _layer("planner.queries.plan")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_long_modules_say_why(name: str) -> None:
    path = MODULES[name]
    text = path.read_text(encoding="utf-8")
    lines = text.count("\n")
    if lines <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert REASON in docstring, (
        f"{path.relative_to(ROOT)} has {lines} lines: split it, or state at its top "
        f"'{REASON} ...: <the reason>'"
    )
