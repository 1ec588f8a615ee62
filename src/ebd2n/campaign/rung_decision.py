"""One rung decision of successive halving: candidates ranked from their runs' losses, the file it
is written to (named by what it was decided from), and reading such a file back."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ebd2n.campaign.search import Bracket, is_number, point_id
from ebd2n.campaign.seed_noise import within_noise
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.train.records import metrics as run_metrics


def promoted_count(keep: float, candidates: int) -> int:
    """ceil(keep x n), at least one (rounded first: 0.1 x 30 is 3, not 3.0000000000000004)."""
    return max(1, math.ceil(round(keep * candidates, 9)))


def decision_digest(runs: Iterable[str], keep: float, seed_noise: float | None = None) -> str:
    """Names a decision by what it is decided from: the sorted run ids, the share kept and the
    seed-noise level (left out when unset, so decisions by rank alone keep their names)."""
    inputs: dict[str, Any] = {"runs": sorted(runs), "keep": keep}
    if seed_noise is not None:
        inputs["seed_noise"] = seed_noise
    text = json.dumps(inputs, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def decision_rule(decision: Mapping[str, Any]) -> float | None:
    """The seed-noise level a decision file was made with (None: rank alone)."""
    noise = decision.get("seed_noise")
    return float(noise) if is_number(noise) else None


def epoch_loss(metrics: Path, epoch: int) -> float | None:
    """The subset-validation loss a run's metrics.jsonl records at epoch boundary `epoch`."""
    for record in run_metrics(metrics).epochs:
        if record["epoch"] == epoch:
            loss = record.get("val_loss")
            return float(loss) if isinstance(loss, (int, float)) and not isinstance(loss, bool) else None
    return None


def recorded_epochs(metrics: Path) -> list[int]:
    """Every epoch boundary a run's metrics.jsonl records."""
    return [record["epoch"] for record in run_metrics(metrics).epochs]


def decide(
    bracket: Bracket,
    epoch: int,
    candidates: list[tuple[float, float]],
    keep: float,
    losses: Mapping[str, float | None],
    earlier: Mapping[str, list[str]],
    drawn_from: Iterable[str] = (),
    seeds: Iterable[int] | None = None,
    seed_noise: float | None = None,
    diverged: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The decision at rung `epoch`: candidates ranked (mean loss over seeds; a point missing a
    seed's loss, or with a non-finite one, ranks last), the best ceil(keep x n) promoted (never a point
    with a run in `diverged`, which has no loss), and the points earlier decisions of this rung promoted
    carried. `earlier` maps each earlier decision's file name to the points it let train on;
    `drawn_from` names the decisions of the rung before
    whose promoted points are the candidates (what the audit traces each decision back through);
    `seeds` are those of the grid it is made under (default: the bracket's). With `seed_noise` each
    ranked point also records the rule that kept or dropped it (`seed_noise_rule`)."""
    ranking = []
    for lr, beta2 in candidates:
        point = {run.id: losses.get(run.id) for run in bracket.runs([(lr, beta2)], seeds)}
        values = [loss for loss in point.values() if loss is not None and math.isfinite(loss)]
        mean = sum(values) / len(values) if len(values) == len(point) else None
        ranking.append({"point": point_id(lr, beta2), "lr": lr, "beta2": beta2, "mean_loss": mean, "losses": point})
    ranking.sort(key=lambda entry: (entry["mean_loss"] is None, entry["mean_loss"] or 0.0, entry["lr"], entry["beta2"]))
    promoted = [
        entry["point"]
        for entry in ranking[: promoted_count(keep, len(ranking))]
        if not diverged.intersection(entry["losses"])
    ]
    if seed_noise is not None:
        promoted = within_noise(ranking, promoted, seed_noise)
    listed = {entry["point"] for entry in ranking}
    carried = sorted(
        {point for points in earlier.values() for point in points if point in listed} - set(promoted),
        key=[entry["point"] for entry in ranking].index,
    )
    runs = [run for entry in ranking for run in entry["losses"]]
    rule = {} if seed_noise is None else {"seed_noise": seed_noise}
    return {
        "bracket": bracket.name,
        "epoch": epoch,
        "keep": keep,
        **rule,
        "digest": decision_digest(runs, keep, seed_noise),
        "candidates": len(ranking),
        "ranking": ranking,
        "promoted": promoted,
        "carried": carried,
        "continuing": [entry["point"] for entry in ranking if entry["point"] in {*promoted, *carried}],
        "earlier": sorted(earlier),
        "drawn_from": sorted(drawn_from),
    }


def decision_json(decision: Mapping[str, Any]) -> str:
    return json.dumps(decision, indent=1) + "\n"


DECISION_NAME = re.compile(r"rung-(?P<epoch>[0-9]+)-(?P<digest>[0-9a-f]{16})\.json")
"""A decision file's name (CampaignPaths.rung_decision); the names a decision lists must match it."""


def read_decision(path: Path) -> dict[str, Any] | None:
    """A decision file, None when absent; one that is not a decision (its points, rankings and the
    decisions it names checked for shape) is a user error naming it."""
    decision = read_json(path)
    if decision is not None and not _shaped(decision):
        raise UserError(f"{path}: not a rung decision (ebd2n.campaign.rung_decision)")
    return decision


def _shaped(decision: Any) -> bool:
    """Whether a decision has the shape `decide` gives it, as far as its readers rely on it."""
    if not isinstance(decision, dict) or not isinstance(decision.get("ranking"), list):
        return False
    named = all(
        isinstance(names, list) and all(isinstance(name, str) and DECISION_NAME.fullmatch(name) for name in names)
        for names in (decision.get("earlier", []), decision.get("drawn_from", []))
    )
    points = isinstance(decision.get("continuing"), list) and all(
        isinstance(point, str) for point in decision["continuing"]
    )
    ranked = all(
        isinstance(entry, dict) and isinstance(entry.get("point"), str) and isinstance(entry.get("losses"), dict)
        for entry in decision["ranking"]
    )
    return named and points and ranked


def continuing_points(path: Path) -> list[str]:
    """The points a decision file lets train on; none when unreadable (the audit names it)."""
    try:
        decision = read_decision(path)
    except UserError:
        return []
    return (decision or {}).get("continuing", [])
