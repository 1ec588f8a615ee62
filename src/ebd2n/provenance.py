"""Where a result came from: the trainer's source hash, the job and its writing process, the software and hardware."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import socket
import time
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
STACK = (
    "torch",
    "numpy",
    "polars",
    "pydantic",
    "tokenizers",
    "datasets",
    "snakemake",
    "snakemake-executor-plugin-slurm",
)
"""Packages whose versions a campaign record keeps: the numerical stack and the job machinery."""
_SOURCE_SUFFIXES = (".py", ".html", ".js", ".css", ".yaml", ".json")


LAUNCHER = "warm.py"
"""The warm-start launcher (ebd2n.warm): how a job starts, not what it computes; no part of the source hash."""


def source_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The files whose content defines the trainer's behaviour, in a stable order."""
    return sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file() and p.suffix in _SOURCE_SUFFIXES and "__pycache__" not in p.parts and p != package_dir / LAUNCHER
    )


def source_hash(package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 over (relative path, content) of every source file: equal code, equal hash."""
    digest = hashlib.sha256()
    for path in source_files(package_dir):
        digest.update(path.relative_to(package_dir).as_posix().encode())
        digest.update(b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def timestamp(seconds: float | None = None) -> str:
    """Local time with its UTC offset (`2026-11-30T12:00:00+0000`), as every record writes it; now by default."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def is_main_process() -> bool:
    """Whether this process writes a job's records: the only process, or rank 0 of a torchrun job
    (what `Context.is_main` says, for callers holding no context)."""
    return int(os.environ.get("RANK", "0")) == 0


def environment() -> dict:
    """Software and hardware facts recorded beside every result."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else ["cpu"],
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # the job's GPU slots (ebd2n.launch)
        "platform": platform.platform(),
    }


def software_versions() -> dict[str, str | None]:
    """Python and each package of STACK as installed here (None: not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in STACK:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def job_usage() -> str:
    """This process's CPU time and peak resident memory, as one log line. A job forked from the
    warm-start server counts only its own CPU time (and, as a cold process would, the imported
    modules' memory); Snakemake's benchmark file of such a job measures its client instead."""
    import resource
    import sys

    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
    return (
        f"job usage: cpu {usage.ru_utime + usage.ru_stime:.2f} s "
        f"(user {usage.ru_utime:.2f}, system {usage.ru_stime:.2f}) | peak rss {peak / 2**20:.0f} MiB"
    )
