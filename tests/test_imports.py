"""The package's layers only point down: every import statement (module level, inside functions,
under TYPE_CHECKING) read with ast; no cycle between modules, no import from a layer to a higher one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ebd2n"

LAYERS = (
    {
        "ebd2n",
        "layout",
        "errors",
        "atomic",
        "fileidentity",
        "yamlio",
        "jsonio",
        "targets",
        "provenance",
        "job_time",
        "faults",
        "quantities",
        "slots",
        "outcomes",
    },
    {"signing"},
    {"config"},
    {"data", "model"},
    {"parallel", "hf_init"},
    {"train"},
    {"evaluate", "export"},
    {"campaign"},
    {"report"},
    {"audit"},
    {"commands"},
    {"subcommands"},
    {"cli"},
    {"warm", "launch"},
    {"__main__"},
)
"""Lowest first. A unit (a subpackage or a top-level module) imports its own modules and units of
lower layers; the foundation (first layer) may import itself; units sharing another layer import
neither each other. `ebd2n` is the package's own __init__."""


def module_imports(package: Path) -> dict[str, set[str]]:
    """Every module of the package (dotted name) -> the package's modules its statements import."""
    modules = {_module_name(package, path): path for path in sorted(package.rglob("*.py"))}
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node, name, is_package, package.name):
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def _module_name(package: Path, path: Path) -> str:
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, importer: str, is_package: bool, root: str) -> list[str]:
    """Dotted names a statement imports (`from a import b` names a.b, which may be a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = importer.split(".")[: None if is_package else -1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    if module != root and not module.startswith(f"{root}."):
        return []
    return [f"{module}.{alias.name}" for alias in node.names]


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(unit: str) -> int:
    for rank, units in enumerate(LAYERS):
        if unit in units:
            return rank
    raise KeyError(unit)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """`importer -> imported` for each import that does not point down (or into its own unit)."""
    wrong = []
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            own, other = unit_of(importer), unit_of(target)
            if own == other or layer_of(other) < layer_of(own) or layer_of(own) == layer_of(other) == 0:
                continue
            wrong.append(f"{importer} -> {target}")
    return wrong


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(module) for module in module_imports(PACKAGE)}
    assert sorted(unit for unit in units if not any(unit in layer for layer in LAYERS)) == []


def test_no_import_cycle_between_modules() -> None:
    assert cycles(module_imports(PACKAGE)) == []


def test_no_import_points_up_a_layer() -> None:
    assert upward_imports(module_imports(PACKAGE)) == []


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A package in the same shape with one upward import inside a function and one cycle."""
    root = tmp_path / "ebd2n"
    files = {
        "__init__.py": "",
        "errors.py": "",
        "train/__init__.py": "",
        "train/trainer.py": "from ebd2n.errors import UserError\n\ndef f():\n    from ebd2n.report import dashboard\n",
        "train/engine.py": "from . import other\n",
        "train/other.py": "from ebd2n.train.engine import x\n",
        "report/__init__.py": "",
        "report/dashboard.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_checks_find_a_planted_upward_import_and_cycle(planted: Path) -> None:
    graph = module_imports(planted)
    assert (upward_imports(graph), cycles(graph)) == (
        ["ebd2n.train.trainer -> ebd2n.report.dashboard"],
        [["ebd2n.train.engine", "ebd2n.train.other"]],
    )
