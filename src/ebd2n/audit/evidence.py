"""What an audit reads from a campaign (records, run views, the cache, artifact hashes), kept apart from judging it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ebd2n.audit.checks import Check
from ebd2n.audit.run_history import trunk_jobs
from ebd2n.audit.runs import RunView, json_object, read_run
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.runs import parse_run_id
from ebd2n.errors import UserError
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import FINAL, CampaignPaths, slice_checkpoint
from ebd2n.train.plan import SlicePlan, read_slice_plan


def recorded_plans(paths: CampaignPaths, bases: tuple[str, ...]) -> dict[str, SlicePlan | None]:
    """Each base's slices as the frozen trainer confirmed them; None where unreadable (check_plans names it)."""
    plans: dict[str, SlicePlan | None] = {}
    for base in bases:
        try:
            plans[base] = read_slice_plan(paths.slice_plan(base))
        except UserError:
            plans[base] = None
    return plans


def read_record(paths: CampaignPaths, path: Path, check: Check, optional: bool = False) -> Any:
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


def read_text_record(paths: CampaignPaths, path: Path, check: Check) -> str | None:
    if not path.is_file():
        check.violations.append(f"{path.relative_to(paths.directory)}: missing")
        return None
    check.examined += 1
    return path.read_text(encoding="utf-8", errors="replace").strip() or None


def run_views(paths: CampaignPaths, expected: list, memory: HashMemory) -> dict[str, RunView]:
    """Every run of the grid with a directory, and every other run directory with a run id (the
    members check names those that are no run of the grid)."""
    runs = {run.id: run for run in expected}
    for directory in sorted(paths.runs.glob("*")) if paths.runs.is_dir() else []:
        if directory.name not in runs:
            try:
                runs[directory.name] = parse_run_id(directory.name)
            except UserError:
                continue
    return {
        run_id: read_run(paths.run(run_id), run, memory, f"{paths.runs.name}/{run_id}/")
        for run_id, run in runs.items()
        if paths.run(run_id).directory.is_dir()
    }


def shared_cache_identity(finished: list[RunView]) -> str | None:
    """The one cache identity every finished run records (None when they disagree)."""
    seen = {view.results.get("cache_identity") for view in finished}
    return seen.pop() if len(seen) == 1 else None


def reachable_cache(paths: CampaignPaths, finished: list[RunView]) -> Path | None:
    """The cache the runs read (a relative cache_dir starts at the campaign's repository). An audit
    that cannot reach it cannot judge the runs: it stops, saying where it looked, before it writes."""
    named = next((view.recipe.data.cache_dir for view in finished if view.recipe is not None), None)
    if named is None:
        return None
    cache_dir = paths.repository / named
    if not cache_dir.is_dir():
        relative = "" if Path(named).is_absolute() else f", relative to the campaign's repository {paths.repository}"
        raise UserError(
            f"data cache {named} (the runs' data.cache_dir): not found at {cache_dir}{relative}; audit the "
            "campaign where its cache is reached (a copy: beside its repository's results/), "
            "nothing was written"
        )
    return cache_dir


def final_states(finished: list[RunView], metadata: dict[tuple[str, str], dict | None]) -> dict[str, dict]:
    """The metadata each final.pt records about itself."""
    return {view.id: state for view in finished if (state := metadata.get((view.id, FINAL))) is not None}


def ledger_jobs(
    settled: list[RunView], stopped: dict[str, int], metadata: dict[tuple[str, str], dict | None], grid: Grid
) -> dict[str, list[str]]:
    """The jobs that trained each finished run (results.json) and each stopped run (its rung
    checkpoint), a branched run's trunk jobs (its parent's) left out: a branch trained again from
    the same trunk is known as one."""
    jobs = {}
    for view in settled:
        if view.id in stopped:
            progress = (metadata.get((view.id, slice_checkpoint(stopped[view.id]))) or {}).get("progress")
            jobs[view.id] = list(progress.get("job_ids") or []) if isinstance(progress, dict) else []
        else:
            jobs[view.id] = list(view.results.get("job_ids") or [])
        if grid.horizons:
            trunk = trunk_jobs(view, grid)
            jobs[view.id] = [job for job in jobs[view.id] if job not in trunk]
    return jobs


def campaign_artifacts(paths: CampaignPaths, settled: list[RunView], memory: HashMemory) -> dict[str, str]:
    """SHA-256 of every finished or stopped run's files, the frozen records, base recipes and slice
    plans, rung decisions, pack jobs' records, campaign.json and runs.csv, keyed by their path
    relative to the campaign."""

    runs = paths.runs.name
    artifacts = {f"{runs}/{view.id}/{name}": digest for view in settled for name, digest in view.hashes.items()}
    frozen = [
        paths.source_hash,
        paths.freeze_record,
        *sorted(paths.frozen_spec.glob("*")),
        *sorted(paths.frozen_recipes.glob("*.yaml")),
        *sorted(paths.slice_plans.glob("*.json")),
        *sorted(paths.search.rglob("*.json")),
        *sorted(paths.pack_records.rglob("*.json")),
    ]
    for path in [*frozen, paths.campaign_json, paths.runs_csv]:
        if path.is_file():
            relative = path.relative_to(paths.directory).as_posix()
            artifacts[relative] = memory.sha256(path, relative)
    return artifacts


def report_artifacts(paths: CampaignPaths, memory: HashMemory) -> dict[str, str]:
    """SHA-256 of every file of the published report, keyed by its path relative to the campaign."""
    relative = {p: p.relative_to(paths.directory).as_posix() for p in sorted(paths.report.rglob("*"))}
    return {name: memory.sha256(p, name) for p, name in relative.items() if p.is_file() and not p.is_symlink()}
