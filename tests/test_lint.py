"""The code as its own tools judge it: `snakemake --lint`, `snakefmt --check`, `ruff format --check`, `ruff check`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workflow_support import environment

ROOT = Path(__file__).resolve().parents[1]


def test_snakefmt_leaves_the_workflow_unchanged() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "workflow"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakemake_lint_reports_nothing() -> None:
    """Linting parses the Snakefile (and so validates the demo campaign) and runs no job."""
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert (result.returncode, "Lints for" in output) == (0, False), output


RUFF_PATHS = ("src", "tests", "benchmarks")
"""What ruff formats and lints (pyproject.toml's [tool.ruff]: line length 120)."""


def test_ruff_format_leaves_the_code_unchanged() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *RUFF_PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_check_reports_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *RUFF_PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
