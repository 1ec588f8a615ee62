"""The audit ledger: the SHA-256 of every artifact a campaign's last passing audit saw.

`audit-ledger.json` is never a workflow output, so Snakemake never deletes it. Its own SHA-256 is
recorded in `audit.json` (an `update()` output, which Snakemake never deletes either), so a
deleted or edited ledger is noticed; re-baselining is the explicit `ebd2n audit --accept`, which
appends what changed to the ledger's history.

Entries are paths relative to the campaign directory. Run artifacts (of finished runs, and of runs
a successive-halving decision stopped at a rung), the frozen trainer's hash and the frozen base
recipes are *protected*: once audited they must never change, but for a stopped run a later
decision promotes, which trains on from its rung. Derived files
(campaign.json, runs.csv, the report) are recorded too, but they legitimately change when the
grid grows: the audit verifies them by recomputation instead. The jobs that trained each run are
recorded as well: a run whose directory (or final.pt) was deleted is trained again by other jobs,
and its new artifacts replace the old ones in the ledger, named as retrained, never silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ebd2n.atomic import sha256_bytes
from ebd2n.audit.checks import Check
from ebd2n.layout import (
    CHECKPOINT_DIR,
    CHECKPOINT_LEDGER,
    FIRST_AUDIT,
    FROZEN,
    JOB_RECORDS,
    LIVE_DASHBOARD,
    METRICS,
    PACK_RECORDS,
    PACKS,
    RUNS,
    SEARCH,
    TRAIN_LOG,
    CampaignPaths,
)
from ebd2n.outcomes import STOPPED
from ebd2n.provenance import timestamp

FORMAT = 1

CONTINUED = (METRICS, TRAIN_LOG, JOB_RECORDS, LIVE_DASHBOARD, CHECKPOINT_LEDGER, PACKS, f"{CHECKPOINT_DIR}/")
"""What a stopped run changes when a later decision promotes it: it appends to its histories, job
records and packs, rewrites its live page, records its next checkpoints and lets go of the one it
continued from."""


def protected(relative: str) -> bool:
    """Whether an artifact must stay byte-identical once audited (run and frozen files; campaign.json,
    runs.csv and the report are derived and verified by recomputation instead)."""
    return relative.startswith((f"{RUNS}/", f"{FROZEN}/", f"{SEARCH}/", f"{PACK_RECORDS}/"))


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
        return Ledger(
            dict(raw["artifacts"]),
            list(raw.get("history") or []),
            sha256_bytes(data),
            dict(raw.get("jobs") or {}),
            dict(raw.get(STOPPED) or {}),
        )
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{paths.ledger.name}: not a ledger ({error})") from None


def ledger_json(
    artifacts: dict[str, str], history: list[dict], jobs: dict[str, list[str]], stopped: dict[str, int]
) -> str:
    """The ledger file's text (audit.json records its SHA-256); `stopped` only where a search stopped runs."""
    record = {
        "format": FORMAT,
        "artifacts": dict(sorted(artifacts.items())),
        "history": history,
        "jobs": dict(sorted(jobs.items())),
    }
    if stopped:
        record[STOPPED] = dict(sorted(stopped.items()))
    return json.dumps(record, indent=2) + "\n"


def compare(previous: dict[str, str], current: dict[str, str]) -> tuple[list[str], list[str]]:
    """Protected artifacts of `previous` that changed and that disappeared in `current`."""
    changed = [
        name
        for name, digest in sorted(previous.items())
        if protected(name) and name in current and current[name] != digest
    ]
    gone = [name for name in sorted(previous) if protected(name) and name not in current]
    return changed, gone


def retrained(previous: dict[str, list[str]], current: dict[str, list[str]]) -> list[str]:
    """Runs trained again since the last audit: no job that trained them then trained them now."""
    return sorted(
        run for run, jobs in current.items() if run in previous and jobs and not set(jobs) & set(previous[run])
    )


def accepted(previous: dict[str, str], current: dict[str, str]) -> dict:
    """A history entry for `--accept`: when, and which protected artifacts it re-baselined."""
    changed, gone = compare(previous, current)
    return {"accepted": timestamp(), "changed": changed, "removed": gone}


def check_ledger(
    paths: CampaignPaths,
    ledger: Ledger,
    audit: dict | None,
    current: dict[str, str],
    jobs: dict[str, list[str]],
    stopped: dict[str, int],
    accept: bool,
) -> Check:
    """The ledger is the one the last audit wrote, and nothing it protects has changed since, but
    for runs trained again by other jobs and stopped runs a later decision promoted (both named in
    the check's notes)."""
    check = Check("audited artifacts unchanged since the last audit (ledger)", unit="artifacts")
    recorded = (audit or {}).get("ledger_sha256")
    if ledger.digest is not None and ledger.digest == (audit or {}).get("previous_ledger_sha256"):
        recorded = ledger.digest  # the last audit was killed between its record and its ledger
    name = paths.ledger.name
    if recorded and ledger.digest is None and not paths.ledger.exists():  # unreadable: the files check says so
        check.violations.append(
            f"{name}: missing, but {paths.audit.name} records one; "
            "restore it, or re-baseline with `ebd2n audit --accept`"
        )
    elif ledger.digest is not None and recorded != ledger.digest:
        check.violations.append(f"{name}: not the ledger the last audit wrote (edited, or {paths.audit.name} replaced)")
    if check.violations and accept:
        check.violations.clear()  # --accept re-baselines: recorded in the ledger's history
    changed, gone = compare(ledger.artifacts, current)
    again = retrained(ledger.jobs, jobs)
    check.notes = [
        f"{run}: trained again since the last audit (jobs {', '.join(ledger.jobs[run])} -> {', '.join(jobs[run])})"
        for run in again
    ]
    promoted = sorted(run for run, rung in ledger.stopped.items() if stopped.get(run) != rung and run not in again)
    check.notes += [
        f"{run}: stopped at rung {ledger.stopped[run]} at the last audit, trained on since (promoted)"
        for run in promoted
    ]
    continued = [f"{paths.runs.name}/{run}/{name}" for run in promoted for name in CONTINUED]
    mine = (*(f"{paths.runs.name}/{run}/" for run in again), *continued)
    changed, gone = [e for e in changed if not e.startswith(mine)], [e for e in gone if not e.startswith(mine)]
    check.examined = sum(1 for entry in ledger.artifacts if protected(entry))
    if not check.examined:
        check.reason = FIRST_AUDIT
    if not accept:
        check.violations += [f"{entry}: changed since the last audit" for entry in changed]
        check.violations += [f"{entry}: disappeared since the last audit" for entry in gone]
    return check
