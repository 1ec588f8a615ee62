"""The audit ledger: the SHA-256 of every artifact a campaign's last passing audit saw.

`audit-ledger.json` is never a workflow output, so Snakemake never deletes it. Its own SHA-256 is
recorded in `audit.json` (an `update()` output, which Snakemake never deletes either), so a
deleted or edited ledger is noticed; re-baselining is the explicit `ebd2n audit --accept`, which
appends what changed to the ledger's history.

Entries are paths relative to the campaign directory. Run artifacts, the frozen trainer's hash
and the frozen base recipes are *protected*: once audited they must never change. Derived files
(campaign.json, runs.csv, the report) are recorded too, but they legitimately change when the
grid grows: the audit verifies them by recomputation instead. The jobs that trained each run are
recorded as well: a run whose directory (or final.pt) was deleted is trained again by other jobs,
and its new artifacts replace the old ones in the ledger, named as retrained, never silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ebd2n.atomic import sha256_bytes
from ebd2n.layout import FROZEN, RUNS, SEARCH, CampaignPaths
from ebd2n.provenance import timestamp

FORMAT = 1


def protected(relative: str) -> bool:
    """Whether an artifact must stay byte-identical once audited (run and frozen files; campaign.json,
    runs.csv and the report are derived and verified by recomputation instead)."""
    return relative.startswith((f"{RUNS}/", f"{FROZEN}/", f"{SEARCH}/"))


@dataclass
class Ledger:
    """What the ledger file holds; `digest` is the SHA-256 of the file as read (None: no file)."""

    artifacts: dict[str, str] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    digest: str | None = None
    jobs: dict[str, list[str]] = field(default_factory=dict)
    """Run id -> the jobs that trained it (results.json's job_ids; a stopped run's, its rung checkpoint's)."""
    stopped: dict[str, int] = field(default_factory=dict)
    """Run id -> the rung a successive-halving decision stopped it at (its files are protected there)."""


def read_ledger(paths: CampaignPaths) -> Ledger:
    """The ledger on disk; an unreadable one raises ValueError naming the problem."""
    try:
        data = paths.ledger.read_bytes()
    except FileNotFoundError:
        return Ledger()
    try:
        raw = json.loads(data.decode("utf-8"))
        if not isinstance(raw, dict) or not isinstance(raw.get("artifacts"), dict):
            raise ValueError("no artifacts mapping")
        return Ledger(dict(raw["artifacts"]), list(raw.get("history") or []), sha256_bytes(data),
                      dict(raw.get("jobs") or {}), dict(raw.get("stopped") or {}))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{paths.ledger.name}: not a ledger ({error})") from None


def ledger_json(artifacts: dict[str, str], history: list[dict], jobs: dict[str, list[str]],
                stopped: dict[str, int]) -> str:
    """The ledger file's text (audit.json records its SHA-256); `stopped` only where a search stopped runs."""
    record = {"format": FORMAT, "artifacts": dict(sorted(artifacts.items())), "history": history, "jobs": dict(sorted(jobs.items()))}
    if stopped:
        record["stopped"] = dict(sorted(stopped.items()))
    return json.dumps(record, indent=2) + "\n"


def compare(previous: dict[str, str], current: dict[str, str]) -> tuple[list[str], list[str]]:
    """Protected artifacts of `previous` that changed and that disappeared in `current`."""
    changed = [name for name, digest in sorted(previous.items()) if protected(name) and name in current and current[name] != digest]
    gone = [name for name in sorted(previous) if protected(name) and name not in current]
    return changed, gone


def retrained(previous: dict[str, list[str]], current: dict[str, list[str]]) -> list[str]:
    """Runs trained again since the last audit: no job that trained them then trained them now."""
    return sorted(run for run, jobs in current.items() if run in previous and jobs and not set(jobs) & set(previous[run]))


def accepted(previous: dict[str, str], current: dict[str, str]) -> dict:
    """A history entry for `--accept`: when, and which protected artifacts it re-baselined."""
    changed, gone = compare(previous, current)
    return {"accepted": timestamp(), "changed": changed, "removed": gone}
