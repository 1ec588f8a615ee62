"""The run's two records: the human job log `train.log` and the machine log `metrics.jsonl`.

train.log is append-only: every slice (and every failed attempt) adds a block opened by
`########## job <id> ##########`. metrics.jsonl is cut back to the length recorded in the
checkpoint a slice resumes from, so records of a killed attempt are replaced, not duplicated.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ebd2n.layout import METRICS, TRAIN_LOG
from ebd2n.train.records import TYPE, RecordType


class TrainLog:
    """Appends lines to train.log, flushed at once so a killed job keeps what it said."""

    def __init__(self, run_dir: Path, job_id: str) -> None:
        self.path = run_dir / TRAIN_LOG
        self.handle = open(self.path, "a", encoding="utf-8")
        self.write(f"########## job {job_id} ##########")

    def write(self, line: str) -> None:
        self.handle.write(_stamped(line))
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


CLOSING_LINES = ("dashboard ", "job usage: ")
"""How the only lines a training job appends after its trainer's `slice done` begin: the dashboard
its caller wrote and the job's own CPU time and memory (the audit reads anything else there as
another trainer's)."""


def append_to_train_log(run_dir: Path, line: str) -> None:
    """One of the job's CLOSING_LINES in the last block of train.log, after the trainer closed it."""
    if not line.startswith(CLOSING_LINES):
        raise ValueError(f"not a closing line of a training job: {line!r}")
    with open(run_dir / TRAIN_LOG, "a", encoding="utf-8") as handle:
        handle.write(_stamped(line))


def _stamped(line: str) -> str:
    return f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n"


class MetricsLog:
    """Appends JSON records to metrics.jsonl; its state is the file's length, which a checkpoint
    records and a resumed slice cuts the file back to (a fresh start: to nothing)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / METRICS
        self.offset = 0
        self.handle = None  # opened (and cut to `offset`) at the first record

    def append(self, record: dict[str, Any]) -> None:
        """Write a record; an epoch's goes to the file at once, so live readers see every ended epoch."""
        handle = self._open()
        handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        if record.get(TYPE) == RecordType.EPOCH:
            handle.flush()

    def state_dict(self) -> dict[str, Any]:
        """Flush to disk (before a checkpoint records the offset) and return the file length."""
        handle = self._open()
        handle.flush()
        os.fsync(handle.fileno())
        return {"offset": self.path.stat().st_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.handle is not None:
            raise RuntimeError(f"{self.path} is already being written; restore its state before the first record")
        self.offset = int(state["offset"])

    def _open(self):
        if self.handle is None:
            with open(self.path, "ab") as handle:
                handle.truncate(self.offset)
            self.handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        return self.handle

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def format_memory(memory: dict[str, dict[str, int]]) -> str:
    """`cuda:0 1.23/4.56 GB` per device: allocated/peak."""
    return ", ".join(f"{name} {m['allocated'] / 1e9:.2f}/{m['peak'] / 1e9:.2f} GB" for name, m in memory.items())
