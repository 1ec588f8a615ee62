"""The dashboard of a run while it trains: what W&B or TensorBoard show live, offline, in the page
the finished run gets (ebd2n.report.dashboard) from the record the trainer hands over.

The live page is live.html, never report.html: report.html is the finished run's page, which full
validation hashes and the audit protects, and a job killed before writing it must leave it missing
(the next job writes it) rather than stale. The job that completes the run writes report.html and
removes live.html (so does validation, after a job killed in between).

A write costs tens of milliseconds to seconds (the page re-plots every record), so within a job the
page is rewritten at most every SPACING times the last write's time (about 1 % of the job); the
first waits SPACING times FIRST_GUESS seconds from the trainer's first record, so short jobs (the
demo's, the tests') write none mid-way. The end of each slice and a job that fails always write it.
A write that fails is reported on stderr and training goes on: the page is a view, not a result.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ebd2n.atomic import remove_file
from ebd2n.layout import METRICS, TRAIN_LOG, RunPaths
from ebd2n.report.dashboard import write_dashboard

SPACING = 100
FIRST_GUESS = 0.5
"""Seconds a first write is assumed to take."""


class LiveDashboard:
    """Given to the trainer as its `on_record`: keeps the newest run record, rewrites the page when due."""

    def __init__(self, run_dir: Path) -> None:
        self.paths = RunPaths(run_dir)
        self.record: dict[str, Any] | None = None
        self.due: float | None = None

    def __call__(self, record: dict[str, Any]) -> None:
        self.record = record
        now = time.monotonic()
        if self.due is None:  # the first record: the clock starts with the training, not the job's start-up
            self.due = now + SPACING * FIRST_GUESS
        elif now >= self.due:
            self.write()

    def write(self, state: str | None = None) -> Path | None:
        """Write live.html from the newest record; None when there is nothing to show yet (no record,
        no metrics) or the write failed (said on stderr)."""
        if self.record is None or not (self.paths / METRICS).is_file():
            return None
        started = time.monotonic()
        state = state or f"training, {self.record['steps']:,} steps done"
        try:
            path = write_dashboard(self.paths.directory, self.paths.live_dashboard, run={**self.record, "state": state})
        except Exception as problem:  # noqa: BLE001 - a view, never the job's failure
            print(f"ebd2n: the run's live page was not written: {problem}", file=sys.stderr)
            return None
        self.due = time.monotonic() + SPACING * (time.monotonic() - started)
        return path

    def failed(self, error: BaseException) -> None:
        """The page of a run whose job failed, saying so (the job's own error is the one that matters)."""
        self.write(f"the job failed ({type(error).__name__}: {error}); see {TRAIN_LOG}")


def remove_live_page(run_dir: Path) -> None:
    """live.html goes once the finished run's report.html is written."""
    if (path := RunPaths(run_dir).live_dashboard).is_file():
        remove_file(path)
