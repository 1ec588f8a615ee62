"""Confirmation on fresh seeds (the campaign key `confirm: {top, seeds}`).

The seeds that choose a winner also measure it, so the best of many noisy means reads low (the
winner's curse). Once every grid run is validated, the best `top` eligible points of each preset x
mode (mean full-validation loss over the grid's seeds) train again on `seeds`, which no selection
saw, with the same frozen trainer and recipe but for the seed, through the same slices, validation
and audit. The selection is a Snakemake checkpoint like a rung decision: named by what it is made
from (the grid's run ids, `top` and the seeds), written once, and kept when a grid extension makes
another: the record of what was confirmed when. ebd2n.campaign.confirm_select writes it,
ebd2n.campaign.verdict reads the runs it asks for.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ebd2n.campaign.grid import Grid
from ebd2n.campaign.runs import Run, parse_run_id
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths
from ebd2n.outcomes import Outcome


@dataclass(frozen=True)
class Confirm:
    """The campaign file's `confirm`: how many points per preset x mode, on which fresh seeds."""

    top: int
    seeds: tuple[int, ...]


def selection_digest(candidates: list[Run], confirm: Confirm) -> str:
    """Names a selection by what it is made from: the run ids it ranks, `top` and the seeds."""
    inputs = {"runs": sorted(run.id for run in candidates), "top": confirm.top, "seeds": sorted(confirm.seeds)}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def selection_path(paths: CampaignPaths, grid: Grid, confirm: Confirm) -> Path:
    """The selection file the grid and `confirm` ask for."""
    return paths.confirm_selection(selection_digest(grid.runs(), confirm))


def point_of(run: Run) -> str:
    """A grid point as its run ids spell it, without the seed."""
    return run.id.removesuffix(f"-seed{run.seed}")


def select_points(
    candidates: list[Run], confirm: Confirm, results: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, Any]:
    """The selection from the candidate (grid) runs' results (run id -> results.json, None where
    absent): per preset x mode its best `top` eligible points (every seed complete with a finite
    loss), ranked by mean loss, then lower LR, then run id; each with the confirmation runs it asks for."""
    groups: dict[tuple[str, str], dict[str, list[Run]]] = {}
    for run in candidates:
        groups.setdefault((run.scope, run.mode), {}).setdefault(point_of(run), []).append(run)
    selected = []
    for (scope, mode), points in groups.items():
        ranked = []
        for point, runs in points.items():
            losses = {run.id: _loss(results.get(run.id)) for run in runs}
            if all(loss is not None for loss in losses.values()):
                mean = sum(losses.values()) / len(losses)
                ranked.append({"point": point, "lr": runs[0].lr, "mean_loss": mean, "losses": losses})
        ranked.sort(key=lambda entry: (entry["mean_loss"], entry["lr"], entry["point"]))
        chosen = []
        for rank, entry in enumerate(ranked[: confirm.top], start=1):
            template = points[entry["point"]][0]
            runs = [replace(template, seed=seed).id for seed in confirm.seeds]
            chosen.append({**entry, "rank": rank, "confirmation": runs})
        selected.append({"scope": scope, "mode": mode, "eligible": len(ranked), "points": chosen})
    return {
        "digest": selection_digest(candidates, confirm),
        "top": confirm.top,
        "seeds": list(confirm.seeds),
        "candidates": [run.id for run in candidates],  # in the grid's order, which the ranking keeps
        "groups": selected,
        "runs": [run for group in selected for point in group["points"] for run in point["confirmation"]],
    }


def _loss(results: Mapping[str, Any] | None) -> float | None:
    """A complete run's finite full-validation loss; None for every other run."""
    if not results or results.get("status") != Outcome.COMPLETE:
        return None
    loss = results.get("loss")
    return float(loss) if isinstance(loss, (int, float)) and math.isfinite(loss) else None


def read_selection(path: Path) -> dict[str, Any] | None:
    """A selection file, None when absent; one of another shape is a user error naming it."""
    selection = read_json(path)
    if selection is None:
        return None
    shaped = isinstance(selection, dict) and isinstance(selection.get("groups"), list)
    shaped = shaped and isinstance(selection.get("runs"), list) and all(isinstance(r, str) for r in selection["runs"])
    if not shaped:
        raise UserError(f"{path}: not a confirmation selection (ebd2n.campaign.confirmation)")
    return selection


def confirmation_runs(selection: Mapping[str, Any]) -> list[Run]:
    """The runs a selection asks for."""
    return [parse_run_id(run_id) for run_id in selection["runs"]]
