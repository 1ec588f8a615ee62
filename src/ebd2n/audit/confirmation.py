"""The audit of a campaign's confirmations (ebd2n.campaign.confirmation): each selection under
confirm/ is recomputed from the runs it read, as they are now, and its runs are held to it.

A selection passes when its name is the digest of what it ranked, its seeds are none of the seeds it
ranked over, the results it read are byte for byte the runs' results now, its choice is the ranking
of those results, and every run it asks for started training after it was made. The runs it names
are the campaign's runs too (ebd2n.audit.checks.check_members); their recipes are held, as every
run's, to the frozen base but for the seed (ebd2n.audit.run_checks.check_recipes).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ebd2n.audit.checks import Check
from ebd2n.audit.runs import RunView
from ebd2n.campaign.confirmation import Confirm, confirmation_runs, read_selection, select_points, selection_digest
from ebd2n.campaign.runs import Run, parse_run_id
from ebd2n.errors import UserError
from ebd2n.layout import CONFIRM, RESULTS_JSON, CampaignPaths

CHECK = "every confirmation recomputed from the runs it read, on fresh seeds, trained after it"


def check_confirmations(paths: CampaignPaths, views: dict[str, RunView]) -> tuple[Check, list[Run]]:
    """The check of every selection file, and the runs the readable ones ask for."""
    check = Check(CHECK, unit="selections")
    asked: list[Run] = []
    first: dict[str, datetime | None] = {}  # each run: when the first selection asking for it was made
    for path in sorted((paths.directory / CONFIRM).glob("selection-*.json")):
        check.examined += 1
        where = path.relative_to(paths.directory).as_posix()
        try:
            selection = read_selection(path)
            candidates = [parse_run_id(run_id) for run_id in selection["candidates"]]
            confirm = Confirm(int(selection["top"]), tuple(int(seed) for seed in selection["seeds"]))
            runs = confirmation_runs(selection)
        except (UserError, KeyError, TypeError, ValueError) as error:
            check.violations.append(f"{where}: not a readable selection ({error})")
            continue
        asked += runs
        problems = _problems(path, selection, candidates, confirm, views)
        check.violations += [f"{where}: {problem}" for problem in problems]
        made = _moment(selection.get("made"))
        for run in runs:  # a later selection may ask for a run an earlier one trained: it is kept
            earlier = first.get(run.id, made)
            first[run.id] = None if made is None or earlier is None else min(made, earlier)
    for run_id, made in first.items():
        started = _moment(((views.get(run_id) and views[run_id].record) or {}).get("started"))
        if made is None or (started is not None and started < made):
            check.violations.append(f"{run_id} started training before any selection asking for it was made")
    return check, asked


def _problems(
    path: Path, selection: dict, candidates: list[Run], confirm: Confirm, views: dict[str, RunView]
) -> list[str]:
    problems = []
    if path.name != f"selection-{selection_digest(candidates, confirm)}.json":
        problems.append("its name is not the digest of the runs, top and seeds it records")
    if shared := sorted(set(confirm.seeds) & {run.seed for run in candidates}):
        problems.append(f"confirmation seeds {shared} are seeds the selection ranked over")
    read = selection.get("read") or {}
    changed = [run for run, digest in read.items() if run not in views or views[run].hashes.get(RESULTS_JSON) != digest]
    if changed:
        problems.append(f"the results it read changed since ({', '.join(sorted(changed))})")
    results = {run.id: views[run.id].results if run.id in views else None for run in candidates}
    recomputed = select_points(candidates, confirm, results)
    if (recomputed["groups"], recomputed["runs"]) != (selection["groups"], selection["runs"]):
        problems.append("its choice is not the ranking of the runs it read (recomputed from their results)")
    return problems


def _moment(text: object) -> datetime | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None
