"""Choose what a campaign confirms, as the workflow's `select_confirmation` job asks (`ebd2n
confirm-select`): refused when the campaign file now selects from other runs than the job expects."""

from __future__ import annotations

import json

from ebd2n.atomic import atomic_write_text, sha256_file
from ebd2n.campaign.confirmation import read_selection, select_points, selection_path
from ebd2n.campaign.file import Campaign
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.provenance import timestamp


def write_selection(campaign: Campaign, digest: str | None = None) -> str:
    """Write the campaign's selection for confirmation (`ebd2n confirm-select`, the workflow's
    checkpoint job), unless written already: it is made once. `digest`: the one the workflow expects.
    Returns one line saying what it chose."""
    confirm, grid, paths = campaign.confirm, campaign.grid, campaign.paths
    if confirm is None:
        raise UserError(f"{campaign.source}: no confirm: nothing to select for confirmation")
    path = selection_path(paths, grid, confirm)
    if digest is not None and path != paths.confirm_selection(digest):
        raise UserError(
            f"{paths.confirm_selection(digest)}: the campaign file {campaign.source} now selects from other runs "
            f"({path.name}); run the workflow again"
        )
    written = read_selection(path)
    if written is None:
        candidates = grid.runs()
        results = {run.id: read_json(paths.run(run.id).results) for run in candidates}
        selection = select_points(candidates, confirm, results)
        selection["read"] = {
            run.id: sha256_file(paths.run(run.id).results) for run in candidates if results[run.id] is not None
        }  # what it was made from, as the runs recorded it then; and when (its runs train after it)
        selection["made"] = timestamp()
        atomic_write_text(path, json.dumps(selection, indent=1) + "\n")
    chosen = read_selection(path)
    points = "; ".join(
        f"{group['mode']}: {', '.join(point['point'] for point in group['points']) or 'none eligible'}"
        for group in chosen["groups"]
    )
    return f"{path} {'unchanged' if written else 'written'}: confirms {points} on seeds {chosen['seeds']}"
