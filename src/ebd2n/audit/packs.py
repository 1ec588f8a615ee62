"""Packed trials (campaign `execution.pack`): a run that trained slices in packs says so in its
packs.json (ebd2n.train.pack_record), and each pack's job recorded the same members when it ended
(packs/<base>/slice-<epoch>-<digest>.json, named by them). The audit holds every run's record to its
pack job's, and every job's members to their own records, by content: an edited or removed
packs.json names its run, an edited job record every member. A member that had diverged before the
pack's slice began trained nothing in it and records nothing of it (a job writes only into the runs
it trains).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ebd2n.audit.checks import Check
from ebd2n.audit.job_records import trained_ends
from ebd2n.audit.runs import RunView, json_object
from ebd2n.errors import UserError
from ebd2n.layout import PACKS, CampaignPaths
from ebd2n.train.pack_record import pack_digest, read_packs
from ebd2n.train.plan import SlicePlan


def trained_packed(paths: CampaignPaths, views: Mapping[str, RunView]) -> bool:
    """Whether any run of the campaign trained in a pack (only then is there a check to make: a
    campaign without packs audits as it always did; deleting every record is the ledger's to name)."""
    return paths.pack_records.is_dir() or any(PACKS in view.files for view in views.values())


def check_packs(paths: CampaignPaths, views: Mapping[str, RunView], plans: Mapping[str, SlicePlan | None]) -> Check:
    """Every run that trained in packs records packs their jobs recorded, each with the run in it, and
    every member a pack job recorded says it trained there."""
    check = Check("runs trained in packs record the packs their jobs trained")
    jobs = _job_members(paths, views)
    for view in views.values():
        if PACKS not in view.files and view.id not in jobs:
            continue
        check.examined += 1
        problems = _problems(paths, view, jobs.get(view.id, {}), plans.get(view.run.base))
        check.violations += [f"{view.id}: {problem}" for problem in problems]
    if not check.examined:
        check.reason = "no run trained in a pack"
    return check


def _job_members(paths: CampaignPaths, views: Mapping[str, RunView]) -> dict[str, dict[int, Path]]:
    """Run -> slice end -> the record of the pack job that names it, for every readable job record."""
    named: dict[str, dict[int, Path]] = {}
    for path in sorted(paths.pack_records.glob("*/*.json")):
        record, _ = json_object(path)
        members, end = (record or {}).get("members"), (record or {}).get("epoch")
        if isinstance(members, list) and isinstance(end, int):
            for member in members:
                if member in views:
                    named.setdefault(member, {})[end] = path
    return named


def _problems(paths: CampaignPaths, view: RunView, jobs: Mapping[int, Path], plan: SlicePlan | None) -> Iterable[str]:
    try:
        packs = read_packs(view.paths.directory)
    except UserError:
        yield f"{PACKS}: not a record of slice ends and the runs each trained with"
        return
    for end, job in sorted(jobs.items()):
        if end not in packs and not _ended_before(view, plan, end):
            yield f"{paths.relative(job)} trained it to epoch {end}, but its {PACKS} does not record that pack"
    for end, members in sorted(packs.items()):
        if view.id not in members:
            yield f"{PACKS}: its slice to epoch {end} trained in a pack without it ({', '.join(members)})"
            continue
        path = paths.pack_record(view.run.base, end, pack_digest(members))
        record, problem = json_object(path) if path.is_file() else (None, "missing")
        job = paths.relative(path)
        if record is None:
            yield (
                f"{PACKS}: trained to epoch {end} with {', '.join(members)}; "
                f"no job of that pack is recorded ({job}: {problem})"
            )
        elif sorted(record.get("members") or ()) != sorted(members) or record.get("epoch") != end:
            yield f"{PACKS}: trained to epoch {end} with {', '.join(members)}; {job} records another pack"


def _ended_before(view: RunView, plan: SlicePlan | None, end: int) -> bool:
    """Whether the run had diverged, as its validated results say, before the slice to `end` began
    (an unreadable plan is check_plans' to name)."""
    if plan is None or end not in plan.ends:
        return False
    last = trained_ends(view, plan)[1]
    return last is not None and end > last
