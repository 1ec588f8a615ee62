"""./run.sh installs once: a second call with nothing changed goes straight to Snakemake or pytest,
and a change of pyproject.toml (or asking for the test extras) installs again.

run.sh runs for real in a copy of the repository's files; the interpreter and Snakemake it calls
are stand-ins that log their arguments, so no package is installed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from offline_browser import CHROMIUM

ROOT = Path(__file__).resolve().parents[1]
FAKE = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../../calls.log"
"""


def _checkout(tmp_path: Path) -> Path:
    """run.sh and pyproject.toml in a fresh folder, with a .venv whose python and snakemake only log."""
    for name in ("run.sh", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "snakemake"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return tmp_path


def _run(checkout: Path, *args: str, workers: str | None = None) -> list[str]:
    """The calls one ./run.sh made, in order (`workers`: EBD2N_TEST_WORKERS, else unset)."""
    log = checkout / "calls.log"
    log.unlink(missing_ok=True)
    env = {key: value for key, value in os.environ.items() if key != "EBD2N_TEST_WORKERS"}
    env |= {"PATH": f"{checkout / '.venv' / 'bin'}:/usr/bin:/bin"} | (
        {"EBD2N_TEST_WORKERS": workers} if workers else {}
    )
    subprocess.run(["bash", "run.sh", *args], cwd=checkout, env=env, check=True, timeout=60, capture_output=True)
    return log.read_text().splitlines() if log.exists() else []


def test_run_sh_installs_once_then_only_runs_snakemake(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    first = _run(checkout, "demo")
    second = _run(checkout, "demo")
    result = (sum(call.startswith("python -m pip install") for call in first), first[-1], second)
    assert result == (2, "snakemake --cores all", ["snakemake --cores all"])


def test_run_sh_installs_again_when_pyproject_changes(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    _run(checkout, "demo")
    with (checkout / "pyproject.toml").open("a") as handle:
        handle.write("\n# a new dependency\n")
    result = _run(checkout, "demo")
    assert "python -m pip install -q -e .[live]" in result


@pytest.mark.skipif(not CHROMIUM.exists(), reason="./run.sh test would install Chromium")
def test_run_sh_test_extras_install_covers_the_demo(tmp_path: Path) -> None:
    """A demo install does not cover the test tools; a test install covers the demo."""
    checkout = _checkout(tmp_path)
    _run(checkout, "demo")
    tests = _run(checkout, "test", "-q")
    demo = _run(checkout, "demo")
    in_one_process = _run(checkout, "test", "-q", workers="0")
    result = ("python -m pip install -q -e .[test]" in tests, tests[-1], demo, in_one_process)
    expected = (True, "python -m pytest -n 2 --dist loadfile -q", ["snakemake --cores all"], ["python -m pytest -q"])
    assert result == expected


def _said(checkout: Path, *args: str) -> list[str]:
    """run.sh's own lines (on stderr) of one ./run.sh, the set-up's duration blanked out."""
    env = {**os.environ, "PATH": f"{checkout / '.venv' / 'bin'}:/usr/bin:/bin"}
    completed = subprocess.run(
        ["bash", "run.sh", *args], cwd=checkout, env=env, check=True, timeout=60, capture_output=True, text=True
    )
    lines = [line for line in completed.stderr.splitlines() if line.startswith("run.sh: ")]
    return [line.split(" (")[0] if line.startswith("run.sh: .venv is ready") else line for line in lines]


def test_run_sh_says_what_it_installs_and_each_stage(tmp_path: Path) -> None:
    """Before the minutes of installing: what, and how long it usually takes; then one line per stage."""
    checkout = _checkout(tmp_path)
    result = (_said(checkout, "demo"), _said(checkout, "demo"))
    demo = "run.sh: running the embedded demo campaign: snakemake --cores all (results in results/demo/)"
    expected = (
        [
            "run.sh: setting up .venv (once): PyTorch, Snakemake, TensorBoard and ebd2n's other dependencies; this"
            " usually takes"
            " about 4 minutes on a fresh machine (most of it downloads)",
            "run.sh: [1/4] .venv exists: reusing its Python",
            "run.sh: [2/4] upgrading pip",
            "run.sh: [3/4] PyTorch is installed in .venv already: kept",
            "run.sh: [4/4] installing ebd2n and its dependencies",
            "run.sh: .venv is ready",
            demo,
        ],
        ["run.sh: .venv is up to date: nothing to install", demo],
    )
    assert result == expected


def test_run_sh_test_extras_hold_the_demo_extras() -> None:
    """The stamp of a test install lists the demo's key too, so the test extras must hold the `live` ones."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    result = [requirement for requirement in extras["live"] if requirement not in extras["test"]]
    assert result == []
