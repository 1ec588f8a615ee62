"""What a campaign's jobs spent, as the jobs' own records measured it: the cost the report shows.

The trainer's epoch times leave out what a job costs besides its training steps: its start-up,
its checkpoints, its validation. Snakemake measures each training and validation job whole (the
workflow gives every one a `benchmark:` file, `benchmarks/<its output, relative to the campaign>.tsv`,
whose `s` column is the job's wall time), so `ebd2n collect` sums them per run into campaign.json,
with the campaign's wall-clock span (the first job's start to the last one's end). A job that ran
twice (killed, then run again) counts its last attempt: the one its benchmark file records. The
cache job is shared with every campaign on the same data and is counted by none.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ebd2n.layout import CampaignPaths
from ebd2n.provenance import timestamp

SOURCE = "Snakemake's benchmark record of each training and validation job (its wall time, start-up included)"


def job_times(paths: CampaignPaths) -> dict[str, Any]:
    """{source, runs: {run id: {jobs, seconds}}, started, ended, wall_s} from the campaign's
    benchmarks/runs/ (runs without a record are absent; started/ended None without any)."""
    runs: dict[str, dict[str, Any]] = {}
    spans = []
    folder = paths.benchmarks / "runs"
    for record in sorted(folder.glob("*/**/*.tsv")) if folder.is_dir() else []:
        seconds = _wall_seconds(record)
        if seconds is None:
            continue
        run = runs.setdefault(record.relative_to(folder).parts[0], {"jobs": 0, "seconds": 0.0})
        run["jobs"] += 1
        run["seconds"] += seconds
        ended = record.stat().st_mtime
        spans.append((ended - seconds, ended))
    started = min((start for start, _ in spans), default=None)
    ended = max((end for _, end in spans), default=None)
    return {
        "source": SOURCE,
        "runs": runs,
        "started": None if started is None else timestamp(started),
        "ended": None if ended is None else timestamp(ended),
        "wall_s": None if started is None else ended - started,
    }


def _wall_seconds(record: Path) -> float | None:
    """The job's wall time in a benchmark file (its first row's `s`); None when unreadable."""
    try:
        with record.open(encoding="utf-8", newline="") as handle:
            row = next(csv.DictReader(handle, delimiter="\t"), None)
        return float(row["s"]) if row else None
    except (OSError, KeyError, TypeError, ValueError):
        return None
