"""What a new user first types: `ebd2n --version` and `ebd2n --help`."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, env=env, timeout=60)


def test_cli_version_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    completed = _cli("--version")
    assert (completed.returncode, completed.stdout) == (0, f"ebd2n {version}\n")


def test_cli_help_speaks_to_users_and_lists_every_command() -> None:
    text = _cli("--help").stdout
    commands = ["recipe", "prepare", "train", "validate", "campaign", "status", "dashboard", "report", "audit"]
    listed = {line.split()[0] for line in text.splitlines() if line.startswith("    ") and not line.startswith("     ")}
    result = ("thin wrappers" in text, [command for command in commands if command not in listed])
    assert result == (False, [])
