"""Decide one rung of a successive-halving bracket, as the workflow's `decide_rung` job asks
(`ebd2n decide`): refused when the campaign file now decides another file than the job expects."""

from __future__ import annotations

import json

from ebd2n.campaign.spec import Campaign, campaign_search, record_spec
from ebd2n.errors import UserError


def decide_rung(campaign: Campaign, bracket_name: str, epoch: int, digest: str | None = None) -> str:
    """Write the decision at rung `epoch` of the bracket (unchanged when it says the same already);
    `digest`: the decision the workflow expects. Returns one line saying which points train on."""
    halving = campaign_search(campaign)
    bracket = halving.bracket(bracket_name)
    expected = halving.decision_path(bracket, epoch, halving.candidates(bracket, epoch))
    if digest and expected.stem != f"rung-{epoch}-{digest}":
        raise UserError(f"{campaign.source}: bracket {bracket.name} rung {epoch}: the grid now decides "
                        f"{expected.name}, not rung-{epoch}-{digest}.json (the campaign file changed while the "
                        "workflow ran: run it again)")
    record_spec(campaign)  # the grid and share it is decided under: what the audit holds the decision to
    path, written = halving.decide(bracket, epoch)
    decision = json.loads(path.read_text(encoding="utf-8"))
    promoted = ", ".join(decision["continuing"])
    return (f"{path} {'written' if written else 'unchanged'}: bracket {bracket.name} rung {epoch}: "
            f"{len(decision['continuing'])} of {decision['candidates']} point(s) train on ({promoted})")
