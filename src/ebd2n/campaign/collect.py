"""Collect a campaign: its record (campaign.json) and its runs table (runs.csv), both rewritten
from disk whenever a run's full validation changes."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.results import RUN_COLUMNS, read_results, run_directories
from ebd2n.campaign.spec import Campaign, current_bases
from ebd2n.campaign.status import campaign_plan
from ebd2n.config import recipe_identity
from ebd2n.layout import RESULTS_JSON
from ebd2n.signing.keys import signing_record


def collect_campaign(campaign: Campaign, max_jobs: int | None = None) -> Path:
    """Write results/<campaign>/campaign.json, then runs.csv (the runs table every reader shares);
    `max_jobs` is how many jobs the orchestrator ran at once (None: not known)."""
    paths = campaign.paths
    finished = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(paths.runs.glob(f"*/{RESULTS_JSON}"))]
    record = {
        **campaign_record(campaign, finished),
        "execution": campaign.execution_record(max_jobs),
        "plan": campaign_plan(campaign),  # what the report's costs are priced from
    }
    atomic_write_text(paths.campaign_json, json.dumps(record, indent=2) + "\n")
    runs = read_results(paths.directory).runs if run_directories(paths) else pl.DataFrame(schema=RUN_COLUMNS)
    atomic_write_text(paths.runs_csv, runs.write_csv())
    return paths.runs_csv


def campaign_record(campaign: Campaign, finished: list[dict]) -> dict:
    """Resolved grid, seeds, frozen trainer hash, base recipe identities, when it started."""
    paths = campaign.paths
    freeze = json.loads(paths.freeze_record.read_text(encoding="utf-8"))
    caches = sorted({result["cache_identity"] for result in finished})
    cache = caches[0] if len(caches) == 1 else None
    return {
        "campaign": campaign.name,
        "description": campaign.description,
        "grid": {
            "presets": list(campaign.presets) if campaign.presets else None,
            "modes": list(campaign.modes),
            "learning_rates": {mode: list(lrs) for mode, lrs in campaign.learning_rates.items()},
            "beta2": list(campaign.beta2),
        },
        "seeds": list(campaign.seeds),
        "runs_planned": len(campaign.runs()),
        "runs_finished": len(finished),
        "epochs_per_slice": campaign.epochs_per_slice,
        "checkpoint_policy": campaign.checkpoint_policy,
        "source_hash": paths.source_hash.read_text(encoding="utf-8").strip(),
        "cache_identities": caches,
        "base_recipes": {
            base: {"path": paths.base_recipe(base).as_posix(), "identity": recipe_identity(recipe, cache)}
            for base, recipe in current_bases(campaign).items()
        },
        "created": freeze["created"],
        "signing": signing_record(campaign.signing_key),  # the key the passing audit signs with; the report names its id
    }
