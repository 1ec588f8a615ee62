"""Collect a campaign: its record (campaign.json) and its runs table (runs.csv), both rewritten
from disk whenever a run's full validation changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.file import Campaign
from ebd2n.campaign.history import GridHistory, record_grid
from ebd2n.campaign.plans import campaign_plans, recorded_search
from ebd2n.campaign.results import RUN_COLUMNS, read_results, run_directories
from ebd2n.campaign.status_plan import campaign_plan
from ebd2n.config import load_recipe, recipe_identity
from ebd2n.jsonio import read_json
from ebd2n.layout import RESULTS_JSON, CampaignPaths
from ebd2n.outcomes import Outcome
from ebd2n.signing.keys import signing_record


def collect_campaign(campaign: Campaign, max_jobs: int | None = None) -> Path:
    """Record the campaign's grid (frozen/spec/), then write results/<campaign>/campaign.json
    and runs.csv (the runs table every reader shares); `max_jobs` is how many jobs the orchestrator
    ran at once (None: not known)."""
    paths = campaign.paths
    history = record_grid(paths, campaign.name, campaign.description, campaign.grid)
    record = {
        **campaign_record(paths, history),
        "execution": campaign.execution_record(max_jobs),
        "plan": campaign_plan(campaign, campaign_plans(campaign)),  # what the report's costs are priced from
        "signing": signing_record(
            campaign.signing_key
        ),  # the key the passing audit signs with; the report names its id
    }
    atomic_write_text(paths.campaign_json, json.dumps(record, indent=2) + "\n")
    runs = read_results(paths.directory).runs if run_directories(paths) else pl.DataFrame(schema=RUN_COLUMNS)
    atomic_write_text(paths.runs_csv, runs.write_csv())
    return paths.runs_csv


def campaign_record(paths: CampaignPaths, history: GridHistory) -> dict:
    """Resolved grid, seeds, frozen trainer hash, base recipe identities, when it started: from the
    campaign's sources alone (frozen/ and the runs), so the audit recomputes it and compares."""
    freeze = read_json(paths.freeze_record) or {}
    settings = freeze.get("settings") or {}
    finished = [read_json(path) for path in sorted(paths.runs.glob(f"*/{RESULTS_JSON}"))]
    caches = sorted({str(result.get("cache_identity")) for result in finished if isinstance(result, dict)})
    cache = caches[0] if len(caches) == 1 else None
    grid = history.grid
    halving = recorded_search(paths, grid)
    spec = history.record()
    return {
        "campaign": spec["campaign"],
        "description": spec["description"],
        "grid": spec["grid"],
        "seeds": spec["seeds"],
        "runs_planned": len(history.active.runs()),
        "runs_finished": len(finished),
        "epochs_per_slice": settings.get("epochs_per_slice"),
        "checkpoint_policy": settings.get("checkpoint_policy"),
        **({"checkpoint_epochs": epochs} if (epochs := settings.get("checkpoint_epochs")) is not None else {}),
        "source_hash": paths.source_hash.read_text(encoding="utf-8").strip() if paths.source_hash.is_file() else None,
        "cache_identities": caches,
        "base_recipes": {base: _base_record(paths, base, cache) for base in grid.bases},
        "created": freeze.get("created"),
        **({"search": halving.record()} if halving else {}),  # successive halving: each rung's decision
        **(
            {Outcome.RETIRED: [run.id for run in retired]} if (retired := history.retired()) else {}
        ),  # kept, not selected
    }


def _base_record(paths: CampaignPaths, base: str, cache: str | None) -> dict:
    path = paths.base_recipe(base)
    return {
        "path": paths.relative(os.path.abspath(path)),
        "identity": recipe_identity(load_recipe(path), cache) if path.is_file() else None,
    }
