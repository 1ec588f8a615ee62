"""What a campaign's jobs spent, as the jobs' own records measured it: the cost the report shows.

The trainer's epoch times leave out what a job costs besides its training steps: its start-up,
its checkpoints, its validation. Snakemake measures each training and validation job whole (the
workflow gives every one a `benchmark:` file, `benchmarks/<its output, relative to the campaign>.tsv`,
whose `s` column is the job's wall time); the report sums them per run. A job that ran twice
(killed, then run again) counts its last attempt: the one its benchmark file records. The cache
job is shared with every campaign on the same data and is counted by none. The campaign's
wall-clock span comes from the runs' own records, by content (the first run's training start in
run.json to the last full validation in results.json), so touching or copying files changes nothing.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from ebd2n.layout import RESULTS_JSON, RUN_RECORD, RUNS, CampaignPaths

SOURCE = "Snakemake's benchmark record of each training and validation job (its wall time, start-up included)"


def job_times(paths: CampaignPaths) -> dict[str, Any]:
    """{source, runs: {run id: {jobs, seconds}}, started, ended, wall_s} from the campaign's
    benchmarks/runs/ and run records (runs without a record are absent; started/ended None
    without any)."""
    runs: dict[str, dict[str, Any]] = {}
    folder = paths.benchmarks / RUNS
    for record in sorted(folder.glob("*/**/*.tsv")) if folder.is_dir() else []:
        seconds = _wall_seconds(record)
        if seconds is not None:
            run = runs.setdefault(record.relative_to(folder).parts[0], {"jobs": 0, "seconds": 0.0})
            run["jobs"] += 1
            run["seconds"] += seconds
    starts = _times(paths.runs.glob(f"*/{RUN_RECORD}"), "started")
    ends = _times(paths.runs.glob(f"*/{RESULTS_JSON}"), "validated")
    started, ended = min(starts, default=None), max(ends, default=None)
    return {
        "source": SOURCE,
        "runs": runs,
        "started": None if started is None else started.isoformat(),
        "ended": None if ended is None else ended.isoformat(),
        "wall_s": None if started is None or ended is None else (ended - started).total_seconds(),
    }


def _times(records: Iterable[Path], key: str) -> list[datetime]:
    """The `key` timestamps of JSON records (those unreadable or without one left out)."""
    found = []
    for path in records:
        try:
            found.append(datetime.fromisoformat(json.loads(path.read_text(encoding="utf-8"))[key]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def _wall_seconds(record: Path) -> float | None:
    """The job's wall time in a benchmark file (its first row's `s`); None when unreadable."""
    try:
        with record.open(encoding="utf-8", newline="") as handle:
            row = next(csv.DictReader(handle, delimiter="\t"), None)
        return float(row["s"]) if row else None
    except (OSError, KeyError, TypeError, ValueError):
        return None
