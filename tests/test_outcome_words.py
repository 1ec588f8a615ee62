"""One outcome model and one record reader: no other module spells an outcome word or a metrics
record type (ebd2n.outcomes, ebd2n.train.records own them; the templates they feed may show them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ebd2n.outcomes import CheckStatus, LiveState, Outcome, PointOutcome
from ebd2n.train.records import TYPE, RecordType

ROOT = Path(__file__).resolve().parents[1]
OWNERS = ("outcomes.py", "train/records.py")
WORDS = {word.value for enum in (Outcome, LiveState, PointOutcome) for word in enum} - {Outcome.MISSING.value} | {
    CheckStatus.FAILED.value,
    CheckStatus.NOT_APPLICABLE.value,
}
"""The words (but "missing", which also says that a file is absent)."""
RECORD_TYPES = {kind.value for kind in RecordType}
OTHER_MEANINGS = {
    ("config", "training"): "the recipe's `training` section",
    ("config", "complete"): "the complete gossip topology",
    ("model", "complete"): "the complete gossip topology",
    ("report", "complete"): "Plotly's minorloglabels: every minor tick of a log axis labelled in full",
}
"""(package, word) pairs where the word names something else than an outcome."""


def _sources() -> list[Path]:
    package = ROOT / "src/ebd2n"
    return [path for path in sorted(package.rglob("*.py")) if path.relative_to(package).as_posix() not in OWNERS]


def _type_of(node: ast.AST) -> bool:
    """Whether `node` reads a record's type: `record.get("type")` or `record["type"]`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == TYPE
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == TYPE


def spelled(source: str, package: str) -> list[str]:
    """Every outcome word of a module's code (docstrings aside) and every record type it compares
    a record's type with, builds a record with, or searches lines for."""
    tree = ast.parse(source)
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if text in WORDS and (package, text) not in OTHER_MEANINGS:
                found.append(f"{node.lineno}: outcome {text!r}")
            elif isinstance(text, str) and f'"{TYPE}"' in text and any(kind in text for kind in RECORD_TYPES):
                found.append(f"{node.lineno}: record pattern {text!r}")
        elif isinstance(node, ast.Compare) and any(_type_of(side) for side in (node.left, *node.comparators)):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in RECORD_TYPES:
                    found.append(f"{node.lineno}: record type {side.value!r}")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                is_type = isinstance(key, ast.Constant) and key.value == TYPE
                if is_type and isinstance(value, ast.Constant) and value.value in RECORD_TYPES:
                    found.append(f"{node.lineno}: record type {value.value!r}")
    return sorted(found)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_outcome_words_are_spelled_by_their_owners_only(path: Path) -> None:
    package = path.relative_to(ROOT / "src/ebd2n").parts[0]
    result = spelled(path.read_text(encoding="utf-8"), package)
    assert result == []


def test_outcome_words_scan_finds_each_kind_of_spelling() -> None:
    source = '''
def f(record, row):
    """Docstrings may say "diverged"."""
    if record.get("type") == "epoch" or row["status"] == "failed":
        return {"type": "step", "loss": 1.0}
    return re.compile(rb'"type": ?"step"')
'''
    result = [line.split(": ", 1)[1] for line in spelled(source, "campaign")]
    expected = ["outcome 'failed'", 'record pattern \'"type": ?"step"\'', "record type 'epoch'", "record type 'step'"]
    assert sorted(result) == sorted(expected)
