"""GPU slots on one machine: each local job gets device ids of its own from the machine's pool.

Snakemake's `--resources gpu=N` bounds how many GPUs local jobs ask for at once, but hands no job a
device: without slots every job opens `cuda:0`. A job asking for G GPUs takes G ids of the pool
by an exclusive `flock` on one lock file per id, in a per-user directory, and holds the locks for its
whole life (the file descriptors stay open through `exec`). The kernel drops a lock when the last
process holding it ends, killed or not, so a slot can never be left taken by a job that is gone.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebd2n.errors import UserError

POOL_ENV = "EBD2N_GPUS"
"""Comma-separated device ids local jobs share (overrides CUDA_VISIBLE_DEVICES and the visible GPUs)."""
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
"""The ids a job was given; also the controller's own pool when set."""
DIRECTORY_ENV = "EBD2N_SLOTS_DIR"
"""Where the lock files live (default: a private directory per user under the temporary directory)."""
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
"""One entry per GPU the NVIDIA driver sees: counted without starting CUDA or any process."""
POLL_SECONDS = 0.2
"""How often a job waiting for free slots tries again."""


def machine_pool(environ: dict[str, str] | None = None) -> list[str]:
    """The device ids local jobs share: EBD2N_GPUS, else the controller's CUDA_VISIBLE_DEVICES, else every GPU."""
    environ = os.environ if environ is None else environ
    for name in (POOL_ENV, VISIBLE_ENV):
        if name in environ:
            ids = [part.strip() for part in environ[name].split(",") if part.strip()]
            bad = [part for part in ids if not re.fullmatch(r"[A-Za-z0-9-]+", part)]
            if bad or len(set(ids)) != len(ids):
                raise UserError(
                    f"{name}={environ[name]}: give distinct device ids separated by commas, e.g. {name}=0,1"
                )
            return ids
    count = len(list(NVIDIA_GPUS.iterdir())) if NVIDIA_GPUS.is_dir() else 0
    return [str(index) for index in range(count)]


def slots_directory() -> Path:
    """The per-user directory of lock files (mode 0700: only its owner's jobs take slots there)."""
    directory = Path(os.environ.get(DIRECTORY_ENV) or Path(tempfile.gettempdir()) / f"ebd2n-gpu-slots-{os.getuid()}")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


@dataclass(frozen=True)
class Slots:
    """Device ids held by this process (and every process it execs or starts with the descriptors)."""

    ids: tuple[str, ...]
    descriptors: tuple[int, ...]

    @property
    def visible_devices(self) -> str:
        """The value of CUDA_VISIBLE_DEVICES for the job."""
        return ",".join(self.ids)

    def release(self) -> None:
        for descriptor in self.descriptors:
            os.close(descriptor)


def acquire(count: int, pool: list[str], directory: Path, timeout: float | None = None) -> Slots:
    """Take `count` ids of `pool`, waiting until that many are free at once (never holding a part
    while waiting, so two jobs waiting for two slots each cannot block each other)."""
    if count > len(pool):
        raise UserError(
            f"this job asks for {count} GPU(s) but the machine's pool holds {len(pool)} ({','.join(pool) or 'none'}); "
            f"set {POOL_ENV} to the ids to share, or give the job fewer GPUs (resources: gpus)"
        )
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        held: list[tuple[str, int]] = []
        for device in pool:
            descriptor = _try_lock(directory / f"gpu-{device}.lock")
            if descriptor is not None:
                held.append((device, descriptor))
                if len(held) == count:
                    return Slots(tuple(d for d, _ in held), tuple(fd for _, fd in held))
        for _, descriptor in held:
            os.close(descriptor)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no {count} free GPU slot(s) of {','.join(pool)} within {timeout} s")
        time.sleep(POLL_SECONDS)


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding the exclusive lock on `path` (inherited by exec), or None if taken."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    os.set_inheritable(descriptor, True)
    return descriptor


def asked_gpus(workflow: Any) -> int | None:
    """The local controller's `--resources gpu=N` (Snakemake's `workflow`), None where not given or
    not local (Snakemake 9.27 hands a Resource, 9.17 a number)."""
    asked = workflow.resource_settings.resources.get("gpu") if workflow.local_exec else None
    return getattr(asked, "value", asked)


def pool_warnings(asked: int | None, pool: list[str]) -> list[str]:
    """What a local controller says at start when `--resources gpu=N` exceeds the pool (one line)."""
    if asked is None or asked <= len(pool):
        return []
    return [
        f"--resources gpu={asked}, but this machine's GPU pool holds {len(pool)} ({','.join(pool) or 'none'}: "
        f"{POOL_ENV}, else CUDA_VISIBLE_DEVICES, else every GPU): at most {len(pool)} GPU(s) are in use at once, "
        "and GPU jobs wait for a free slot"
    ]
