"""Read a campaign directory: its runs' results, the grid, the cache manifest and the audit.

A report is a pure function of what the workflow left in `results/<campaign>`, so `ebd2n report`
can redo it at any time without training. Recipes and metrics are read only for the runs a report
shows in detail (winners, one run per mode, scaling points), which keeps large campaigns fast.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from ebd2n.campaign.analysis import RUN_FIELDS
from ebd2n.campaign.runs import parse_run_id
from ebd2n.config import Recipe, load_recipe
from ebd2n.errors import UserError

RUN_COLUMNS: dict[str, type[pl.DataType]] = {
    **RUN_FIELDS,
    "perplexity": pl.Float64,
    "accuracy": pl.Float64,
    "tokens": pl.Int64,
    "directory": pl.String,
    "recipe_identity": pl.String,
    "job_ids": pl.String,
}
"""Columns of runs.csv; `directory` is relative to the campaign, `job_ids` space-separated."""


@dataclass(frozen=True)
class Campaign:
    """Everything the report needs from disk, with the grid resolved."""

    directory: Path
    name: str
    repo_root: Path
    """Where training ran: the campaign sits at `<repo_root>/results/<name>`."""
    info: dict[str, Any] | None
    """campaign.json, or None for a tree built by hand."""
    runs: pl.DataFrame
    """One row per run directory (`RUN_COLUMNS`), in mode, LR, beta2, seed order."""
    results: dict[str, dict[str, Any]]
    """results.json of every complete run, keyed by `directory`."""
    modes: list[str]
    learning_rates: dict[str, list[float]]
    beta2: list[float]
    seeds: list[int]
    presets: dict[str, str]
    """Model size of each run (by `directory`) in a scaling campaign; empty otherwise."""
    manifest: dict[str, Any] | None
    manifest_path: Path
    audit: dict[str, Any] | None
    measured_date: str | None
    """UTC date the last full validation was written (results.json modification time)."""

    def recipe(self, directory: str) -> Recipe:
        """The resolved recipe of one run."""
        return _recipe(self.directory / directory / "recipe.yaml")

    def epochs(self, directory: str) -> list[dict[str, Any]]:
        """The per-epoch records of one run's metrics.jsonl, in epoch order."""
        return _epoch_records(self.directory / directory / "metrics.jsonl")


def load_campaign(directory: Path) -> Campaign:
    """Read `results/<campaign>`; a directory without runs is a user error naming what to do."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: no such campaign directory; pass results/<campaign>")
    run_dirs = sorted(
        p for p in (directory / "runs").glob("*") if (p / "results.json").is_file() or (p / "recipe.yaml").is_file()
    )
    if not run_dirs:
        raise UserError(f"{directory}: no runs/*/results.json or recipe.yaml; run the campaign first")
    info = _read_json(directory / "campaign.json")
    results = {f"runs/{p.name}": _read_json(p / "results.json") for p in run_dirs}
    rows = [_row(directory, p, results[f"runs/{p.name}"]) for p in run_dirs]
    complete = {key: value for key, value in results.items() if value is not None}
    modes, learning_rates, beta2 = _grid(info, rows)
    order = {mode: index for index, mode in enumerate(modes)}
    runs = pl.DataFrame(rows, schema=RUN_COLUMNS).sort(
        [pl.col("mode").replace_strict(order, return_dtype=pl.Int64), "lr", "beta2", "seed", "run"]
    )
    seeds = sorted(info["seeds"]) if info and info.get("seeds") else sorted(set(runs["seed"].to_list()))
    repo_root = directory.resolve().parent.parent
    manifest_path = _manifest_path(directory, runs["directory"][0], repo_root)
    return Campaign(
        directory=directory,
        name=str((info or {}).get("name") or (info or {}).get("campaign") or directory.name),
        repo_root=repo_root,
        info=info,
        runs=runs,
        results=complete,
        modes=modes,
        learning_rates=learning_rates,
        beta2=beta2,
        seeds=seeds,
        presets=_presets(info, [p.name for p in run_dirs]),
        manifest=_read_json(manifest_path),
        manifest_path=manifest_path,
        audit=_read_json(directory / "audit.json"),
        measured_date=_measured_date(directory, complete),
    )


def _mode_key(mode: str) -> tuple[int, int, str]:
    """synchronous first, then packed-K by K, then anything else by name."""
    if mode == "synchronous":
        return (0, 0, mode)
    match = re.fullmatch(r"packed-(\d+)", mode)
    return (1, int(match[1]), mode) if match else (2, 0, mode)


def _row(campaign: Path, run_dir: Path, results: dict[str, Any] | None) -> dict[str, Any]:
    """runs.csv row; a run without results.json is listed as incomplete from its recipe."""
    directory = run_dir.relative_to(campaign).as_posix()
    if results is None:
        recipe = _recipe(run_dir / "recipe.yaml")
        point = {"mode": recipe.mode, "lr": recipe.optimizer.lr, "beta2": recipe.optimizer.beta2, "seed": recipe.runtime.seed}
        return {"run": run_dir.name, **point, "status": "incomplete", "directory": directory, "job_ids": ""}
    missing = [key for key in ("mode", "lr", "beta2", "seed", "status") if key not in results]
    if missing:
        raise UserError(f"{run_dir / 'results.json'}: missing {', '.join(missing)}; re-run `ebd2n validate {run_dir}`")
    row = {key: results.get(key) for key in RUN_COLUMNS if key not in ("directory", "job_ids")}
    row["run"] = str(results.get("run") or run_dir.name)
    row["directory"] = directory
    row["job_ids"] = " ".join(str(job) for job in results.get("job_ids") or [])
    return row


def _grid(info: dict[str, Any] | None, rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, list[float]], list[float]]:
    """The searched grid: campaign.json's when present, widened by whatever the runs hold."""
    grid = (info or {}).get("grid") or {}
    modes = list(grid.get("modes") or [])
    modes += sorted({row["mode"] for row in rows} - set(modes), key=_mode_key)
    declared = grid.get("learning_rates") or {}
    learning_rates = {
        mode: sorted(set(declared.get(mode, [])) | {row["lr"] for row in rows if row["mode"] == mode})
        for mode in modes
    }
    beta2 = sorted(set(grid.get("beta2") or []) | {row["beta2"] for row in rows})
    return modes, learning_rates, beta2


def _presets(info: dict[str, Any] | None, run_ids: list[str]) -> dict[str, str]:
    """Model size of each run of a scaling campaign (grid.presets declared, or run ids carry a preset)."""
    declared = bool(((info or {}).get("grid") or {}).get("presets"))
    sizes = {f"runs/{run_id}": preset for run_id in run_ids if (preset := _preset(run_id))}
    return sizes if sizes and (declared or len(sizes) == len(run_ids)) else {}


def _preset(run_id: str) -> str | None:
    """The preset prefix of a canonical run id (`254m-synchronous-lr...`); None for other ids."""
    try:
        return parse_run_id(run_id).preset
    except UserError:
        return None


def _manifest_path(campaign: Path, directory: str, repo_root: Path) -> Path:
    """The cache manifest named by the first run's recipe; a relative cache_dir is relative to the repository."""
    cache_dir = Path(_recipe(campaign / directory / "recipe.yaml").data.cache_dir)
    return (cache_dir if cache_dir.is_absolute() else repo_root / cache_dir) / "manifest.json"


def _measured_date(campaign: Path, results: dict[str, dict[str, Any]]) -> str | None:
    stamps = [(campaign / directory / "results.json").stat().st_mtime for directory in results]
    return datetime.fromtimestamp(max(stamps), tz=UTC).date().isoformat() if stamps else None


def _read_json(path: Path) -> Any:
    """A JSON file's content, None when absent; a corrupt file is a user error naming it."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: cannot read JSON ({error})") from error


def _recipe(path: Path) -> Recipe:
    if not path.is_file():
        raise UserError(f"{path}: missing; every run directory keeps its resolved recipe.yaml")
    return load_recipe(path)


def _epoch_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{path}:{number}: not a JSON record ({error})") from error
        if record.get("type") == "epoch":
            records.append(record)
    return sorted(records, key=lambda record: record["epoch"])
