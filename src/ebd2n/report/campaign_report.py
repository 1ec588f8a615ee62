"""The campaign report: every table, figure, selected recipe and the HTML page, from disk alone.

`build_report` reads `results/<campaign>` and rewrites `results/<campaign>/report/`. It trains
nothing, so it can be rerun after an extension or a change of the report code. Outputs hold no
wall-clock timestamps, so regenerating an unchanged campaign gives byte-identical files: the
audit verifies a published report by building it again elsewhere and comparing the bytes, and a
rebuild that changes nothing leaves the published files as they are. A report that does change
moves its predecessor to `report/history/<UTC time>/`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from ebd2n.atomic import atomic_write_bytes, atomic_write_text, serialized
from ebd2n.campaign.analysis import (
    group_runs,
    lr_response,
    lr_responses,
    select,
    value_text,
    winner_notes,
    write_selection,
)
from ebd2n.campaign.axis_optimum import optimum_shifts
from ebd2n.campaign.extend import extension_history
from ebd2n.campaign.mode_comparison import compare_modes
from ebd2n.campaign.optimum import lr_optima, optimum_panels
from ebd2n.campaign.results import CampaignResults, read_results
from ebd2n.campaign.runs import BASE
from ebd2n.campaign.verdict import confirmation_verdict
from ebd2n.config import Recipe, dump_recipe
from ebd2n.layout import (
    BRACKETS_CSV,
    CURVES_CSV,
    LR_RESPONSE_CSV,
    REPORT,
    REPORT_INDEX,
    REPORT_RESULTS,
    RUNS,
    RUNS_CSV,
    SCALING_CSV,
    CampaignPaths,
    selected_recipe,
)
from ebd2n.outcomes import Outcome
from ebd2n.report import figures
from ebd2n.report.cost import campaign_cost
from ebd2n.report.explore import explore
from ebd2n.report.halving import bracket_table, halving_outputs, report_halving
from ebd2n.report.lr_law_report import lr_law_figures, lr_law_report, lr_law_section
from ebd2n.report.page import render_page
from ebd2n.report.plotly_embed import shared_plotly
from ebd2n.report.publish import STAGING, publish, remove_killed_stagings
from ebd2n.report.store import write_store
from ebd2n.report.summary import campaign_path, campaign_summary, repo_relative
from ebd2n.report.tables import curve_table, point_runs, response_point, scaling_rows


def build_report(campaign_dir: Path, out: Path | None = None, info: dict[str, Any] | None = None) -> Path:
    """Write the report into `out`, or publish it as the campaign's report/; return its index.html.
    `info` stands in for campaign.json (the audit's recomputation)."""
    campaign = read_results(Path(campaign_dir), info)
    if out is not None:
        return _write_report(campaign, Path(out))
    published = campaign.directory / REPORT
    remove_killed_stagings(campaign.directory)
    with tempfile.TemporaryDirectory(prefix=f"{STAGING}{os.getpid()}-", dir=campaign.directory) as staging:
        _write_report(campaign, Path(staging))
        with serialized(campaign.directory):  # two report jobs at once (two controllers): one publishes, one finds it
            publish(Path(staging), published)
    return published / REPORT_INDEX


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
        summary = campaign_summary(campaign, {}, halving)
        law = lr_law_report(campaign)
        laws = {"lr_law": law} if law else {}  # a campaign of one cell per mode: results.json as before
        for name, drawn in lr_law_figures(law).items():
            for fmt, data in drawn.items():
                atomic_write_bytes(out / f"{name}.{fmt}", data)
        _write_json(
            out / REPORT_RESULTS,
            {**summary, "scaling": scaling, **laws, **search, "cost": cost, "runs": _run_records(campaign)},
        )
        page = render_page(
            campaign, summary, cost, scaling=scaling, halving=halving, explore=explored, lr_law=lr_law_section(law)
        )
    else:
        grid = _grid_outputs(campaign, out)
        summary = campaign_summary(campaign, grid["selection"], halving)
        _write_json(
            out / REPORT_RESULTS, {**summary, **grid["json"], **search, "cost": cost, "runs": _run_records(campaign)}
        )
        page = render_page(campaign, summary, cost, grid=grid, halving=halving, explore=explored)
    atomic_write_text(out / REPORT_INDEX, page)
    return out / REPORT_INDEX


def _grid_outputs(campaign: CampaignResults, out: Path) -> dict[str, Any]:
    """Selection, LR response, curves, heatmaps and selected recipes of an LR x beta2 campaign."""
    groups = group_runs(campaign.runs, campaign.seeds, campaign.axes)
    selection = select(groups)
    notes = winner_notes(groups, campaign.runs, campaign.seeds)
    comparison = compare_modes(groups, campaign.runs, selection, campaign.seeds)
    optima = lr_optima(groups, campaign.runs, campaign.seeds)
    panels = optimum_panels(groups, campaign.runs, selection, optima, campaign.seeds)
    shifts = optimum_shifts(groups, campaign.runs, selection, campaign.further_axes, campaign.seeds)
    confirmation = confirmation_verdict(campaign.directory, _losses(campaign))
    by_mode = {group["mode"]: group for group in (confirmation or {}).get("groups", []) if group["scope"] == BASE}
    write_selection(groups, selection, out, optima, by_mode)
    at = response_point(groups, selection)
    response = lr_response(groups, at)
    atomic_write_text(out / LR_RESPONSE_CSV, lr_responses(groups).write_csv())
    curves = curve_table(campaign, selection)
    atomic_write_text(out / CURVES_CSV, curves.write_csv())
    for name, drawn in (
        ("heatmaps", figures.heatmaps(groups, campaign.learning_rates, campaign.points, selection)),
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
        "mode_comparison": comparison,
        "confirmation": confirmation,
        "optima": optima,
        "optimum_panels": panels,
        "optimum_shifts": shifts,
        "extensions": extensions,
        "response": response,
        "response_at": at,
        "curves": curves,
        "selected": selected,
        "json": {
            "selected": selection,
            "notes": notes,
            **({"mode_comparison": comparison} if comparison else {}),  # two modes selected or more
            **({"confirmation": confirmation} if confirmation else {}),  # a campaign with `confirm`
            "lr_optima": optima,
            **({"lr_optimum_shifts": shifts} if shifts else {}),  # a grid with further axes only
            "extensions": extensions,
            "selected_recipes": {mode: entry["file"] for mode, entry in selected.items()},
            "lr_response": {**at, "rows": response.to_dicts()},
            "groups": groups.to_dicts(),
        },
    }


def _losses(campaign: CampaignResults) -> dict[str, float]:
    """Each complete run's finite full-validation loss, by run id."""
    done = campaign.runs.filter((pl.col("status") == Outcome.COMPLETE) & pl.col("loss").is_finite())
    return dict(zip(done["run"], done["loss"], strict=True))


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
    recipe.data.cache_dir = repo_relative(recipe.data.cache_dir, campaign)
    recipe.runtime.output_dir = f"{RUNS}/{campaign.directory.name}-selected-{mode}"
    pinned = _pinned_data(campaign, recipe, runs["directory"].to_list())
    recipe.data.revision, recipe.data.tokenizer_revision = pinned["revision"], pinned["tokenizer_revision"]
    name = selected_recipe(mode)
    config = f"{campaign_path(campaign)}/{REPORT}/{name}"
    seeds = ", ".join(str(seed) for seed in runs["seed"])
    header = (
        f"# Selected {mode} recipe of campaign {_one_line(campaign.name)}: "
        f"LR {point['lr']:g}, {', '.join(f'{axis} {value_text(point[axis])}' for axis in campaign.axes)},\n"
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
