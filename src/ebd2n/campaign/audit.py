"""Audit a campaign: prove that every result is complete, comparable and untouched.

Each check has a name, a scope (how many things it looked at) and its violations. The artifact
ledger (`audit-ledger.json`, never a workflow output, so a failed audit cannot lose it) records
the SHA-256 of every audited run's artifacts; a later audit, after an extension, fails if any of
them changed or disappeared.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ebd2n.atomic import atomic_write_text, sha256_file
from ebd2n.campaign.analysis import group_runs, load_runs, select
from ebd2n.campaign.collect import CAMPAIGN_JSON
from ebd2n.campaign.freeze import SOURCE_HASH
from ebd2n.campaign.resolve import run_recipe
from ebd2n.campaign.runs import Run, frozen_base, frozen_dir
from ebd2n.config import Recipe, load_recipe
from ebd2n.data import open_cache
from ebd2n.errors import UserError
from ebd2n.train.checkpoint import read_ledger

AUDIT_JSON = "audit.json"
LEDGER = "audit-ledger.json"
TRACKED = ("recipe.yaml", "final.pt", "best.json", "results.json")
"""Run artifacts whose bytes must never change once audited."""
_TOLERANCE = 1e-12


@dataclass
class Check:
    """One audit check: what it covers and what it found wrong."""

    name: str
    scope: str
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations


@dataclass
class _RunView:
    """What the checks read of one run directory (hashes computed once)."""

    run: Run
    directory: Path
    recipe: Recipe | None
    results: dict | None
    hashes: dict[str, str]


def audit_campaign(campaign_dir: str | Path) -> dict:
    """Run every check, write audit.json and the ledger, return the audit record."""
    campaign_dir = Path(campaign_dir)
    info = _read_json(campaign_dir / CAMPAIGN_JSON, "run the workflow's collect step (or `ebd2n collect`) first")
    frozen_hash = (frozen_dir(campaign_dir) / SOURCE_HASH).read_text().strip()
    expected = _grid_runs(info)
    views = [_view(campaign_dir / "runs" / run.id, run) for run in expected if (campaign_dir / "runs" / run.id).is_dir()]
    previous = _read_json(campaign_dir / LEDGER, None) if (campaign_dir / LEDGER).exists() else {}
    checks = [
        _check_grid(expected, views),
        _check_validation(info, views),
        _check_recipes(campaign_dir, views),
        _check_trainer(frozen_hash, views),
        _check_retention(views),
        _check_best(views),
        _check_checkpoint_hashes(views),
        _check_statistics(campaign_dir, views, info["seeds"]),
        _check_ledger(previous, views),
    ]
    ledger = {**{v.run.id: v.hashes for v in views if v.results is not None}, **previous}
    record = {
        "campaign": info.get("campaign", campaign_dir.name),
        "audited_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "passed": all(check.passed for check in checks),
        "runs": len(views),
        "checks": [{"name": c.name, "scope": c.scope, "passed": c.passed, "violations": c.violations} for c in checks],
        "artifacts": ledger,
    }
    atomic_write_text(campaign_dir / LEDGER, json.dumps(ledger, indent=2, sort_keys=True) + "\n")
    atomic_write_text(campaign_dir / AUDIT_JSON, json.dumps(record, indent=2) + "\n")
    return record


def violations(record: dict) -> list[str]:
    """Every violation of an audit record, prefixed by its check."""
    return [f"{check['name']}: {v}" for check in record["checks"] for v in check["violations"]]


def _read_json(path: Path, hint: str | None) -> dict:
    if not path.is_file():
        raise UserError(f"{path}: missing" + (f"; {hint}" if hint else ""))
    return json.loads(path.read_text(encoding="utf-8"))


def _grid_runs(info: dict) -> list[Run]:
    grid = info["grid"]
    presets = grid.get("presets") or [None]
    return [
        Run(preset, mode, lr, beta2, seed)
        for preset in presets for mode in grid["modes"] for lr in grid["learning_rates"][mode]
        for beta2 in grid["beta2"] for seed in info["seeds"]
    ]


def _view(directory: Path, run: Run) -> _RunView:
    results_path = directory / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else None
    recipe = load_recipe(directory / "recipe.yaml") if (directory / "recipe.yaml").is_file() else None
    hashes = {name: sha256_file(directory / name) for name in TRACKED if (directory / name).is_file()}
    return _RunView(run, directory, recipe, results, hashes)


def _each(views: list[_RunView], name: str, scope: str, problem: Callable[[_RunView], str | None]) -> Check:
    check = Check(name, scope)
    check.violations = [f"{v.run.id}: {p}" for v in views if (p := problem(v))]
    return check


def _check_grid(expected: list[Run], views: list[_RunView]) -> Check:
    done = {v.run.id for v in views if v.results is not None}
    check = Check("every grid point has every seed", f"{len(expected)} runs")
    check.violations = [f"{run.id}: no finished run" for run in expected if run.id not in done]
    return check


def _check_validation(info: dict, views: list[_RunView]) -> Check:
    caches = info.get("cache_identities") or []
    targets: dict[str, int | None] = {}

    def problem(view: _RunView) -> str | None:
        results = view.results
        if results is None or view.recipe is None:
            return None  # reported by the grid and recipe checks
        if results.get("status") != "complete" or not math.isfinite(float(results.get("loss", "nan"))):
            return "full validation incomplete"
        if len(caches) != 1 or results.get("cache_identity") != caches[0]:
            return f"cache identity {str(results.get('cache_identity'))[:12]}… is not the campaign's single cache"
        cache_dir = view.recipe.data.cache_dir
        if cache_dir not in targets:  # every run of a campaign shares one cache: read it once
            targets[cache_dir] = _cache_targets(cache_dir)
        expected = targets[cache_dir]
        if results.get("targets") != expected:
            return f"{results.get('targets')} validation targets, the cache has {expected}"
        return None

    return _each(views, "complete full validation on the campaign cache", f"{len(views)} runs", problem)


def _cache_targets(cache_dir: str) -> int | None:
    try:
        return open_cache(cache_dir).validation_targets
    except UserError:
        return None


def _check_recipes(campaign_dir: Path, views: list[_RunView]) -> Check:
    bases: dict[str, Recipe] = {}

    def problem(view: _RunView) -> str | None:
        if view.recipe is None:
            return "recipe.yaml missing"
        if view.run.base not in bases:
            bases[view.run.base] = load_recipe(frozen_base(campaign_dir, view.run.base))
        expected = run_recipe(bases[view.run.base], view.run, view.recipe.runtime.output_dir)
        diff = _differences(expected.model_dump(mode="json"), view.recipe.model_dump(mode="json"))
        return f"recipe differs from the frozen base outside the grid axes: {', '.join(diff)}" if diff else None

    return _each(views, "recipes equal the frozen base except grid axes, seed and paths", f"{len(views)} runs", problem)


def _differences(expected: dict, actual: dict, prefix: str = "") -> list[str]:
    keys = sorted(set(expected) | set(actual))
    out = []
    for key in keys:
        a, b = expected.get(key), actual.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def _check_trainer(frozen_hash: str, views: list[_RunView]) -> Check:
    def problem(view: _RunView) -> str | None:
        used = (view.results or {}).get("source_hash")
        return None if view.results is None or used == frozen_hash else f"trained by source {str(used)[:12]}…, not the frozen trainer"

    return _each(views, "every run used the frozen trainer", f"{len(views)} runs", problem)


def _check_retention(views: list[_RunView]) -> Check:
    def problem(view: _RunView) -> str | None:
        if view.recipe is None or view.recipe.training.checkpoint_policy != "final":
            return None
        files = sorted(p.relative_to(view.directory).as_posix() for p in view.directory.rglob("*.pt"))
        return None if files == ["final.pt"] else f"checkpoint files {files}, expected exactly ['final.pt']"

    return _each(views, "exactly one final.pt under the final policy", f"{len(views)} runs", problem)


def _check_best(views: list[_RunView]) -> Check:
    def problem(view: _RunView) -> str | None:
        path = view.directory / "best.json"
        if not path.is_file():
            return "best.json missing"
        policy = view.recipe.training.checkpoint_policy if view.recipe else "final"
        weights = json.loads(path.read_text()).get("weights")
        return None if policy != "final" or weights is None else f"best.json holds weights ({weights!r}) under the final policy"

    return _each(views, "best.json has weights: null under the final policy", f"{len(views)} runs", problem)


def _check_checkpoint_hashes(views: list[_RunView]) -> Check:
    def problem(view: _RunView) -> str | None:
        recorded = read_ledger(view.directory).get("final.pt")
        actual = view.hashes.get("final.pt")
        if actual is None:
            return "final.pt missing"
        return None if recorded == actual else "final.pt does not match its recorded SHA-256 (altered or replaced)"

    return _each(views, "checkpoints match their recorded hashes", f"{len(views)} runs", problem)


def _check_statistics(campaign_dir: Path, views: list[_RunView], seeds: list[int]) -> Check:
    """The stored report's groups and selections equal a recomputation from the runs it covers."""
    report = campaign_dir / "report"
    check = Check("stored means, SDs, ranks and selections equal a recomputation", "no stored report yet")
    if not (report / "groups.csv").is_file():
        return check
    stored_runs = load_runs(report / "runs.csv")
    losses = {v.run.id: v.results["loss"] for v in views if v.results}
    for row in stored_runs.filter(pl.col("status") == "complete").iter_rows(named=True):
        if row["run"] not in losses or abs(losses[row["run"]] - row["loss"]) > _TOLERANCE:
            check.violations.append(f"report/runs.csv: loss of {row['run']} differs from its results.json")
    groups = group_runs(stored_runs, seeds)
    stored = pl.read_csv(report / "groups.csv")
    check.scope = f"{stored.height} stored groups"
    check.violations += _compare_groups(groups, stored)
    selection_path = report / "selection.json"
    if selection_path.is_file():
        stored_selection = json.loads(selection_path.read_text())
        for mode, winner in select(groups).items():
            kept = stored_selection.get(mode, {})
            if (kept.get("lr"), kept.get("beta2")) != (winner["lr"], winner["beta2"]):
                check.violations.append(f"report/selection.json: {mode} winner is not lr {winner['lr']} beta2 {winner['beta2']}")
    return check


def _compare_groups(recomputed: pl.DataFrame, stored: pl.DataFrame) -> list[str]:
    keys = ["mode", "lr", "beta2"]
    joined = recomputed.join(stored, on=keys, how="full", suffix="_stored", coalesce=True)
    problems = []
    for row in joined.iter_rows(named=True):
        where = f"report/groups.csv {row['mode']} lr {row['lr']} beta2 {row['beta2']}"
        for column in ("mean_loss", "std_loss"):
            a, b = row[column], row[f"{column}_stored"]
            if (a is None) != (b is None) or (a is not None and abs(a - b) > _TOLERANCE):
                problems.append(f"{where}: stored {column} {b} != recomputed {a}")
        if row["rank"] != row["rank_stored"]:
            problems.append(f"{where}: stored rank {row['rank_stored']} != recomputed {row['rank']}")
    return problems


def _check_ledger(previous: dict[str, dict[str, str]], views: list[_RunView]) -> Check:
    current = {v.run.id: v.hashes for v in views}
    check = Check("previously audited artifacts unchanged", f"{sum(len(h) for h in previous.values())} artifacts")
    for run_id, hashes in sorted(previous.items()):
        for name, digest in sorted(hashes.items()):
            now = current.get(run_id, {}).get(name)
            if now is None:
                check.violations.append(f"{run_id}/{name}: disappeared since the last audit")
            elif now != digest:
                check.violations.append(f"{run_id}/{name}: changed since the last audit")
    return check
