"""The package stands alone: a wheel built with `python -m build`, installed into a fresh venv,
runs `ebd2n recipe`, `ebd2n prepare` and a demo `ebd2n train` from an empty directory, and checks a
campaign file against the shipped schema.

The build runs on a copy of the files a wheel is made of (the checkout stays untouched) and without
build isolation (setuptools of this interpreter; no download). The venv sees this interpreter's
site-packages through a .pth line, so torch and the other dependencies need no download, and the
wheel is installed with --no-deps; PYTHONPATH is cleared, so `ebd2n` can only come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WHEEL_INPUTS = ("pyproject.toml", "README.md", "src")


def _run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """Run with `env`, by default this environment without PYTHONPATH (through which pip would take the
    checkout's package for one already installed)."""
    env = env or {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_wheel_installs_and_runs_from_an_empty_directory(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in WHEEL_INPUTS:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(
            REPO / name,
            source / name,
            **({"ignore": shutil.ignore_patterns("__pycache__", "*.egg-info")} if copy is shutil.copytree else {}),
        )
    _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "dist", source, cwd=source)
    wheel = next((tmp_path / "dist").glob("ebd2n-*.whl"))

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp_path).stdout.strip()
    )
    (site / "shared-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        "--force-reinstall",
        wheel,
        cwd=tmp_path,
    )

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    ebd2n = venv / "bin" / "ebd2n"
    located = _run(python, "-c", "import ebd2n; print(ebd2n.__file__)", cwd=empty, env=env).stdout.strip()
    recipe = _run(ebd2n, "recipe", "20m", cwd=empty, env=env).stdout
    prepared = _run(ebd2n, "prepare", "demo", "--quiet", cwd=empty, env=env).stdout
    trained = _run(
        ebd2n,
        "train",
        "--config",
        "demo",
        "--set",
        "training.max_tokens=4096",
        "--set",
        "training.epoch_tokens=2048",
        "--set",
        "runtime.output_dir=runs/wheel",
        "--quiet",
        cwd=empty,
        env=env,
    ).stdout
    (empty / "campaign.yaml").write_text("unknown_key: 1\n")
    checked = subprocess.run(
        [ebd2n, "campaign", "check", "campaign.yaml"], cwd=empty, env=env, capture_output=True, text=True, timeout=120
    )
    result = (
        Path(located).is_relative_to(site),
        (checked.returncode, "top level: unknown key 'unknown_key' (the keys here: " in checked.stderr),
        "parameters: " in recipe,
        prepared.startswith("cache results/caches/synthetic"),
        trained.startswith("done: runs/wheel/final.pt, dashboard runs/wheel/report.html"),
        sorted(p.name for p in (empty / "runs/wheel").iterdir() if p.is_file()),
    )
    assert result == (
        True,
        (2, True),
        True,
        True,
        True,
        [
            "best.json",
            "checkpoints.json",
            "final.pt",
            "jobs.jsonl",
            "metrics.jsonl",
            "recipe.yaml",
            "report.html",
            "run.json",
            "train.log",
        ],
    )
