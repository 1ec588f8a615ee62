"""A campaign's wall-clock span, from its runs' own records: the first run's training start
(run.json `started`) to the last full validation (results.json `validated`). Read by content, so
touching or copying the files changes nothing; pauses between invocations are inside the span.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from ebd2n.layout import RUN_RECORD, CampaignPaths


def campaign_span(paths: CampaignPaths, results: Iterable[Any]) -> dict[str, Any]:
    """{started, ended, wall_s}: ISO timestamps and seconds, None where no run records them;
    `results` are the runs' results.json records, as the caller has them loaded already."""
    started = min(_stamps(map(_read, paths.runs.glob(f"*/{RUN_RECORD}")), "started"), default=None)
    ended = max(_stamps(results, "validated"), default=None)
    return {
        "started": None if started is None else started.isoformat(),
        "ended": None if ended is None else ended.isoformat(),
        "wall_s": None if started is None or ended is None else (ended - started).total_seconds(),
    }


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _stamps(records: Iterable[Any], key: str) -> list[datetime]:
    """The `key` timestamps of records (those unreadable or without one left out)."""
    found = []
    for record in records:
        try:
            found.append(datetime.fromisoformat(record[key]))
        except (KeyError, TypeError, ValueError):
            continue
    return found
