"""Collect a campaign: one table row per finished run, and the campaign's record (campaign.json)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.freeze import SOURCE_HASH
from ebd2n.campaign.runs import frozen_base, frozen_dir, parse_run_id
from ebd2n.campaign.spec import RECORD, Campaign, current_bases
from ebd2n.config import recipe_identity

RUNS_CSV = "runs.csv"
CAMPAIGN_JSON = "campaign.json"
COLUMNS = (
    "run", "preset", "mode", "lr", "beta2", "seed", "status", "loss", "perplexity", "accuracy", "targets",
    "tokens", "recipe_identity", "cache_identity", "source_hash", "job_ids",
)
"""runs.csv columns; the first seven are what `ebd2n.campaign.analysis.load_runs` needs."""


def collect_campaign(campaign: Campaign) -> Path:
    """Write results/<campaign>/runs.csv over every run with a results.json, and campaign.json."""
    directory = campaign.directory
    finished = [json.loads(path.read_text(encoding="utf-8")) for path in (directory / "runs").glob("*/results.json")]
    finished.sort(key=lambda result: _order(result["run"]))
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for result in finished:
        row = {column: result.get(column) for column in COLUMNS}
        row["preset"] = parse_run_id(result["run"]).preset or ""
        row["job_ids"] = " ".join(result.get("job_ids", []))
        writer.writerow(row)
    atomic_write_text(directory / RUNS_CSV, table.getvalue())
    atomic_write_text(directory / CAMPAIGN_JSON, json.dumps(_record(campaign, finished), indent=2) + "\n")
    return directory / RUNS_CSV


def _record(campaign: Campaign, finished: list[dict]) -> dict:
    """Resolved grid, seeds, frozen trainer hash, base recipe identities, when it started."""
    frozen = frozen_dir(campaign.directory)
    freeze = json.loads((frozen / RECORD).read_text(encoding="utf-8"))
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
        "source_hash": (frozen / SOURCE_HASH).read_text(encoding="utf-8").strip(),
        "cache_identities": caches,
        "base_recipes": {
            base: {"path": frozen_base(campaign.directory, base).as_posix(), "identity": recipe_identity(recipe, cache)}
            for base, recipe in current_bases(campaign).items()
        },
        "created": freeze["created"],
    }


def _order(run_id: str) -> tuple:
    run = parse_run_id(run_id)
    return (run.preset or "", run.mode, run.lr, run.beta2, run.seed)
