"""Audit a campaign: prove that every result is complete, comparable and untouched, by content.

Three kinds of evidence back each other, so no single deleted or edited file goes unnoticed:
- each run's own records: final.pt names its run id and recipe identity, checkpoints.json its
  SHA-256, and results.json the SHA-256 of every file the trainer left; what a checkpoint or
  slice record holds is the point of the budget its name claims (`ebd2n.audit.positions`);
- the ledger (`audit-ledger.json`, see `ebd2n.audit.ledger`): every artifact of the last passing
  audit, a stopped run's included; an audited run's files must never change afterwards;
- audit.json records the ledger's own SHA-256, so a deleted or edited ledger is a violation.
Sources only: what the campaign must hold comes from frozen/ (spec/: the grid and seeds;
freeze.json: the fixed settings; the trainer, base recipes and slice plans) and the run
directories. campaign.json, runs.csv and the published report are derived: each is recomputed
(the report rebuilt elsewhere) and compared byte for byte, never believed. File times count only
as part of a file's identity, while which a hash computed from its content is reused
(ebd2n.fileidentity); never as evidence of what a file holds.
An audit without an earlier audit's records says so (`compared_with_earlier_audit`, its summary).
What this cannot catch: someone who rewrites every record, the ledger and audit.json
consistently; a signature with a key kept elsewhere does (`ebd2n audit --sign`, ebd2n.signing).

Two stages: `runs` (before the report is built; writes audit-runs.json) and `full` (after it;
verifies the report, writes the ledger and audit.json).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Literal

from ebd2n.atomic import atomic_write_text, remove_temporaries, serialized, sha256_bytes
from ebd2n.audit import checks, run_checks
from ebd2n.audit.confirmation import check_confirmations
from ebd2n.audit.derived import check_collected, check_runs_record, recomputed_campaign
from ebd2n.audit.evidence import (
    campaign_artifacts,
    final_states,
    ledger_jobs,
    reachable_cache,
    read_record,
    read_text_record,
    recorded_plans,
    report_artifacts,
    run_views,
    shared_cache_identity,
)
from ebd2n.audit.job_records import check_job_records
from ebd2n.audit.ledger import Ledger, accepted, check_ledger, ledger_json, read_ledger
from ebd2n.audit.lineage import check_lineage
from ebd2n.audit.outcomes import check_outcomes
from ebd2n.audit.packs import check_packs, trained_packed
from ebd2n.audit.positions import check_positions, checkpoint_metadata
from ebd2n.audit.report_check import check_report, early_rebuild
from ebd2n.audit.run_history import check_history
from ebd2n.audit.runs import RunView, json_object
from ebd2n.audit.search import check_search, readable
from ebd2n.campaign.fates import finished_runs
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.history import GridHistory, read_history
from ebd2n.campaign.job_logs import JobLogs, classify_run
from ebd2n.campaign.plans import recorded_search
from ebd2n.errors import UserError
from ebd2n.fileidentity import REHASH_AFTER_DAYS, HashMemory, load_memory
from ebd2n.layout import AUDIT_JSON, AUDIT_LEDGER, CampaignPaths
from ebd2n.outcomes import CheckStatus
from ebd2n.provenance import timestamp
from ebd2n.train.records import RunRecord

Stage = Literal["runs", "full"]


def audit_campaign(
    campaign_dir: str | Path,
    stage: Stage = "full",
    accept: bool = False,
    full: bool = False,
    rehash_after_days: float = REHASH_AFTER_DAYS,
) -> dict:
    """Run every check of `stage`, write its record (and, for a passing full audit, the ledger).

    Each file's SHA-256 is reused from the last audit's hash memory (audit-hashes.jsonl) while the
    file's identity is unchanged and the hash younger than `rehash_after_days`; `full` hashes every
    file. The returned record's `hashing` (not written to audit.json, which stays as it was when
    nothing changed) says how many files were hashed and why.

    Everything is recomputed from the campaign's sources: the frozen spec (frozen/spec/: grid
    and seeds; freeze.json: the fixed settings), the frozen trainer, base recipes and slice plans,
    and the run directories. campaign.json, runs.csv and the report are derived: they are compared
    with the recomputation, never believed. Without a readable frozen spec there is nothing to
    audit against: a UserError, and nothing is written."""
    paths = CampaignPaths(Path(campaign_dir))
    if not paths.directory.is_dir() or not (paths.frozen.is_dir() or paths.runs.is_dir()):
        raise UserError(f"{paths.directory}: not a campaign directory (no frozen/ or runs/); pass results/<campaign>")
    # two audits at once (two controllers): the second finds the first's records; `later` waits for
    # the report's rebuild, when one was started beside the hashing
    with serialized(paths.directory), contextlib.ExitStack() as later:
        memory = load_memory(paths.audit_hashes, paths.directory, rehash_after_days * 86400.0, full=full)
        record = _audit(paths, stage, accept, memory, later)
        memory.save(merge=stage == "runs")  # the runs stage sees no report: the full audit's entries of it stay
        return {**record, "hashing": memory.summary()}


def _audit(paths: CampaignPaths, stage: Stage, accept: bool, memory: HashMemory, later: contextlib.ExitStack) -> dict:
    history = read_history(paths)
    files = checks.Check("campaign records present and readable", unit="files")
    info = read_record(paths, paths.campaign_json, files)
    freeze = read_record(paths, paths.freeze_record, files) or {}
    frozen_hash = read_text_record(paths, paths.source_hash, files)
    previous_audit = read_record(paths, paths.audit, files, optional=True)
    try:
        ledger = read_ledger(paths)
    except ValueError as error:
        files.violations.append(str(error))
        ledger = Ledger()
    files.examined += 1 if paths.ledger.exists() else 0
    remove_temporaries(paths.directory)  # of a killed write of a campaign record
    recomputed = recomputed_campaign(paths, info, history)
    report_info = recomputed if isinstance(recomputed, dict) else None
    certain = stage == "full" and memory.distrust is not None  # nothing believed: the report is rebuilt
    rebuild = later.enter_context(early_rebuild(paths, report_info, certain))

    expected = history.grid.runs()
    views = run_views(paths, expected, memory)
    confirmations, confirmed = check_confirmations(paths, views)  # their runs are the campaign's too
    halving, search = _search(paths, history, views)
    fates: dict[str, int | None] = {run.id: None for run in expected}
    if halving is not None:  # successive halving: only the runs every rung promoted train to the end
        try:
            fates = halving.outcome(read=readable)
        except UserError:  # a decision naming no point of the grid: the search check names it
            fates = {}
    expected_finished = finished_runs(history.active.runs(), fates)  # retired runs stay on disk, not expected
    finished = [view for view in views.values() if view.finished]
    stopped = {
        run: rung for run, rung in fates.items() if rung is not None and not (run in views and views[run].finished)
    }
    settled = [view for view in views.values() if view.finished or view.id in stopped]  # what the ledger protects
    metadata = checkpoint_metadata(views.values(), memory)
    cache_identity = shared_cache_identity(finished)
    cache_dir = reachable_cache(paths, finished)
    cache_check, targets = checks.check_cache(cache_dir, cache_identity, memory, paths.directory)
    run_list = list(views.values())
    settings = freeze.get("settings") if isinstance(freeze.get("settings"), dict) else {}
    plans = recorded_plans(paths, history.grid.bases)
    result = [
        files,
        checks.check_grid(expected_finished, views),
        *search,
        checks.check_members(paths, expected + confirmed),
        *([confirmations] if confirmations.examined else []),
        run_checks.check_files(run_list),
        cache_check,
        run_checks.check_validation(run_list, cache_identity, targets),
        run_checks.check_recipes(paths, run_list, history.name, history.grid),
        checks.check_plans(paths, history.grid, settings.get("epochs_per_slice")),
        checks.check_trainer(paths, frozen_hash, run_list),
        run_checks.check_final(run_list, cache_identity, final_states(finished, metadata)),
        check_positions(settled, metadata),
        run_checks.check_artifacts(run_list),
        check_history(run_list, memory, history.grid),
        check_outcomes(run_list, metadata, memory),
        run_checks.check_retention(run_list, plans),
        *([check_lineage(views, history.grid, plans, memory)] if history.grid.horizons else []),
        *([check_packs(paths, views, plans)] if trained_packed(paths, views) else []),
        check_job_records(run_list, plans),
        run_checks.check_best(run_list),
        check_collected(paths, info, recomputed, finished),
    ]
    current = campaign_artifacts(paths, settled, memory)
    jobs = ledger_jobs(settled, stopped, metadata, history.grid)
    result.append(check_ledger(paths, ledger, previous_audit, current, jobs, stopped, accept))
    if stage == "full":
        result.append(check_runs_record(paths, result))
        published = report_artifacts(paths, memory)
        result.append(check_report(paths, report_info, memory, published, cache_dir, rebuild))
        current.update(published)
    for check in result:  # records name paths relative to the repository, however the campaign was reached
        check.violations = [checks.repository_relative(paths, violation) for violation in check.violations]
    passed = all(check.status != CheckStatus.FAILED for check in result)
    earlier = ledger.digest is not None or bool((previous_audit or {}).get("ledger_sha256"))
    record = {
        "campaign": history.name,
        "stage": stage,
        "audited_at": timestamp(),
        "passed": passed,
        "compared_with_earlier_audit": earlier,
        "runs": len(finished),
        "outcomes": _outcomes(paths, views, stopped, {run.id for run in history.retired()}),
        "checks": [check.record() for check in result],
        "ledger_sha256": (previous_audit or {}).get("ledger_sha256"),
    }
    record["summary"] = summary(record)
    if stage == "runs":
        previous_runs, _ = json_object(paths.audit_runs) if paths.audit_runs.is_file() else (None, None)
        if _same_runs_audit(previous_runs, record):  # the report shows it: it stands, byte for byte
            os.utime(paths.audit_runs)  # (its job's output is new to the workflow; its content is not)
            return previous_runs
        atomic_write_text(paths.audit_runs, json.dumps(record, indent=2) + "\n")
        if not passed:  # no seal stands over runs that fail
            paths.audit_passed.unlink(missing_ok=True)
        return record
    if not passed:  # a failing audit leaves the ledger as the last passing one wrote it
        atomic_write_text(paths.audit, json.dumps(record, indent=2) + "\n")
        paths.audit_passed.unlink(missing_ok=True)
        return record
    history = ledger.history + ([accepted(ledger.artifacts, current)] if accept else [])
    ledger_text = ledger_json(current, history, jobs, stopped)
    record["ledger_sha256"], record["previous_ledger_sha256"] = sha256_bytes(ledger_text.encode("utf-8")), ledger.digest
    if _same_audit(previous_audit, record) and ledger.digest == record["ledger_sha256"]:
        record = previous_audit  # nothing changed since the last audit: its records stand as they are
    else:  # audit.json first: killed before the ledger, the next audit finds the ledger it names as the one before
        atomic_write_text(paths.audit, json.dumps(record, indent=2) + "\n")
        atomic_write_text(paths.ledger, ledger_text)
    seal = sha256_bytes(paths.audit.read_bytes()) + "\n"
    if (
        not paths.audit_passed.is_file() or paths.audit_passed.read_text() != seal
    ):  # the workflow's target, while it passes
        atomic_write_text(paths.audit_passed, seal)
    return record


def _search(
    paths: CampaignPaths, history: GridHistory, views: dict[str, RunView]
) -> tuple[Halving | None, list[checks.Check]]:
    """The campaign's successive halving and its check; none for the full grid (whose audit is as it was)."""
    try:
        halving = recorded_search(paths, history.grid)
    except UserError as error:
        failed = checks.Check("successive-halving decisions recomputed from the runs' subset losses", unit="decisions")
        failed.violations.append(str(error))
        return None, [failed]
    return halving, ([] if halving is None else [check_search(halving, views, history)])


def _same_audit(previous: dict | None, record: dict) -> bool:
    """Whether the last audit found exactly what this one finds (its time, and the ledger it started
    from, aside: both audits then leave the same ledger)."""
    aside = {"audited_at": None, "previous_ledger_sha256": None}
    return isinstance(previous, dict) and {**previous, **aside} == {**record, **aside}


def _outcomes(
    paths: CampaignPaths, views: dict[str, RunView], stopped: dict[str, int | None], retired: set[str]
) -> dict[str, list[str]]:
    """Outcome -> the run directories audited with it, classified as status and the report do
    (ebd2n.campaign.job_logs.classify_run)."""
    logs, outcomes = JobLogs(paths), {}
    for view in views.values():
        if view.paths.directory.is_dir():
            outcome, _ = classify_run(
                RunRecord(view.paths.directory), logs, stopped=view.id in stopped, retired=view.id in retired
            )
            outcomes.setdefault(outcome.value, []).append(view.id)
    return dict(sorted(outcomes.items()))


def _same_runs_audit(previous: dict | None, record: dict) -> bool:
    """Whether the runs stage found what its record (audit-runs.json, which the report shows) says:
    the same runs, checks, outcomes, violations and notes, as `check_runs_record` compares them.
    Since the first full audit, the ledger's check may have gone from nothing to examine to passed,
    an earlier audit was compared, and the records check examined its records too."""
    if not isinstance(previous, dict) or not record["passed"] or not isinstance(previous.get("checks"), list):
        return False
    aside = dict.fromkeys(("audited_at", "compared_with_earlier_audit", "summary", "ledger_sha256", "checks"))
    if {**previous, **aside} != {**record, **aside} or len(previous["checks"]) != len(record["checks"]):
        return False
    ledger = record["checks"][-1]["name"]
    for before, now in zip(previous["checks"], record["checks"], strict=True):
        grown = (
            now["name"] == ledger
            and before.get("status") == CheckStatus.NOT_APPLICABLE
            and now["status"] == CheckStatus.PASSED
        )
        outcome = ("name", "status", "violations", "notes")
        if [before.get(key) for key in outcome] != [now[key] for key in outcome] and not (grown and not now["notes"]):
            return False
    return True


NO_EARLIER_AUDIT = (
    f"no earlier audit to compare with (first audit, or its records {AUDIT_JSON} and {AUDIT_LEDGER} are missing): "
    "nothing was compared with what an earlier audit saw; this audit sets the baseline"
)


def summary(record: dict) -> str:
    """The audit's one summary line: passed or failed, how many checks examined something and how
    many had nothing to examine yet (not a failure), and whether an earlier audit was compared."""
    checks_ = record["checks"]
    failed = [check for check in checks_ if check["status"] == CheckStatus.FAILED]
    idle = [check["name"] for check in checks_ if check["status"] == CheckStatus.NOT_APPLICABLE]
    if failed:
        line = f"audit failed: {len(failed)} of {len(checks_)} checks found violations"
    else:
        line = f"audit passed: all {len(checks_) - len(idle)} checks that had something to examine passed"
        if idle:
            line += f"; {len(idle)} had nothing to examine yet ({'; '.join(idle)})"
    if not record.get("compared_with_earlier_audit"):
        line += f"; {NO_EARLIER_AUDIT}"
    return line


def violations(record: dict) -> list[str]:
    """Every violation of an audit record, prefixed by its check."""
    return [f"{check['name']}: {v}" for check in record["checks"] for v in check["violations"]]
