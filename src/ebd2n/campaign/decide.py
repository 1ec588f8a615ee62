"""Decide one rung of a successive-halving bracket, as the workflow's `decide_rung` job asks
(`ebd2n decide`): refused when the campaign file now decides another file than the job expects."""

from __future__ import annotations

import json

from ebd2n.campaign.file import Campaign
from ebd2n.campaign.history import record_grid
from ebd2n.campaign.plans import campaign_search
from ebd2n.campaign.workflow import asked_candidates
from ebd2n.errors import UserError


def decide_rung(campaign: Campaign, bracket_name: str, epoch: int, digest: str | None = None) -> str:
    """Write the decision at rung `epoch` of the bracket (unchanged when it says the same already);
    `digest`: the decision the workflow expects. Returns one line saying which points train on."""
    halving = campaign_search(campaign)
    if halving is None:
        raise UserError(f"{campaign.source}: search: no successive halving to decide")
    bracket = halving.bracket(bracket_name)
    asked_candidates(halving, bracket, epoch, digest, campaign.source)
    # the grid and share it is decided under: what the audit holds the decision to
    record_grid(campaign.paths, campaign.name, campaign.description, campaign.grid)
    path, written = halving.decide(bracket, epoch)
    decision = json.loads(path.read_text(encoding="utf-8"))
    promoted = ", ".join(decision["continuing"])
    return (
        f"{path} {'written' if written else 'unchanged'}: bracket {bracket.name} rung {epoch}: "
        f"{len(decision['continuing'])} of {decision['candidates']} point(s) train on ({promoted})"
    )
