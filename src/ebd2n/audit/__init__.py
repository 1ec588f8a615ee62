"""Audit a campaign: prove that every result is complete, comparable and untouched, by content.

Three kinds of evidence back each other, so no single deleted or edited file goes unnoticed:
- each run's own records: final.pt names its run id and recipe identity, checkpoints.json its
  SHA-256, and results.json the SHA-256 of every file the trainer left;
- the ledger (`audit-ledger.json`, see `ebd2n.audit.ledger`): every artifact of the last passing
  audit; an audited run's files must never change afterwards;
- audit.json records the ledger's own SHA-256, so a deleted or edited ledger is a violation.
The published report is rebuilt elsewhere and compared byte for byte. File times never count.
What this cannot catch: someone who rewrites every record, the ledger and audit.json
consistently; a signature with a key kept elsewhere does (`ebd2n audit --sign`, ebd2n.signing).

Two stages: `runs` (before the report is built; writes audit-runs.json) and `full` (after it;
verifies the report, writes the ledger and audit.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from ebd2n.atomic import atomic_write_text, sha256_bytes
from ebd2n.audit import checks
from ebd2n.audit.ledger import Ledger, accepted, compare, protected, read_ledger, retrained, write_ledger
from ebd2n.audit.runs import RunView, json_object, read_run
from ebd2n.campaign.runs import grid_runs, parse_run_id
from ebd2n.errors import UserError
from ebd2n.layout import CAMPAIGN_JSON, FINAL, RUNS_CSV, CampaignPaths
from ebd2n.provenance import timestamp

Stage = Literal["runs", "full"]


def audit_campaign(campaign_dir: str | Path, stage: Stage = "full", accept: bool = False) -> dict:
    """Run every check of `stage`, write its record (and, for a passing full audit, the ledger)."""
    paths = CampaignPaths(Path(campaign_dir))
    if not paths.directory.is_dir() or not (paths.frozen.is_dir() or paths.runs.is_dir()):
        raise UserError(f"{paths.directory}: not a campaign directory (no frozen/ or runs/); pass results/<campaign>")
    files = checks.Check("campaign records present and readable", unit="files")
    info = _read_record(paths, paths.campaign_json, files)
    frozen_hash = _read_text(paths, paths.source_hash, files)
    previous_audit = _read_record(paths, paths.audit, files, optional=True)
    try:
        ledger = read_ledger(paths)
    except ValueError as error:
        files.violations.append(str(error))
        ledger = Ledger()
    files.examined += 1 if paths.ledger.exists() else 0

    expected = _expected_runs(info)
    if info is not None and not expected:
        files.violations.append(f"{CAMPAIGN_JSON}: its grid and seeds name no run (missing or of the wrong shape)")
    views = _views(paths, expected, files)
    finished = [view for view in views.values() if view.finished]
    cache_identity = _cache_identity(info, finished)
    cache_check, targets = checks.check_cache(_cache_dir(finished), cache_identity)
    run_list = list(views.values())
    result = [
        files,
        checks.check_grid(expected, views) if info else _not_applicable("every grid point has every seed", f"{CAMPAIGN_JSON} unreadable"),
        checks.check_files(run_list),
        cache_check,
        checks.check_validation(run_list, cache_identity, targets),
        checks.check_recipes(paths, run_list),
        checks.check_trainer(paths, frozen_hash, (info or {}).get("source_hash"), run_list),
        checks.check_final(run_list, cache_identity, _final_states(finished)),
        checks.check_artifacts(run_list),
        checks.check_history(run_list),
        checks.check_retention(run_list),
        checks.check_best(run_list),
        _check_collected(paths, info, finished, frozen_hash),
    ]
    current = _artifacts(paths, views)
    jobs = {view.id: list(view.results.get("job_ids") or []) for view in finished}
    result.append(_check_ledger(paths, ledger, previous_audit, current, jobs, accept))
    if stage == "full":
        result.append(checks.check_report(paths))
        current.update(_report_artifacts(paths))
    passed = all(check.status != "failed" for check in result)
    record = {
        "campaign": (info or {}).get("campaign", paths.name),
        "stage": stage,
        "audited_at": timestamp(),
        "passed": passed,
        "runs": len(finished),
        "checks": [check.record() for check in result],
        "ledger_sha256": (previous_audit or {}).get("ledger_sha256"),
    }
    if stage == "runs":
        atomic_write_text(paths.audit_runs, json.dumps(record, indent=2) + "\n")
        if not passed:  # no seal stands over runs that fail
            paths.audit_passed.unlink(missing_ok=True)
        return record
    if passed:  # a failing audit leaves the ledger as the last passing one wrote it
        history = ledger.history + ([accepted(ledger.artifacts, current)] if accept else [])
        record["ledger_sha256"] = write_ledger(paths, current, history, jobs)
    text = json.dumps(record, indent=2) + "\n"
    atomic_write_text(paths.audit, text)
    if passed:  # the workflow's target: present only while the last full audit passed
        atomic_write_text(paths.audit_passed, sha256_bytes(text.encode("utf-8")) + "\n")
    else:
        paths.audit_passed.unlink(missing_ok=True)
    return record


def violations(record: dict) -> list[str]:
    """Every violation of an audit record, prefixed by its check."""
    return [f"{check['name']}: {v}" for check in record["checks"] for v in check["violations"]]


def _read_record(paths: CampaignPaths, path: Path, check: checks.Check, optional: bool = False) -> Any:
    where = path.relative_to(paths.directory)
    if not path.is_file():
        if not optional:
            check.violations.append(f"{where}: missing")
        return None
    check.examined += 1
    value, problem = json_object(path)
    if problem:
        check.violations.append(f"{where}: {problem}")
    return value


def _read_text(paths: CampaignPaths, path: Path, check: checks.Check) -> str | None:
    if not path.is_file():
        check.violations.append(f"{path.relative_to(paths.directory)}: missing")
        return None
    check.examined += 1
    return path.read_text(encoding="utf-8", errors="replace").strip() or None


def _expected_runs(info: dict | None) -> list:
    """The campaign's grid as campaign.json records it (empty when unreadable)."""
    if not info:
        return []
    try:
        grid = info["grid"]
        return grid_runs(grid.get("presets"), grid["modes"], grid["learning_rates"], grid["beta2"], info["seeds"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return []


def _views(paths: CampaignPaths, expected: list, files: checks.Check) -> dict[str, RunView]:
    """Every run of the grid with a directory, and every other run directory found."""
    runs = {run.id: run for run in expected}
    for directory in sorted(paths.runs.glob("*")) if paths.runs.is_dir() else []:
        if directory.name not in runs:
            try:
                runs[directory.name] = parse_run_id(directory.name)
            except UserError as error:
                files.violations.append(f"{directory.relative_to(paths.directory)}: {error}")
    return {run_id: read_run(paths.run(run_id), run) for run_id, run in runs.items() if paths.run(run_id).directory.is_dir()}


def _cache_identity(info: dict | None, finished: list[RunView]) -> str | None:
    recorded = (info or {}).get("cache_identities") or []
    if len(recorded) == 1:
        return recorded[0]
    seen = {view.results.get("cache_identity") for view in finished}
    return seen.pop() if len(seen) == 1 else None


def _cache_dir(finished: list[RunView]) -> str | None:
    return next((view.recipe.data.cache_dir for view in finished if view.recipe is not None), None)


def _final_states(finished: list[RunView]) -> dict[str, dict]:
    """The metadata each final.pt records about itself (tensors stay on disk: mmap)."""
    import torch

    states = {}
    for view in finished:
        if FINAL not in view.hashes:
            continue
        try:
            state = torch.load(view.paths.final, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001 - any unpickling failure means an unreadable file
            continue
        if isinstance(state, dict):
            states[view.id] = {key: state.get(key) for key in ("run_id", "recipe_identity", "source_hash")}
    return states


def _not_applicable(name: str, reason: str) -> checks.Check:
    return checks.Check(name, reason=reason)


def _check_collected(paths: CampaignPaths, info: dict | None, finished: list[RunView], frozen_hash: str | None) -> checks.Check:
    """campaign.json and runs.csv say what the runs say."""
    from ebd2n.campaign.results import read_results

    check = checks.Check(f"{CAMPAIGN_JSON} and {RUNS_CSV} equal a recomputation", unit="files")
    if info is None or not finished:
        check.reason = "nothing collected yet" if info is not None else f"{CAMPAIGN_JSON} unreadable"
        return check
    check.examined = 2
    caches = sorted({str(view.results.get("cache_identity")) for view in finished})
    if info.get("cache_identities") != caches:
        check.violations.append(f"{CAMPAIGN_JSON}: cache identities {info.get('cache_identities')} != the runs' {caches}")
    if info.get("runs_finished") != len(finished):
        check.violations.append(f"{CAMPAIGN_JSON}: runs_finished {info.get('runs_finished')} != {len(finished)} finished runs")
    if frozen_hash is not None and info.get("source_hash") != frozen_hash:
        check.violations.append(f"{CAMPAIGN_JSON}: source_hash is not the frozen trainer's")
    try:
        expected = read_results(paths.directory).runs.write_csv()
    except UserError as error:
        check.violations.append(f"runs table cannot be recomputed: {error}")
        return check
    actual = paths.runs_csv.read_text(encoding="utf-8", errors="replace") if paths.runs_csv.is_file() else None
    if actual != expected:
        check.violations.append(f"{paths.runs_csv.name}: {'missing' if actual is None else 'differs from the runs results'}")
    return check


def _artifacts(paths: CampaignPaths, views: dict[str, RunView]) -> dict[str, str]:
    """SHA-256 of every finished run's files, the frozen records and base recipes, campaign.json
    and runs.csv, keyed by their path relative to the campaign."""
    from ebd2n.atomic import sha256_file

    runs = paths.runs.name
    artifacts = {
        f"{runs}/{view.id}/{name}": digest for view in views.values() if view.finished for name, digest in view.hashes.items()
    }
    frozen = [paths.source_hash, paths.freeze_record, *sorted(paths.frozen_recipes.glob("*.yaml"))]
    for path in [*frozen, paths.campaign_json, paths.runs_csv]:
        if path.is_file():
            artifacts[path.relative_to(paths.directory).as_posix()] = sha256_file(path)
    return artifacts


def _report_artifacts(paths: CampaignPaths) -> dict[str, str]:
    from ebd2n.atomic import sha256_file

    return {
        p.relative_to(paths.directory).as_posix(): sha256_file(p)
        for p in sorted(paths.report.rglob("*")) if p.is_file() and not p.is_symlink()
    }


def _check_ledger(paths: CampaignPaths, ledger: Ledger, audit: dict | None, current: dict[str, str],
                  jobs: dict[str, list[str]], accept: bool) -> checks.Check:
    """The ledger is the one the last audit wrote, and nothing it protects has changed since, but
    for runs trained again by other jobs (named in the check's notes)."""
    check = checks.Check("audited artifacts unchanged since the last audit (ledger)", unit="artifacts")
    recorded = (audit or {}).get("ledger_sha256")
    name = paths.ledger.name
    if recorded and ledger.digest is None and not paths.ledger.exists():  # unreadable: the files check says so
        check.violations.append(f"{name}: missing, but {paths.audit.name} records one; restore it, or re-baseline with `ebd2n audit --accept`")
    elif ledger.digest is not None and recorded != ledger.digest:
        check.violations.append(f"{name}: not the ledger the last audit wrote (edited, or {paths.audit.name} replaced)")
    if check.violations and accept:
        check.violations.clear()  # --accept re-baselines: recorded in the ledger's history
    changed, gone = compare(ledger.artifacts, current)
    again = retrained(ledger.jobs, jobs)
    check.notes = [f"{run}: trained again since the last audit (jobs {', '.join(ledger.jobs[run])} -> {', '.join(jobs[run])})"
                   for run in again]
    mine = tuple(f"{paths.runs.name}/{run}/" for run in again)
    changed, gone = [e for e in changed if not e.startswith(mine)], [e for e in gone if not e.startswith(mine)]
    check.examined = sum(1 for entry in ledger.artifacts if protected(entry))
    if not check.examined:
        check.reason = "no earlier audit (this one sets the baseline)"
    if not accept:
        check.violations += [f"{entry}: changed since the last audit" for entry in changed]
        check.violations += [f"{entry}: disappeared since the last audit" for entry in gone]
    return check
