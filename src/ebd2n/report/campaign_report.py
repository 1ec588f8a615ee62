"""The campaign report: every table, figure, selected recipe and the HTML page, from disk alone.

`build_report` reads `results/<campaign>` and rewrites `results/<campaign>/report/`. It trains
nothing, so it can be rerun after an extension or a change of the report code. Outputs hold no
wall-clock timestamps, so regenerating an unchanged campaign gives byte-identical files: the
audit verifies a published report by building it again elsewhere and comparing the bytes, and a
rebuild that changes nothing leaves the published files as they are. A report that does change
moves its predecessor to `report/history/<UTC time>/`.
"""

from __future__ import annotations

import filecmp
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from ebd2n.atomic import atomic_write_bytes, atomic_write_text, pid_alive, serialized
from ebd2n.campaign.analysis import DIVERGED, RETIRED, group_runs, lr_response, select, winner_notes, write_selection
from ebd2n.campaign.extend import extension_history
from ebd2n.campaign.optimum import lr_optima, optimum_panels
from ebd2n.campaign.results import CampaignResults, read_results
from ebd2n.config import Recipe, dump_recipe
from ebd2n.layout import (
    BRACKETS_CSV,
    CURVES_CSV,
    HISTORY,
    LR_RESPONSE_CSV,
    REPORT,
    REPORT_ASSETS,
    REPORT_INDEX,
    REPORT_RESULTS,
    RUNS,
    RUNS_CSV,
    SCALING_CSV,
    CampaignPaths,
    selected_recipe,
)
from ebd2n.report import figures
from ebd2n.report.cost import campaign_cost
from ebd2n.report.explore import explore
from ebd2n.report.halving import bracket_table, halving_outputs, report_halving, stopped_at
from ebd2n.report.page import render_page
from ebd2n.report.plotly_embed import shared_plotly
from ebd2n.report.store import write_store
from ebd2n.report.tables import curve_table, data_facts, point_runs, response_beta2, scaling_rows, settings

SELECTION_RULE = {
    "selection": "lowest mean final full-validation cross-entropy (nats) over seeds, separately per mode",
    "uncertainty": "sample standard deviation across seeds (ddof = 1), not a confidence interval",
    "tie_break": "lower learning rate, then lower beta2; only points with every seed are eligible",
}


def build_report(campaign_dir: Path, out: Path | None = None, info: dict[str, Any] | None = None) -> Path:
    """Write the report into `out`, or publish it as the campaign's report/; return its index.html.
    `info` stands in for campaign.json (the audit's recomputation)."""
    campaign = read_results(Path(campaign_dir), info)
    if out is not None:
        return _write_report(campaign, Path(out))
    published = campaign.directory / REPORT
    _remove_killed_stagings(campaign.directory)
    with tempfile.TemporaryDirectory(prefix=f"{_STAGING}{os.getpid()}-", dir=campaign.directory) as staging:
        _write_report(campaign, Path(staging))
        with serialized(campaign.directory):  # two report jobs at once (two controllers): one publishes, one finds it
            _publish(Path(staging), published)
    return published / REPORT_INDEX


_STAGING = ".report-"
"""Where a report is built before it is published: `.report-<pid>-<random>` in the campaign directory."""


def _remove_killed_stagings(directory: Path) -> None:
    """Staging folders of report builds whose process is gone (killed before it cleaned up)."""
    for path in directory.glob(f"{_STAGING}*"):
        pid = path.name.removeprefix(_STAGING).split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _write_report(campaign: CampaignResults, out: Path) -> Path:
    atomic_write_text(out / RUNS_CSV, campaign.runs.write_csv())
    explored = explore(campaign, write_store(campaign, out))
    shared_plotly(out)  # every run dashboard loads it, even where this page draws no figure
    cost = campaign_cost(campaign)
    halving = _halving_outputs(campaign, out)
    search = {"search": halving} if halving is not None else {}  # a grid campaign's results.json as before
    if campaign.presets:
        scaling = scaling_rows(campaign)
        atomic_write_text(out / SCALING_CSV, _scaling_frame(scaling).write_csv())
        summary = _summary(campaign, {}, halving)
        _write_json(
            out / REPORT_RESULTS,
            {**summary, "scaling": scaling, **search, "cost": cost, "runs": _run_records(campaign)},
        )
        page = render_page(campaign, summary, cost, scaling=scaling, halving=halving, explore=explored)
    else:
        grid = _grid_outputs(campaign, out)
        summary = _summary(campaign, grid["selection"], halving)
        _write_json(
            out / REPORT_RESULTS, {**summary, **grid["json"], **search, "cost": cost, "runs": _run_records(campaign)}
        )
        page = render_page(campaign, summary, cost, grid=grid, halving=halving, explore=explored)
    atomic_write_text(out / REPORT_INDEX, page)
    return out / REPORT_INDEX


def report_files(directory: Path) -> set[str]:
    """Every file of a report directory, relative to it, earlier reports (history/) left out."""
    if not directory.is_dir():
        return set()
    return {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.relative_to(directory).parts[0] != HISTORY
    }


def _publish(staged: Path, published: Path) -> None:
    """Put a freshly built report in place. Identical to the published one: keep those files (only
    the index's time moves, for Snakemake). Different: the published one moves to history/ first."""
    fresh = report_files(staged)
    if fresh == report_files(published) and all(filecmp.cmp(staged / n, published / n, shallow=False) for n in fresh):
        os.utime(published / REPORT_INDEX)
        return
    # assets/ stays: run pages written earlier load their plotly.js from it
    current = (
        sorted(p.name for p in published.iterdir() if p.name not in (HISTORY, REPORT_ASSETS))
        if published.is_dir()
        else []
    )
    if (published / REPORT_INDEX).exists():  # a report, not only the assets the run pages wrote
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target, suffix = published / HISTORY / stamp, 1
        while target.exists():  # two reports within one second
            target, suffix = published / HISTORY / f"{stamp}-{suffix}", suffix + 1
        target.mkdir(parents=True)
        for name in current:
            (published / name).rename(target / name)
    else:
        for name in current:
            shutil.rmtree(published / name) if (published / name).is_dir() else (published / name).unlink()
    published.mkdir(parents=True, exist_ok=True)
    for entry in staged.iterdir():
        target = published / entry.name
        if entry.name == REPORT_ASSETS and target.is_dir():  # versioned names: add what is missing
            for item in entry.iterdir():
                if not (target / item.name).exists():
                    shutil.move(item, target / item.name)
        else:
            shutil.move(entry, target)


def _grid_outputs(campaign: CampaignResults, out: Path) -> dict[str, Any]:
    """Selection, LR response, curves, heatmaps and selected recipes of an LR x beta2 campaign."""
    groups = group_runs(campaign.runs, campaign.seeds)
    selection = select(groups)
    notes = winner_notes(groups, campaign.runs, campaign.seeds)
    optima = lr_optima(groups, campaign.runs, campaign.seeds)
    panels = optimum_panels(groups, campaign.runs, selection, optima, campaign.seeds)
    write_selection(groups, selection, out, optima)
    beta2 = response_beta2(groups["beta2"].unique().sort().to_list(), selection)
    response = lr_response(groups, beta2)
    atomic_write_text(out / LR_RESPONSE_CSV, response.write_csv())
    curves = curve_table(campaign, selection)
    atomic_write_text(out / CURVES_CSV, curves.write_csv())
    for name, drawn in (
        ("heatmaps", figures.heatmaps(groups, campaign.learning_rates, campaign.beta2, selection)),
        ("curves", figures.curves(curves)),
        ("lr-optimum", figures.lr_optimum(panels)),
    ):
        for fmt, data in drawn.items():
            atomic_write_bytes(out / f"{name}.{fmt}", data)
    selected = {mode: _write_selected(campaign, mode, point, out) for mode, point in selection.items()}
    extensions = extension_history(CampaignPaths(campaign.directory))
    return {
        "groups": groups,
        "selection": selection,
        "notes": notes,
        "optima": optima,
        "optimum_panels": panels,
        "extensions": extensions,
        "response": response,
        "response_beta2": beta2,
        "curves": curves,
        "selected": selected,
        "json": {
            "selected": selection,
            "notes": notes,
            "lr_optima": optima,
            "extensions": extensions,
            "selected_recipes": {mode: entry["file"] for mode, entry in selected.items()},
            "lr_response": {"beta2": beta2, "rows": response.to_dicts()},
            "groups": groups.to_dicts(),
        },
    }


def _halving_outputs(campaign: CampaignResults, out: Path) -> dict[str, Any] | None:
    """A successive-halving campaign's brackets, rung by rung, and its training hours against the
    full grid's (brackets.csv, halving.png/pdf); None for a grid campaign, whose report is as it was."""
    search = report_halving(campaign)
    if search is None:
        return None
    outputs = halving_outputs(campaign, search)
    atomic_write_text(out / BRACKETS_CSV, bracket_table(outputs).write_csv())
    for fmt, data in figures.halving(outputs["brackets"]).items():
        atomic_write_bytes(out / f"halving.{fmt}", data)
    return outputs


def _write_selected(campaign: CampaignResults, mode: str, point: dict[str, Any], out: Path) -> dict[str, Any]:
    """The winner's first-seed recipe with repository-relative paths, ready for `ebd2n train`."""
    runs = point_runs(campaign, point)
    recipe = campaign.recipe(runs["directory"][0]).model_copy(deep=True)
    recipe.data.cache_dir = _repo_relative(recipe.data.cache_dir, campaign)
    recipe.runtime.output_dir = f"{RUNS}/{campaign.directory.name}-selected-{mode}"
    pinned = _pinned_data(campaign, recipe, runs["directory"].to_list())
    recipe.data.revision, recipe.data.tokenizer_revision = pinned["revision"], pinned["tokenizer_revision"]
    name = selected_recipe(mode)
    config = f"{_campaign_path(campaign)}/{REPORT}/{name}"
    seeds = ", ".join(str(seed) for seed in runs["seed"])
    header = (
        f"# Selected {mode} recipe of campaign {_one_line(campaign.name)}: LR {point['lr']:g}, beta2 {point['beta2']:g},\n"
        f"# mean final full-validation loss {point['mean_loss']:.6f} nats over seeds {seeds}.\n"
        f"# Reproduce from the repository root: ebd2n prepare {config}\n"
        f"#   ebd2n train --config {config} --set runtime.seed={recipe.runtime.seed} "
        f"--set runtime.output_dir={recipe.runtime.output_dir}-seed{recipe.runtime.seed}\n"
        f"# Trained on cache identity {pinned['cache_identity']}: {pinned['dataset']} revision {pinned['revision']}, "
        f"tokenizer {pinned['tokenizer']} revision {pinned['tokenizer_revision']}.\n"
    )
    atomic_write_text(out / name, header + dump_recipe(recipe))
    return {
        "file": name,
        "config": config,
        "cache_dir": recipe.data.cache_dir,
        "output_dir": recipe.runtime.output_dir,
        "runs": runs["run"].to_list(),
        "seeds": runs["seed"].to_list(),
        **pinned,
        "recipe": recipe,
    }


def _pinned_data(campaign: CampaignResults, recipe: Recipe, directories: list[str]) -> dict[str, Any]:
    """Cache identity and the resolved data and tokenizer revisions the runs trained on (the
    manifest's, so a recipe that left a revision to be resolved at preparation gets it pinned)."""
    manifest = campaign.manifest or {}
    source, tokenizer = manifest.get("source") or {}, manifest.get("tokenizer") or {}
    results = [campaign.results.get(directory) or {} for directory in directories]
    identities = sorted({result["cache_identity"] for result in results if result.get("cache_identity")})
    return {
        "cache_identity": " ".join(identities) or None,
        "dataset": recipe.data.dataset or recipe.data.source,
        "revision": source.get("revision") or recipe.data.revision,
        "tokenizer": recipe.data.tokenizer,
        "tokenizer_revision": tokenizer.get("revision") or recipe.data.tokenizer_revision,
    }


def _summary(
    campaign: CampaignResults, selection: dict[str, dict[str, Any]], halving: dict[str, Any] | None
) -> dict[str, Any]:
    """Campaign-level facts and provenance shared by grid and scaling reports (results.json head).
    Runs successive halving stopped at a rung are neither expected to finish nor incomplete."""
    stopped = stopped_at(halving)
    runs = campaign.runs
    halted = pl.col("run").is_in(pl.Series(list(stopped), dtype=pl.String))
    counted = runs.filter(~halted & (pl.col("status") != RETIRED))
    complete = counted.filter(pl.col("status") == "complete")
    ended = counted.filter(pl.col("status").is_in(["complete", DIVERGED]))  # a diverged run is a result
    results = list(campaign.results.values())
    info = campaign.info or {}
    points = sum(len(lrs) for lrs in campaign.learning_rates.values()) * len(campaign.beta2)
    # campaign.json knows the plan (presets may have their own learning rates); else the grid's product
    planned = info.get("runs_planned") or points * len(campaign.seeds) * max(1, len(set(campaign.presets.values())))
    expected = planned - len(stopped)
    recipes = _representatives(campaign, selection)
    first = next(iter(recipes.values()))[0]
    return {
        "campaign": campaign.name,
        "description": info.get("description") or "",
        "directory": _campaign_path(campaign),
        "kind": "scaling" if campaign.presets else "grid",
        "measured_date": campaign.measured_date,
        "status": "complete" if ended.height == counted.height and ended.height >= expected else "incomplete",
        "runs": runs.height,
        "completed_runs": complete.height,
        "expected_runs": expected,
        "outcomes": run_outcomes(campaign),
        **({"stopped_runs": len(stopped)} if halving is not None else {}),
        "grid": {"modes": campaign.modes, "learning_rates": campaign.learning_rates, "beta2": campaign.beta2},
        "seeds": campaign.seeds,
        **SELECTION_RULE,
        "settings": {mode: settings(recipe, epochs) for mode, (recipe, epochs) in recipes.items()},
        "validation_targets": sorted({r["targets"] for r in results if r.get("targets") is not None}),
        "data": _data_record(campaign, first),
        "evaluation": first.evaluation.model_dump(mode="json"),
        "data_facts": dict(data_facts(campaign, first)),
        "source_hash": {
            "campaign": info.get("source_hash"),
            "runs": sorted({r["source_hash"] for r in results if r.get("source_hash")}),
        },
        "cache_identity": sorted({r["cache_identity"] for r in results if r.get("cache_identity")}),
        "base_recipes": _base_recipes(info),
        "created": info.get("created"),
        "environment": _environments(results),
        "hosts": sorted({(r.get("environment") or {}).get("host") for r in results} - {None}),
        "job_ids": sorted({str(job) for r in results for job in r.get("job_ids") or []}),
        "execution": info.get("execution"),
        "audit": _audit(campaign.audit),
        "signing_key_id": (info.get("signing") or {}).get(
            "key_id"
        ),  # the audit signs after this page: the key named, not a signature
    }


def run_outcomes(campaign: CampaignResults) -> dict[str, list[dict[str, Any]]]:
    """The runs that did not converge, by outcome: diverged (with the step), failed (with the last
    lines of the job's log), incomplete (not finished yet), missing (no run directory) and retired."""
    rows = campaign.runs.iter_rows(named=True)
    names = (DIVERGED, "failed", "incomplete", "missing", RETIRED)
    outcomes: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for row in rows:
        if row["status"] == DIVERGED:
            outcomes[DIVERGED].append({"run": row["run"], "step": row["diverged_step"]})
        elif row["status"] == "failed":
            outcomes["failed"].append({"run": row["run"], "log": campaign.failures.get(row["directory"], [])})
        elif row["status"] in ("incomplete", RETIRED):
            outcomes[row["status"]].append({"run": row["run"]})
    outcomes["missing"] = [{"run": run} for run in campaign.missing]
    return outcomes


def _representatives(
    campaign: CampaignResults, selection: dict[str, dict[str, Any]]
) -> dict[str, tuple[Recipe, int | None]]:
    """Recipe and epoch count of one run per column of the settings table: per model size in a
    scaling campaign (its first run), else per mode (the winner's first seed, else the mode's first run)."""
    directories: dict[str, str] = {}
    if campaign.presets:
        for directory, size in campaign.presets.items():
            directories.setdefault(size, directory)
    else:
        for mode in campaign.modes:
            runs = (
                point_runs(campaign, selection[mode])
                if mode in selection
                else campaign.runs.filter(pl.col("mode") == mode)
            )
            if not runs.is_empty():
                directories[mode] = runs["directory"][0]
    return {label: (campaign.recipe(d), len(campaign.epochs(d)) or None) for label, d in directories.items()}


def _base_recipes(info: dict[str, Any]) -> dict[str, str]:
    """Identity of each frozen base recipe (one per preset in a scaling campaign)."""
    if info.get("base_recipes"):
        return {name: entry.get("identity") for name, entry in info["base_recipes"].items()}
    return {"base": info["base_recipe_identity"]} if info.get("base_recipe_identity") else {}


def _data_record(campaign: CampaignResults, recipe: Recipe) -> dict[str, Any]:
    """Data and tokenizer revisions: the manifest when present, else what the recipe pinned."""
    if campaign.manifest is not None:
        keys = ("source", "tokenizer", "seeds", "splits")
        manifest = _repo_relative(str(campaign.manifest_path), campaign)
        return {"manifest": manifest, **{k: campaign.manifest.get(k) for k in keys}}
    data = recipe.data
    return {
        "manifest": None,
        "manifest_missing": _repo_relative(str(campaign.manifest_path), campaign),
        "source": {"name": data.dataset or data.source, "config": data.dataset_config, "revision": data.revision},
        "tokenizer": {
            "name": data.tokenizer,
            "revision": data.tokenizer_revision,
            "vocab_size": recipe.model.vocab_size,
        },
        "seeds": {"shuffle": data.shuffle_seed, "validation": recipe.evaluation.seed},
    }


def _environments(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Distinct software and hardware environments (hosts listed apart), with their run counts."""
    counts: dict[str, int] = {}
    for result in results:
        environment = {k: v for k, v in (result.get("environment") or {}).items() if k != "host"}
        key = json.dumps(environment, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return [{**json.loads(key), "runs": count} for key, count in sorted(counts.items())]


def _audit(audit: dict[str, Any] | None) -> dict[str, Any]:
    """Audit outcome: not audited, passed, or failed with the failing checks and their violations;
    `passed` counts the checks that examined something and passed, `not_applicable` names those
    that had nothing to examine (no failure), `compared` whether an earlier audit was compared."""
    if audit is None:
        return {
            "status": "not audited",
            "checks": 0,
            "passed": 0,
            "failed": [],
            "not_applicable": [],
            "compared": False,
        }
    checks = audit.get("checks") or []
    idle = [check.get("name") for check in checks if check.get("status") == "not applicable"]
    failed = [
        {"name": check.get("name"), "scope": check.get("scope"), "violations": list(check.get("violations") or [])}
        for check in checks
        if not check.get("passed")
    ]
    status = "passed" if audit.get("passed") and not failed else "failed"
    return {
        "status": status,
        "checks": len(checks),
        "passed": len(checks) - len(idle) - len(failed),
        "failed": failed,
        "not_applicable": idle,
        "compared": audit.get("compared_with_earlier_audit", True),
    }


def _run_records(campaign: CampaignResults) -> list[dict[str, Any]]:
    return [{**row, "job_ids": row["job_ids"].split()} for row in campaign.runs.iter_rows(named=True)]


def _scaling_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """scaling.csv: one column per epoch's validation accuracy, job ids space-separated."""
    epochs = max((len(row["val_accuracy"]) for row in rows), default=0)
    flat = [
        {
            **{k: v for k, v in row.items() if k not in ("val_accuracy", "job_ids")},
            **{
                f"val_accuracy_epoch{e + 1}": (row["val_accuracy"][e] if e < len(row["val_accuracy"]) else None)
                for e in range(epochs)
            },
            "job_ids": " ".join(row["job_ids"]),
        }
        for row in rows
    ]
    return pl.DataFrame(flat, infer_schema_length=None)


def _repo_relative(path: str, campaign: CampaignResults) -> str:
    """A path under the repository made relative to it (never through links: results/ may be a
    link to scratch space); relative paths and outside paths kept."""
    return CampaignPaths(campaign.directory).relative(path)


def _campaign_path(campaign: CampaignResults) -> str:
    """The campaign directory as commands run from the repository root name it (results/<name>,
    however the campaign was reached)."""
    return _repo_relative(os.path.abspath(campaign.directory), campaign)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """JSON with non-finite numbers as null (JSON has no NaN), stable key order as built."""
    atomic_write_text(path, json.dumps(_finite(payload), indent=2, default=str) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
