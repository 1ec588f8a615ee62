"""The report's account of a successive-halving search: which points stopped at which rung, what
each rung's ranking said, and the training hours the search used against the full grid's.

Rankings come from the rung decisions (ebd2n.campaign.halving), hours from every run's
metrics.jsonl, stopped runs included: their hours are spent although they have no final result.
The full grid's hours are estimated: each epoch a run did not train counts the mean wall time of
that epoch over the runs of its bracket that trained it. A campaign without a search (campaign.json
holds no "search") gets none of this, so its report is as it was.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ebd2n.campaign.halving import Halving
from ebd2n.campaign.history import read_history
from ebd2n.campaign.plans import recorded_search
from ebd2n.campaign.results import CampaignResults
from ebd2n.campaign.search import Bracket, point_id
from ebd2n.layout import RUNS, CampaignPaths
from ebd2n.outcomes import LiveState

FINISHED, TRAINING = "finished", LiveState.TRAINING.value
"""A point's outcome besides stopping at a rung: every seed trained to the end, or still under way
(promoted at every rung decided so far)."""
BRACKET_COLUMNS: dict[str, type[pl.DataType]] = {
    "bracket": pl.String,
    "point": pl.String,
    "lr": pl.Float64,
    "beta2": pl.Float64,
    "outcome": pl.String,
    "stopped_at": pl.Int64,
    "rung": pl.Int64,
    "candidates": pl.Int64,
    "rank": pl.Int64,
    "mean_loss": pl.Float64,
    "continued": pl.Boolean,
}
"""brackets.csv: one row per point and rung it was ranked at."""


def report_halving(campaign: CampaignResults) -> Halving | None:
    """The campaign's search as the frozen spec and its decisions stand; None for a grid campaign."""
    if not (campaign.info or {}).get("search"):
        return None
    paths = CampaignPaths(campaign.directory)
    return recorded_search(paths, read_history(paths).grid)


def halving_outputs(campaign: CampaignResults, halving: Halving) -> dict[str, Any]:
    """Per bracket its points' outcomes and rankings and its hours; the campaign's hours in all."""
    fates = halving.outcome()
    brackets = [_bracket(campaign, halving, bracket, fates) for bracket in halving.groups]
    hours = _share([entry["hours"] for entry in brackets])
    return {
        "method": halving.search.method,
        "keep": halving.search.keep,
        "brackets": brackets,
        "stopped_runs": sorted(run for run, fate in fates.items() if fate is not None),
        "hours": hours,
    }


def bracket_table(outputs: dict[str, Any]) -> pl.DataFrame:
    """brackets.csv: each point at each rung it was ranked at, with its mean loss, rank and whether it trained on."""
    rows = [
        {
            "bracket": bracket["bracket"],
            "point": point["point"],
            "lr": point["lr"],
            "beta2": point["beta2"],
            "outcome": point["outcome"],
            "stopped_at": point["stopped_at"],
            "rung": rung["epoch"],
            "candidates": rung["candidates"],
            **point["rungs"][str(rung["epoch"])],
        }
        for bracket in outputs["brackets"]
        for point in bracket["points"]
        for rung in bracket["rungs"]
        if str(rung["epoch"]) in point["rungs"]
    ]
    return pl.DataFrame(rows, schema=BRACKET_COLUMNS)


def stopped_at(outputs: dict[str, Any] | None) -> dict[str, int]:
    """Run id -> the rung epoch it stopped at, for the runs the search stopped."""
    if outputs is None:
        return {}
    return {
        run: point["stopped_at"]
        for bracket in outputs["brackets"]
        for point in bracket["points"]
        if point["stopped_at"] is not None
        for run in point["runs"]
    }


def _bracket(
    campaign: CampaignResults, halving: Halving, bracket: Bracket, fates: dict[str, int | None]
) -> dict[str, Any]:
    decided = [rung for rung in halving.walk(bracket) if rung.decision is not None]
    rungs = [
        {"epoch": rung.epoch, "candidates": rung.decision["candidates"], "continuing": rung.past_ids}
        for rung in decided
    ]
    points = []
    for lr, beta2 in sorted(bracket.points):
        identifier = point_id(lr, beta2)
        runs = [run.id for run in bracket.runs([(lr, beta2)])]
        fate = fates.get(
            runs[0], TRAINING
        )  # the rung it stopped at; None: it trains to the end; absent: a rung still open
        stopped = fate if isinstance(fate, int) else None
        ranked = {}
        for rung in decided:
            for rank, entry in enumerate(rung.decision["ranking"], start=1):
                if entry["point"] == identifier:
                    ranked[str(rung.epoch)] = {
                        "rank": rank,
                        "mean_loss": entry["mean_loss"],
                        "continued": identifier in rung.past_ids,
                    }
        if stopped is not None:
            outcome = f"stopped at epoch {stopped}"
        else:
            outcome = (
                FINISHED if fate is None and all(f"{RUNS}/{run}" in campaign.results for run in runs) else TRAINING
            )
        points.append(
            {
                "point": identifier,
                "lr": lr,
                "beta2": beta2,
                "runs": runs,
                "outcome": outcome,
                "stopped_at": stopped,
                "rungs": ranked,
            }
        )
    plan = halving.plans[bracket.base]
    return {
        "bracket": bracket.name,
        "epochs": plan.epochs,
        "rungs": rungs,
        "points": points,
        "hours": _hours(campaign, [run.id for run in bracket.runs()], plan.epochs),
    }


def _hours(campaign: CampaignResults, runs: list[str], epochs: int) -> dict[str, Any]:
    """Training hours the bracket's runs recorded, and the full grid's estimate: every epoch a run
    did not train at the bracket's mean for that epoch (None while no run has trained it)."""
    trained = [
        [(record["epoch"], record.get("wall_s", 0.0)) for record in campaign.epochs(f"{RUNS}/{run}")] for run in runs
    ]
    by_epoch: dict[int, list[float]] = {}
    for walls in trained:
        for epoch, wall in walls:
            by_epoch.setdefault(epoch, []).append(wall)
    means = {epoch: sum(walls) / len(walls) for epoch, walls in by_epoch.items()}
    used = sum(wall for walls in trained for _epoch, wall in walls)
    done = [{epoch for epoch, _wall in walls} for walls in trained]
    missing = [epoch for epochs_done in done for epoch in range(1, epochs + 1) if epoch not in epochs_done]
    full = None if any(epoch not in means for epoch in missing) else used + sum(means[epoch] for epoch in missing)
    return _share([{"used_s": used, "full_grid_s": full, "epochs_not_trained": len(missing)}])


def _share(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum of `parts`, in seconds and hours, with the share of the full grid used."""
    used = sum(part["used_s"] for part in parts)
    full = None if any(part["full_grid_s"] is None for part in parts) else sum(part["full_grid_s"] for part in parts)
    return {
        "used_s": used,
        "full_grid_s": full,
        "epochs_not_trained": sum(part["epochs_not_trained"] for part in parts),
        "used_hours": used / 3600,
        "full_grid_hours": None if full is None else full / 3600,
        "share": used / full if full else None,
    }
