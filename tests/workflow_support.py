"""Running the real Snakemake on tiny campaigns in a copy of the repository (workflow and audit tests).

Tests never touch this checkout: they copy workflow/, config/, profiles/, slurm/ and src/
into tmp_path and run `python -m snakemake` there with this interpreter first on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from ebd2n.train.records import read_metrics

REPO = Path(__file__).resolve().parents[1]
COPIED = ("workflow", "config", "profiles", "slurm", "src", "environment.yml")
TINY = {
    "campaign": "tiny",
    "recipe": "demo",
    "data": {
        "source": "synthetic",
        "cache_dir": "results/caches/tiny",
        "synthetic_train_bytes": 300000,
        "synthetic_validation_bytes": 30000,
    },
    "overrides": {
        "training.max_tokens": 65536,  # 2 epochs x 32 steps x 1,024 tokens
        "training.epoch_tokens": 32768,
        "evaluation.subset_blocks": 16,
    },
    "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.003]}, "beta2": [0.99]},
    "seeds": [42],
    "epochs_per_slice": 1,
    "resources": {"default": {"gpus": 0, "minutes": 7, "mem_mb": 1234, "cpus": 1}},
}
TIMEOUT = 600
TIMING_FIELDS = {"tokens_per_s", "batches_per_s", "wall_s", "memory"}
"""Fields of metrics.jsonl records that depend on the machine's speed, not on the training."""


def copy_repo(destination: Path) -> Path:
    for name in COPIED:
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, destination / name)
        else:
            shutil.copytree(
                REPO / name, destination / name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True
            )
    return destination


def write_campaign(repo: Path, raw: dict, name: str = "tiny.yaml") -> str:
    path = repo / "config" / "campaigns" / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return f"config/campaigns/{name}"


def environment(extra_path: Path | None = None) -> dict[str, str]:
    """This interpreter's bin first on PATH (stand-in SLURM tools before it); this checkout's
    package on PYTHONPATH (the workflow imports ebd2n, and its jobs run `python -m ebd2n`)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env["PYTHONPATH"] = str(REPO / "src")
    path = [str(Path(sys.executable).parent), env.get("PATH", "")]
    if extra_path:
        path.insert(0, str(extra_path))
    env["PATH"] = os.pathsep.join(path)
    env.setdefault("EBD2N_WARM_IDLE", "10")  # warm-start servers of finished test campaigns go soon
    return env


def snakemake(repo: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", *args]
    result = subprocess.run(
        command, cwd=repo, env=env or environment(), capture_output=True, text=True, timeout=TIMEOUT
    )
    if check and result.returncode:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def killed_write(path: Path, data: bytes) -> Path:
    """What a writer killed inside `ebd2n.atomic.atomic_write_bytes(path, data)` leaves: its temporary
    beside `path`, named by a process that is gone (a child SIGKILLed by EBD2N_KILL_AT before the rename)."""
    code = "import sys; from ebd2n.atomic import atomic_write_bytes as w; w(sys.argv[1], sys.stdin.buffer.read())"
    env = {**environment(), "EBD2N_KILL_AT": f"before:{Path(path).absolute()}", "EBD2N_KILL_TARGET": ""}
    before = set(Path(path).parent.glob(f".{Path(path).name}.*.tmp"))
    killed = subprocess.run(
        [sys.executable, "-c", code, str(path)], input=data, env=env, capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    (leftover,) = set(Path(path).parent.glob(f".{Path(path).name}.*.tmp")) - before
    return leftover


def assert_states_equal(left, right) -> None:
    """Bitwise equality of nested checkpoint states (tensors, dicts, lists, plain values)."""
    if isinstance(left, torch.Tensor):
        assert torch.equal(left, right)
    elif isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_states_equal(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            assert_states_equal(a, b)
    else:
        assert left == right


def comparable_metrics(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl records without their timing fields: equal for runs that trained alike."""
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_metrics(run_dir)]
