"""One trainer per run directory: a lease file naming the trainer's host, pid and SLURM job.

Two trainers on one run directory (a cluster job orphaned by a dead controller, and its
resubmission) interleave metrics.jsonl and train.log, and nothing downstream can tell. A trainer
takes the lease before it writes anything there and gives it back when it ends. The lease file
is created complete in one step (a hard link of a finished temporary file: atomic on local and
NFS file systems) and held with flock where the file system honours it. A later trainer breaks a
lease only when its holder is provably gone: on the same host, the pid is dead and the lock free
(or the host has rebooted since); on another host, the holder's SLURM job is no longer running
(or is this very job, requeued since). Otherwise it refuses, naming the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from ebd2n.atomic import pid_alive, serialized
from ebd2n.errors import UserError
from ebd2n.job_time import process_started
from ebd2n.layout import LEASE
from ebd2n.provenance import timestamp

_ACTIVE_JOB_STATES = {
    "RUNNING",
    "COMPLETING",
    "CONFIGURING",
    "SIGNALING",
    "STAGE_OUT",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
}
"""squeue states in which a job's processes may still be writing."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: enough to tell later whether it is still alive."""

    host: str
    boot: str  # the host's boot id: a different one means the holder died in a reboot
    pid: int
    job: str  # SLURM job id, "" outside SLURM
    restarts: int  # SLURM_RESTART_COUNT: a requeued job runs again under the same id
    since: str

    @classmethod
    def this_process(cls) -> Holder:
        return cls(
            host=socket.gethostname(),
            boot=_boot_id(),
            pid=os.getpid(),
            job=os.environ.get("SLURM_JOB_ID", ""),
            restarts=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
            since=timestamp(),
        )

    @property
    def started(self) -> float:
        """When the holder took the lease (seconds since the epoch)."""
        return datetime.strptime(self.since, "%Y-%m-%dT%H:%M:%S%z").timestamp()

    def describe(self) -> str:
        job = f", SLURM job {self.job}" if self.job else ""
        return f"host {self.host}, pid {self.pid}{job}, since {self.since}"


class Lease:
    """A held lease: the open, flocked lease file."""

    def __init__(self, path: Path, handle) -> None:
        self.path, self.handle = path, handle

    def release(self) -> None:
        """Remove the lease file if it is still this one, and drop the lock."""
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_ino == os.fstat(self.handle.fileno()).st_ino:
                self.path.unlink()
        self.handle.close()


def take_lease(run_dir: Path, wait: bool = False) -> Lease:
    """Hold run_dir for this process, breaking a lease whose holder is provably gone. A live
    holder is refused, or with `wait` (a workflow job, whose controller may have died while its
    trainer ran on) waited for: the trainer that comes after it finds what it left."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(
            f"runtime.output_dir {run_dir}: cannot be made ({error.strerror}); choose another runtime.output_dir"
        ) from None
    path = run_dir / LEASE
    waited = False
    while True:
        lease, holder = _take(run_dir, path)
        if lease is not None:
            return lease
        alive = holder is not None and not _gone(holder, path, Holder.this_process())
        if not (wait and alive):
            break
        if not waited:
            print(
                f"ebd2n: waiting for the trainer holding {run_dir} ({holder.describe()}) to end",
                file=sys.stderr,
                flush=True,
            )
            waited = True
        time.sleep(WAIT_POLL_S)
    who = holder.describe() if holder else "unreadable lease"
    raise UserError(
        f"runtime.output_dir {run_dir}: another trainer holds it ({who}); if that trainer is gone, delete {path}"
    )


def live_holder(run_dir: Path) -> Holder | None:
    """The holder of run_dir's lease while it is not provably gone (a job working there), else None."""
    path = run_dir / LEASE
    try:
        holder = _read(path)
    except FileNotFoundError:
        return None
    return None if holder is None or _gone(holder, path, Holder.this_process()) else holder


WAIT_POLL_S = 1.0
"""How often a waiting trainer looks again at a live holder's lease."""


def _take(run_dir: Path, path: Path) -> tuple[Lease | None, Holder | None]:
    """The lease, or None and its holder (None: unreadable)."""
    me = Holder.this_process()
    holder = None
    with serialized(run_dir):  # two trainers breaking one stale lease: one at a time
        for _ in range(3):  # a holder may end, or a stale lease be broken, between two looks
            lease = _create(path, me)
            if lease:
                return lease, None
            try:
                holder = _read(path)
            except FileNotFoundError:
                continue
            if holder is None or not _gone(holder, path, me):
                break
            path.unlink(missing_ok=True)
    return None, holder


def _create(path: Path, me: Holder) -> Lease | None:
    temporary = path.with_name(f".{LEASE}.{me.host}.{me.pid}")
    temporary.write_text(json.dumps(asdict(me)) + "\n")
    try:
        os.link(temporary, path)
    except FileExistsError:
        return None
    finally:
        temporary.unlink()
    handle = open(path, "r+b")
    with contextlib.suppress(OSError):  # a file system without locks: pid and job still decide
        fcntl.flock(handle, fcntl.LOCK_EX)
    return Lease(path, handle)


def _read(path: Path) -> Holder | None:
    """The holder; None for a file this code did not write (never broken)."""
    try:
        return Holder(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def job_gone(record: dict) -> bool:
    """Whether the job a log's start record names (ebd2n.train.records.JOB_START: the holder of its
    shell) is provably gone, as a lease's holder would be; a record this code cannot read is gone.
    On this host a pid that a later process took is gone too (started after the record)."""
    try:
        holder = Holder(**record)
        since = holder.started
    except (TypeError, ValueError):
        return True
    me = Holder.this_process()
    if holder.host == me.host and holder.boot == me.boot:
        started = process_started(holder.pid)
        return started is None or started > since + 2  # the clock ticks of /proc against whole seconds
    return _gone(holder, None, me)


def _gone(holder: Holder, path: Path | None, me: Holder) -> bool:
    if holder.host == me.host:
        locked = path is not None and _locked(path)
        return holder.boot != me.boot or not (locked or pid_alive(holder.pid))
    if holder.job and holder.job == me.job:
        return holder.restarts < me.restarts  # this job, requeued: SLURM ended the earlier run first
    return bool(holder.job) and _slurm_job_ended(holder.job)


def _locked(path: Path) -> bool:
    try:
        with open(path, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _slurm_job_ended(job: str) -> bool:
    """True only when squeue says so: the job is unknown (long gone) or in a finished state."""
    try:
        result = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if result.returncode:
        return "Invalid job id" in result.stderr
    return not _ACTIVE_JOB_STATES & set(result.stdout.split())


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
