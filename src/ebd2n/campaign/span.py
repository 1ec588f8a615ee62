"""A campaign's wall-clock span, from its runs' job records (ebd2n.job_time): the first job's start
to the last job's end. Read by content, so touching or copying the files changes nothing; pauses
between invocations are inside the span.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any


def campaign_span(jobs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """{started, ended, wall_s}: ISO timestamps and seconds, None when no job recorded its start."""
    spans = []
    for job in jobs:
        try:
            started = datetime.fromisoformat(job["started"])
        except (KeyError, TypeError, ValueError):
            continue
        spans.append((started, started + timedelta(seconds=job["seconds"])))
    if not spans:
        return {"started": None, "ended": None, "wall_s": None}
    started, ended = min(start for start, _end in spans), max(end for _start, end in spans)
    return {"started": started.isoformat(), "ended": ended.isoformat(), "wall_s": (ended - started).total_seconds()}
