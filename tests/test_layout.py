"""The campaign store owns every on-disk name: no other module, rule or test helper spells one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ebd2n import layout

ROOT = Path(__file__).resolve().parents[1]
NAMES = (
    *layout.RUN_ARTIFACTS,
    f"{layout.CHECKPOINT_DIR}/",
    f"{layout.TENSORBOARD}/",
    layout.JOB_RECORDS,
    layout.LIVE_DASHBOARD,
    layout.PACKS,
    layout.CAMPAIGN_JSON,
    layout.RUNS_CSV,
    layout.AUDIT_JSON,
    layout.AUDIT_RUNS,
    layout.AUDIT_LEDGER,
    layout.AUDIT_HASHES,
    layout.AUDIT_PASSED,
    layout.SOURCE_HASH,
    layout.FREEZE_RECORD,
    f"{layout.SIGNATURES}/",
    layout.PRIVATE_KEY,
    layout.PUBLIC_KEY,
)
PATTERN = re.compile("|".join(rf"(?<![\w.-]){re.escape(name)}" for name in NAMES))
HELPERS = ("campaign_tree.py", "run_dir_factory.py", "workflow_support.py", "offline_browser.py", "conftest.py")


def string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of a Python file that is not documentation (a
    docstring, or a bare string under a field)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def python_sources() -> list[Path]:
    package = sorted((ROOT / "src/ebd2n").rglob("*.py"))
    return [path for path in package if path.name != "layout.py"] + [ROOT / "tests" / name for name in HELPERS]


@pytest.mark.parametrize("path", python_sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_layout_no_file_name_literal_in_python(path: Path) -> None:
    result = [f"{line}: {text!r}" for line, text in string_literals(path) if PATTERN.search(text)]
    assert result == []


@pytest.mark.parametrize(
    "path", sorted((ROOT / "workflow").rglob("*.smk")) + [ROOT / "workflow/Snakefile"], ids=lambda p: p.name
)
def test_layout_no_file_name_literal_in_workflow(path: Path) -> None:
    code = [(n, line.split("#", 1)[0]) for n, line in enumerate(path.read_text().splitlines(), start=1)]
    result = [f"{n}: {line.strip()}" for n, line in code if PATTERN.search(line)]
    assert result == []


def test_layout_pattern_finds_a_literal() -> None:
    result = [
        bool(PATTERN.search(text))
        for text in ("runs/x/final.pt", "final.pt.bak", "my_final.pt", "checkpoints/epoch-1.pt")
    ]
    assert result == [True, True, False, True]
