"""A job's own record of its time: each training or validation job that did work appends one line
to its run's jobs.jsonl, how long it took from the start of its first process (interpreter and torch
start-up included) to its work committed. The report's cost is their sum.

Snakemake's benchmark files measure about the same span, but a job run again as a no-op rewrites
its file, so a cost read from them would change with every green rerun; a line here is only ever
added by work. A job is recorded as soon as its work is done (a training job when its trainer has
written its records, a validation job just before its results.json), so one killed after that has
its time counted, and one killed or failed before records nothing (its work is done again).
"""

from __future__ import annotations

import json
import math
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ebd2n.faults import at
from ebd2n.layout import JOB_RECORDS

STARTED = "EBD2N_JOB_STARTED"
"""When the job started (seconds since the epoch), set by ebd2n.warm in the job it forks: the
forked process itself started with the server, long before the job."""
_IMPORTED = time.time()
_started: float | None = None
"""This process's start, once read (a forked warm-start job takes the client's, from STARTED)."""


def process_started(pid: int | str = "self") -> float | None:
    """When process `pid` started, in seconds since the epoch (Linux's /proc; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def job_started() -> float:
    """When this job started: as ebd2n.warm passed it, a torchrun worker's launcher's start, else
    this process's (the time this module was imported where /proc is missing). Read once per
    process: /proc gives it to the clock tick, and job ids must not move."""
    global _started
    if passed := os.environ.get(STARTED):
        return float(passed)
    if _started is None:
        _started = process_started(os.getppid() if "LOCAL_RANK" in os.environ else "self") or _IMPORTED
    return _started


def job_id() -> str:
    """The SLURM job id when running under SLURM, else a local id unique to this job (its start and
    process), the same each time this process asks."""
    slurm = os.environ.get("SLURM_JOB_ID")
    if slurm:
        return slurm
    return f"local-{time.strftime('%Y%m%dT%H%M%S', time.localtime(job_started()))}-{os.getpid()}"


def record_job(run_dir: Path, kind: str, epoch: int | None, pack: int = 1) -> None:
    """Append this job's line to the run's jobs.jsonl: its id, kind (`train`, `validate`), the epoch
    it trained to (None: a validation, or an older job's to the run's end), its start and its
    seconds until now, or its share of them
    when it trained a pack of that many runs (recorded as `pack`), so that the costs of a pack's
    runs add up to the job's. A line cut by a kill is left alone: the next one starts on a line of
    its own, and readers pass over it."""
    started = job_started()
    record = {
        "job": job_id(),
        "kind": kind,
        "epoch": epoch,
        "started": datetime.fromtimestamp(started).astimezone().isoformat(timespec="milliseconds"),
        "seconds": round((time.time() - started) / pack, 3),
        **({"pack": pack} if pack > 1 else {}),
    }
    path = run_dir / JOB_RECORDS
    at("before", path)
    with open(path, "a+b") as file:
        torn = file.tell() > 0 and (file.seek(-1, os.SEEK_END), file.read(1))[1] != b"\n"
        file.write((b"\n" if torn else b"") + json.dumps(record).encode() + b"\n")
        file.flush()
        os.fsync(file.fileno())
    at("after", path)


def recorded_jobs(run_dir: Path) -> list[dict[str, Any]]:
    """The run's job records, in the order they were written (none when it has no jobs.jsonl)."""
    try:
        lines = (run_dir / JOB_RECORDS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        seconds = record.get("seconds") if isinstance(record, dict) else None
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds < math.inf:
            records.append(record)
    return records
