"""The campaign's derived records (campaign.json, runs.csv, audit-runs.json) compared with a recomputation."""

from __future__ import annotations

import json
from typing import Any

from ebd2n.audit.checks import Check, repository_relative
from ebd2n.audit.runs import RunView, json_object
from ebd2n.campaign.history import GridHistory
from ebd2n.errors import UserError
from ebd2n.layout import CAMPAIGN_JSON, FROZEN, RUNS_CSV, CampaignPaths
from ebd2n.outcomes import CheckStatus


def recomputed_campaign(paths: CampaignPaths, info: dict | None, history: GridHistory) -> dict | str:
    """campaign.json as the campaign's sources make it (what they cannot say, how the jobs ran, the
    cost plan and the signing key's id, is taken from the file as it stands), or why it cannot be
    recomputed."""
    from ebd2n.campaign.collect import campaign_record

    kept = {key: info[key] for key in ("execution", "plan", "signing") if key in info} if isinstance(info, dict) else {}
    try:
        return {**campaign_record(paths, history), **kept}
    except UserError as error:
        return str(error)


def check_collected(paths: CampaignPaths, info: dict | None, recomputed: dict | str, finished: list[RunView]) -> Check:
    """campaign.json and runs.csv say what the frozen spec and the runs say."""
    from ebd2n.campaign.results import read_results

    check = Check(f"{CAMPAIGN_JSON} and {RUNS_CSV} equal a recomputation", unit="files")
    if not finished:
        check.reason = "nothing collected yet"
        return check
    check.examined = 2
    if isinstance(recomputed, str):
        check.violations.append(f"{CAMPAIGN_JSON} cannot be recomputed: {recomputed}")
        return check
    if not isinstance(info, dict):
        check.violations.append(
            f"{CAMPAIGN_JSON}: {'missing' if info is None else 'not a JSON object'}; collect the campaign again"
        )
    else:
        for key, value in recomputed.items():
            if info.get(key) != value:
                check.violations.append(
                    f"{CAMPAIGN_JSON}: {key} {_short(info.get(key))} is not the campaign's {_short(value)} "
                    f"(recomputed from {FROZEN}/ and the runs)"
                )
    try:
        expected = read_results(paths.directory, recomputed).runs.write_csv()
    except UserError as error:
        check.violations.append(f"runs table cannot be recomputed: {error}")
        return check
    actual = paths.runs_csv.read_text(encoding="utf-8", errors="replace") if paths.runs_csv.is_file() else None
    if actual != expected:
        check.violations.append(
            f"{paths.runs_csv.name}: {'missing' if actual is None else 'differs from the runs results'}"
        )
    return check


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def check_runs_record(paths: CampaignPaths, now: list[Check]) -> Check:
    """audit-runs.json, the audit the published report shows, says what these checks say: the same
    checks, outcomes and violations (only the ledger's may have gone from nothing to examine to
    passed, once a full audit wrote the ledger), so the page never shows an audit that did not happen."""
    check = Check(f"{paths.audit_runs.name} (the audit the report shows) equals this audit of the runs", unit="records")
    record, problem = json_object(paths.audit_runs) if paths.audit_runs.is_file() else (None, None)
    if record is None and problem is None:
        check.reason = f"no {paths.audit_runs.name} (the report says: not audited)"
        return check
    if any(current.violations for current in now):
        check.reason = "the runs fail this audit already"
        return check
    check.examined = 1
    if problem or not isinstance(record.get("checks"), list):
        check.violations.append(f"{paths.audit_runs.name}: {problem or 'no list of checks'}")
        return check
    shown = {str(entry.get("name")): entry for entry in record["checks"] if isinstance(entry, dict)}
    ledger = now[-1].name
    for current in now:
        entry = shown.pop(current.name, None)
        if entry is None:
            check.violations.append(f"{paths.audit_runs.name}: lacks the check {current.name!r}")
            continue
        grown = current.name == ledger and (entry.get("status"), current.status) == (
            CheckStatus.NOT_APPLICABLE,
            CheckStatus.PASSED,
        )
        found = [repository_relative(paths, violation) for violation in current.violations]
        if not grown and (entry.get("status"), entry.get("violations")) != (current.status, found):
            check.violations.append(
                f"{paths.audit_runs.name}: {current.name!r} is {entry.get('status')}, "
                f"this audit finds it {current.status}"
            )
    check.violations += [f"{paths.audit_runs.name}: names a check this audit has not, {name!r}" for name in shown]
    if check.violations:
        check.violations.append(
            f"run `ebd2n audit {paths.directory} --stage runs`, then `ebd2n report {paths.directory}`"
        )
    return check
