"""The dashboard of a run while it trains: what W&B or TensorBoard show live, offline, in the page
the finished run gets (ebd2n.report.dashboard) from the record the trainer hands over.

A write costs tens of milliseconds to seconds (the page re-plots every record), so at epoch ends
the page is rewritten at most every SPACING times the last write's time (about 1 % of the job);
the first waits SPACING times FIRST_GUESS seconds, so short jobs (the demo's, the tests') write
none there. The end of each slice and a job that fails always write it: a failed run has a page.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ebd2n.layout import TRAIN_LOG
from ebd2n.report.dashboard import write_dashboard

SPACING = 100
FIRST_GUESS = 0.5
"""Seconds a first write is assumed to take."""


class LiveDashboard:
    """Given to the trainer as its `on_record`: keeps the newest run record, rewrites the page when due."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.record: dict[str, Any] | None = None
        self.due = time.monotonic() + SPACING * FIRST_GUESS

    def __call__(self, record: dict[str, Any]) -> None:
        self.record = record
        if time.monotonic() >= self.due:
            self.write()

    def write(self, state: str | None = None) -> Path | None:
        """Write the page from the newest record (None before the trainer gave one)."""
        if self.record is None:
            return None
        started = time.monotonic()
        state = state or f"training, {self.record['steps']:,} steps done"
        path = write_dashboard(self.run_dir, run={**self.record, "state": state})
        self.due = time.monotonic() + SPACING * (time.monotonic() - started)
        return path

    def failed(self, error: BaseException) -> None:
        """The page of a run whose job failed, saying so; a failure to write it is reported, never raised
        (the job's own error is the one that matters)."""
        try:
            self.write(f"the job failed ({type(error).__name__}: {error}); see {TRAIN_LOG}")
        except Exception as problem:  # noqa: BLE001 - reported, and the job's error goes on
            print(f"ebd2n: the failed run's dashboard was not written: {problem}", file=sys.stderr)
