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

from ebd2n.layout import RESULTS_JSON, RUN_RECORD, CampaignPaths


def campaign_span(paths: CampaignPaths) -> dict[str, Any]:
    """{started, ended, wall_s}: ISO timestamps and seconds, None where no run records them."""
    started = min(_times(paths.runs.glob(f"*/{RUN_RECORD}"), "started"), default=None)
    ended = max(_times(paths.runs.glob(f"*/{RESULTS_JSON}"), "validated"), default=None)
    return {
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
