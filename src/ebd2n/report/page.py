"""The campaign's HTML page: one file that opens offline in any browser, plotly.js from report/assets/.

Values are formatted here and passed to a Jinja2 template with autoescaping on, so anything that
came from a user (run names, campaign names, purposes, paths) is shown as text, never as markup.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from ebd2n.campaign.analysis import DIVERGED, outcome_text
from ebd2n.campaign.results import CampaignResults
from ebd2n.layout import (
    AUDIT_JSON,
    BRACKETS_CSV,
    CAMPAIGN_JSON,
    CURVES_CSV,
    DASHBOARD,
    GROUPS_CSV,
    LR_RESPONSE_CSV,
    REPORT_RESULTS,
    RUNS_CSV,
    SCALING_CSV,
    SELECTION_JSON,
    CampaignPaths,
)
from ebd2n.quantities import format_amount
from ebd2n.report import html
from ebd2n.report.halving import stopped_at
from ebd2n.report.html import DASH, percent
from ebd2n.report.plotly_embed import (
    curves_figure,
    figure_json,
    halving_figure,
    heatmap_figure,
    lr_optimum_figure,
    plotly_tag,
)
from ebd2n.report.tables import point_runs, settings_rows, split_rows


def render_page(
    campaign: CampaignResults,
    summary: dict[str, Any],
    cost: dict[str, Any],
    *,
    grid: dict[str, Any] | None = None,
    scaling: list[dict[str, Any]] | None = None,
    halving: dict[str, Any] | None = None,
    explore: dict[str, Any] | None = None,
) -> str:
    """index.html for a grid campaign (`grid` from the selection) or a scaling one (`scaling` rows);
    `halving` (ebd2n.report.halving) adds the successive-halving section, `explore` (ebd2n.report.explore)
    the runs' overlaid curves."""
    stopped = stopped_at(halving)
    environment = html.template_environment()
    environment.filters["words"] = _words
    context: dict[str, Any] = {
        "summary": summary,
        "audit": summary["audit"],
        "settings_modes": list(summary["settings"]),
        "settings": settings_rows(summary["settings"]),
        "data_facts": list(summary["data_facts"].items()),
        "splits": split_rows(campaign),
        "manifest_found": campaign.manifest is not None,
        "provenance": _provenance(summary),
        "runs": [
            _run_row(campaign, row, hours, stopped)
            for row, hours in zip(campaign.runs.iter_rows(named=True), cost["runs"], strict=True)
        ],
        "cost": _cost(cost),
        "scaling": _scaling(scaling) if scaling is not None else None,
        "grid": _grid(campaign, summary, grid, stopped) if grid is not None else None,
        "halving": _halving(halving) if halving is not None else None,
        "links": _links(campaign, grid, scaling is not None, halving),
        "explore": explore,
    }
    report_dir = campaign.directory / "report"
    drawn = grid is not None or halving is not None or explore is not None
    context["plotly"] = plotly_tag(report_dir / "index.html", report_dir) if drawn else None
    return environment.get_template("campaign.html.j2").render(context)


def _grid(
    campaign: CampaignResults, summary: dict[str, Any], grid: dict[str, Any], stopped: dict[str, int]
) -> dict[str, Any]:
    """Everything the LR x beta2 sections show: winners, grid, response, figures, commands."""
    groups: pl.DataFrame = grid["groups"]
    selection = grid["selection"]
    winners = [
        {
            **_winner(campaign, mode, point, grid["notes"][mode], grid["selected"][mode]),
            "optimum": _optimum_text(grid["optima"][mode]),
        }
        for mode, point in selection.items()
    ]
    modes = [mode for mode in campaign.learning_rates if not groups.filter(pl.col("mode") == mode).is_empty()]
    return {
        "combinations": groups.height,
        "eligible": int(groups["eligible"].sum()),
        "modes": modes,
        "winners": winners,
        "unselected": [mode for mode in modes if mode not in selection],
        "inside": [w["mode"] for w in winners if not (w["edge"] or w["unfinished"] or w["diverged_above"])],
        "on_edge": [w for w in winners if w["edge"]],
        "unsettled": [w for w in winners if w["unfinished"]],
        "bounded": [w for w in winners if w["diverged_above"]],
        "grid_rows": _grid_rows(campaign, groups, stopped),
        "response": _response(groups, grid["response"], grid["response_beta2"], selection),
        "heatmaps": [_heatmap(campaign, groups, mode, selection.get(mode), index) for index, mode in enumerate(modes)],
        "curves": _curves(grid["curves"]),
        "optimum_plots": [_optimum_plot(panel, index) for index, panel in enumerate(grid["optimum_panels"])],
        "extensions": [
            {
                "number": entry["extension"],
                "time": entry["time"],
                "file": entry["campaign_file"],
                "previous": entry["previous_revision"],
                "added": [
                    (mode, ", ".join(f"{lr:g}" for lr in lrs), entry["why"].get(mode, ""))
                    for mode, lrs in entry["added"].items()
                ],
            }
            for entry in grid["extensions"]
        ],
    }


def _halving(outputs: dict[str, Any]) -> dict[str, Any]:
    """The successive-halving section: the hours, and per bracket its figure and its points at every rung."""
    hours = outputs["hours"]
    brackets = []
    for index, bracket in enumerate(outputs["brackets"]):
        rows = []
        for point in bracket["points"]:
            cells = []
            for rung in bracket["rungs"]:
                entry = point["rungs"].get(str(rung["epoch"]))
                loss = DASH if entry is None or entry["mean_loss"] is None else f"{entry['mean_loss']:.4f}"
                rank = "" if entry is None else f"rank {entry['rank']}" + ("" if entry["continued"] else ", stopped")
                cells.append({"text": loss, "rank": rank})
            rows.append(
                {
                    "lr": f"{point['lr']:g}",
                    "beta2": f"{point['beta2']:g}",
                    "outcome": point["outcome"],
                    "cells": cells,
                    "stopped": point["stopped_at"] is not None,
                }
            )
        brackets.append(
            {
                "id": f"halving-{index}",
                "name": bracket["bracket"],
                "json": figure_json(halving_figure(bracket)),
                "rungs": [{"epoch": rung["epoch"], "candidates": rung["candidates"]} for rung in bracket["rungs"]],
                "rows": rows,
                "hours": _hours_text(bracket["hours"]),
                "stopped": sum(row["stopped"] for row in rows),
                "points": len(rows),
                "epochs": bracket["epochs"],
            }
        )
    return {
        "keep": f"{outputs['keep']:g}",
        "stopped": len(outputs["stopped_runs"]),
        "brackets": brackets,
        "hours": _hours_text(hours),
        "several": len(brackets) > 1,
    }


def _hours_text(hours: dict[str, Any]) -> dict[str, str]:
    """Training hours used and the full grid's estimate as the page shows them, with the sentence that compares them."""
    used = format_amount(hours["used_hours"])
    if hours["full_grid_hours"] is None:
        return {
            "used": used,
            "full": DASH,
            "share": DASH,
            "sentence": f"Used {used} training hours; the full grid's cannot be estimated yet (an epoch no run has trained).",
        }
    full, share = format_amount(hours["full_grid_hours"]), f"{100 * hours['share']:.0f} %"
    return {
        "used": used,
        "full": full,
        "share": share,
        "sentence": f"Used {share} of the full grid's training hours ({used} of {full} h).",
    }


def _optimum_text(entry: dict[str, Any]) -> dict[str, str]:
    """The fitted optimum as the best-recipes table shows it: estimate, interval, and why not."""
    fit = entry["lr_optimum"]
    low = f"{fit['low']:.3g}" if fit["low"] is not None else "beyond the grid"
    high = f"{fit['high']:.3g}" if fit["high"] is not None else "beyond the grid"
    interval = f"95 %: {low} to {high}" if fit["low"] is not None or fit["high"] is not None else ""
    if fit["open"]:
        interval += f" (open at the {fit['open']} end)"
    if fit["estimate"] is None:
        sentence = f"No fitted LR optimum: {fit['reason']}."
    else:
        sentence = f"Fitted LR optimum {fit['estimate']:.3g}" + (f" ({interval})" if interval else "") + "."
        if fit["reason"]:
            sentence += f" Note: {fit['reason']}."
    return {
        "estimate": f"{fit['estimate']:.3g}" if fit["estimate"] is not None else DASH,
        "interval": interval,
        "reason": fit["reason"] or "",
        "sentence": sentence,
    }


def _optimum_plot(panel: dict[str, Any], index: int) -> dict[str, Any]:
    """One mode's LR-optimum figure and its table view (one row per LR, a diverged one's saying so)."""
    seeds = panel["seeds"]
    rows = [
        {
            "lr": p["lr"],
            "mean": _pm(p["mean_loss"], p["std_loss"], 4),
            "seeds": ", ".join(
                f"{loss:.4f}" for lr, loss in zip(seeds["lr"], seeds["loss"], strict=True) if lr == p["lr"]
            ),
        }
        for p in panel["points"]
    ]
    rows += [
        {"lr": d["lr"], "mean": outcome_text({"outcome": DIVERGED, "diverged_step": d["step"]}), "seeds": ""}
        for d in panel["diverged"]
    ]
    return {
        "id": f"optimum-{index}",
        "mode": panel["mode"],
        "json": figure_json(lr_optimum_figure(panel, index)),
        "rows": [{**row, "lr": f"{row['lr']:g}"} for row in sorted(rows, key=lambda row: row["lr"])],
        "summary": _optimum_text({"lr_optimum": panel}),
    }


def _winner(
    campaign: CampaignResults, mode: str, point: dict[str, Any], notes: dict[str, Any], selected: dict[str, Any]
) -> dict[str, Any]:
    runs = point_runs(campaign, point)
    runner = notes["runner_up"]
    seeds = selected["seeds"]
    return {
        "mode": mode,
        "lr": f"{point['lr']:g}",
        "beta2": f"{point['beta2']:g}",
        "loss": _pm(point["mean_loss"], point["std_loss"], 6),
        "perplexity": f"{math.exp(point['mean_loss']):.3f}",
        "accuracy": percent(runs["accuracy"].mean()),
        "seeds": ", ".join(str(seed) for seed in seeds),
        "runs": selected["runs"],
        "runner_up": (f"LR {runner['lr']:g}, beta2 {runner['beta2']:g}", f"{runner['mean_loss']:.6f}")
        if runner
        else None,
        "margin": f"{notes['margin']:.6f}" if notes["margin"] is not None else DASH,
        "margin_vs_sd": f"{notes['margin_vs_sd']:.2f} × SD" if notes["margin_vs_sd"] is not None else "",
        "p_value": f"{notes['p_value']:.3g}" if notes["p_value"] is not None else DASH,
        "edge": notes["edge"],
        "next_lrs": ", ".join(f"{lr:g}" for lr in notes["next_lrs"]),
        "diverged_above": _diverged_above(notes["diverged_above"]),
        "unfinished": ", ".join(sorted({f"{point['lr']:g}" for point in notes["unfinished"]})),
        "verdict": notes["verdict"],
        "file": selected["file"],
        "cache_dir": selected["cache_dir"],
        "deterministic": selected["recipe"].runtime.deterministic,
        "prepare": f"ebd2n prepare {selected['config']}",
        "train": [
            (
                f"ebd2n train --config {selected['config']}",
                f"--set runtime.seed={seed} --set runtime.output_dir={selected['output_dir']}-seed{seed}",
            )
            for seed in campaign.seeds
        ],
    }


def _diverged_above(point: dict[str, Any] | None) -> str:
    """ "LR 1000 (beta2 0.95) diverged at step 12": the point above a winner that bounds its optimum."""
    if point is None:
        return ""
    return f"LR {point['lr']:g} (beta2 {point['beta2']:g}) {outcome_text({'outcome': DIVERGED, **point})}"


def _point_text(cell: dict[str, Any] | None) -> str | None:
    """What a grid point without a mean shows: why it has none (diverged at step k, not finished); None
    for a point with a mean, and a dash only for a point the grid did not test."""
    if cell is None:
        return DASH
    if cell["outcome"] == DIVERGED:
        return outcome_text(cell)
    return None if cell["mean_loss"] is not None else "not finished"


def _grid_rows(campaign: CampaignResults, groups: pl.DataFrame, stopped: dict[str, int]) -> list[dict[str, Any]]:
    """Per mode its grid and complete runs of those expected (the runs successive halving stopped not expected)."""
    rows = []
    for mode, lrs in campaign.learning_rates.items():
        runs = campaign.runs.filter(pl.col("mode") == mode)
        halted = sum(run in stopped for run in runs["run"])
        rows.append(
            {
                "mode": mode,
                "lrs": ", ".join(f"{lr:g}" for lr in lrs),
                "count": len(lrs),
                "beta2": ", ".join(f"{b:g}" for b in campaign.beta2),
                "points": groups.filter(pl.col("mode") == mode).height,
                "complete": runs.filter(pl.col("status") == "complete").height,
                "diverged": runs.filter(pl.col("status") == DIVERGED).height,
                "expected": len(lrs) * len(campaign.beta2) * len(campaign.seeds) - halted,
                "stopped": halted,
            }
        )
    return rows


def _response(
    groups: pl.DataFrame, table: pl.DataFrame, beta2: float, selection: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """LR-response rows as text ("mean ± sd", "diverged at step k", "not finished", a dash where
    untested, how few seeds an incomplete point rests on); the winner's cell is flagged so the page
    can set it in bold."""
    modes = [name.removesuffix(" mean_loss") for name in table.columns if name.endswith(" mean_loss")]
    at = groups.filter(pl.col("beta2") == beta2)
    eligible = {(row["mode"], row["lr"]) for row in at.filter(pl.col("eligible")).iter_rows(named=True)}
    points = {(row["mode"], row["lr"]): row for row in at.iter_rows(named=True)}

    def text(row: dict[str, Any], mode: str) -> str:
        mean, seeds = row[f"{mode} mean_loss"], row[f"{mode} seeds_completed"]
        if (why := _point_text(points.get((mode, row["lr"])))) is not None:
            return why
        few = "" if (mode, row["lr"]) in eligible else f" (only {seeds} seed{'' if seeds == 1 else 's'})"
        return _pm(mean, row[f"{mode} std_loss"], 4) + few

    rows = [
        {
            "lr": f"{row['lr']:g}",
            "cells": [
                {
                    "text": text(row, mode),
                    "winner": mode in selection
                    and selection[mode]["lr"] == row["lr"]
                    and selection[mode]["beta2"] == beta2,
                }
                for mode in modes
            ],
        }
        for row in table.iter_rows(named=True)
    ]
    return {"beta2": f"{beta2:g}", "modes": modes, "rows": rows}


def _heatmap(
    campaign: CampaignResults, groups: pl.DataFrame, mode: str, winner: dict[str, Any] | None, index: int
) -> dict[str, Any]:
    lrs, beta2 = campaign.learning_rates[mode], campaign.beta2
    part = groups.filter(pl.col("mode") == mode)
    cells = {(row["lr"], row["beta2"]): row for row in part.iter_rows(named=True)}
    rows = []
    for lr in reversed(lrs):
        texts = []
        for b in beta2:
            cell = cells.get((lr, b))
            if (why := _point_text(cell)) is not None:
                diverged = cell is not None and cell["outcome"] == DIVERGED
                texts.append({"mean": why, "sd": "", "winner": False, "diverged": diverged})
                continue
            sd = f"± {cell['std_loss']:.4f}" if cell["std_loss"] is not None else ""
            seeds = "" if cell["eligible"] else f" ({cell['seeds_completed']} seeds)"
            texts.append(
                {
                    "mean": f"{cell['mean_loss']:.4f}",
                    "sd": sd + seeds,
                    "diverged": False,
                    "winner": winner is not None and (winner["lr"], winner["beta2"]) == (lr, b),
                }
            )
        rows.append({"lr": f"{lr:g}", "cells": texts})
    return {
        "id": f"heatmap-{index}",
        "mode": mode,
        "json": figure_json(heatmap_figure(mode, part, lrs, beta2, winner, _loss_scale(groups))),
        "beta2": [f"{b:g}" for b in beta2],
        "rows": rows,
    }


def _loss_scale(groups: pl.DataFrame) -> tuple[float, float] | None:
    """The lowest and highest mean loss of every mode: the heatmaps' one colour scale."""
    losses = groups["mean_loss"].drop_nulls().drop_nans()
    return (losses.min(), losses.max()) if not losses.is_empty() else None


def _curves(table: pl.DataFrame) -> dict[str, Any]:
    """The curve figure and its table view: one row per token count, one column per winner."""
    columns, cells = [], {}
    for (mode, lr, beta2), part in table.group_by(["mode", "lr", "beta2"], maintain_order=True):
        columns.append(f"{mode} (LR {lr:g}, beta2 {beta2:g})")
        for row in part.iter_rows(named=True):
            sd = f" ± {row['std_loss']:.4f}" if row["std_loss"] is not None else ""
            cells[(len(columns) - 1, row["tokens"])] = f"{row['mean_loss']:.4f}{sd}"
    rows = [
        {"tokens": f"{tokens:,}", "cells": [cells.get((index, tokens), DASH) for index in range(len(columns))]}
        for tokens in sorted(set(table["tokens"].to_list()))
    ]
    return {"id": "curves", "json": figure_json(curves_figure(table)), "columns": columns, "rows": rows}


def _scaling(rows: list[dict[str, Any]]) -> dict[str, Any]:
    epochs = max((len(row["val_accuracy"]) for row in rows), default=0)
    return {
        "epochs": list(range(1, epochs + 1)),
        "rows": [
            {
                "size": row["size"],
                "run": row["run"],
                "parameters": f"{row['parameters']:,}",
                "gpus": row["gpus"] or "CPU",
                "epochs": row["epochs"],
                "accuracy": [percent(acc) for acc in row["val_accuracy"]]
                + [DASH] * (epochs - len(row["val_accuracy"])),
                "tokens_per_s": f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] is not None else DASH,
                "peak_memory": f"{row['peak_memory_bytes'] / 1e9:.1f} GB" if row["peak_memory_bytes"] else DASH,
                "gpu_hours": format_amount(row["gpu_hours"]) if row["gpu_hours"] is not None else DASH,
                "loss": f"{row['loss']:.4f}" if row["loss"] is not None else DASH,
                "job_ids": ", ".join(row["job_ids"]) or DASH,
            }
            for row in rows
        ],
    }


def _provenance(summary: dict[str, Any]) -> dict[str, Any]:
    hashes = summary["source_hash"]
    return {
        "campaign_hash": hashes["campaign"],
        "run_hashes": hashes["runs"],
        "consistent": len(hashes["runs"]) <= 1
        and (hashes["campaign"] is None or hashes["runs"] in ([], [hashes["campaign"]])),
        "caches": summary["cache_identity"],
        "base_recipes": summary["base_recipes"],
        "created": summary["created"],
        "environments": [
            {**env, "devices": ", ".join(env.get("devices") or []) or DASH} for env in summary["environment"]
        ],
        "hosts": ", ".join(summary["hosts"]) or DASH,
        "job_ids": summary["job_ids"],
        "signing_key_id": summary["signing_key_id"],
    }


def _cost(cost: dict[str, Any]) -> dict[str, Any]:
    """The cost section: one row per mode and the campaign's, one per grid point; money only with a price."""

    def texts(entry: dict[str, Any]) -> dict[str, str]:
        return {
            "runs": str(entry["runs"]),
            "gpu_hours": format_amount(entry["gpu_hours"]),
            "cpu_hours": format_amount(entry["cpu_hours"]),
            "cost": format_amount(entry["cost"]) if entry["cost"] is not None else DASH,
        }

    return {
        "price": f"{cost['cost_per_gpu_hour']:g}" if cost["cost_per_gpu_hour"] is not None else None,
        "modes": [{"mode": entry["mode"], **texts(entry)} for entry in cost["mode"]],
        "campaign": texts(cost["campaign"]),
        "points": [
            {"mode": e["mode"], "lr": f"{e['lr']:g}", "beta2": f"{e['beta2']:g}", **texts(e)} for e in cost["point"]
        ],
    }


def _run_row(
    campaign: CampaignResults, row: dict[str, Any], hours: dict[str, Any], stopped: dict[str, int]
) -> dict[str, Any]:
    """A runs-table row as text; its link opens the run's dashboard, or its folder when it has none."""
    dashboard = f"{row['directory']}/{DASHBOARD}"
    return {
        **row,
        "status": "stopped" if row["run"] in stopped else row["status"],
        "stopped_at": stopped.get(row["run"]),
        "gpu_hours": format_amount(hours["gpu_hours"]),
        "cpu_hours": format_amount(hours["cpu_hours"]),
        "href": f"../{dashboard}" if (campaign.directory / dashboard).is_file() else f"../{row['directory']}/",
        "lr": f"{row['lr']:g}",
        "beta2": f"{row['beta2']:g}",
        "loss": f"{row['loss']:.6f}" if row["loss"] is not None else DASH,
        "perplexity": f"{row['perplexity']:.3f}" if row["perplexity"] is not None else DASH,
        "accuracy": percent(row["accuracy"]),
        "tokens": f"{row['tokens']:,}" if row["tokens"] is not None else DASH,
        "job_ids": row["job_ids"] or DASH,
    }


def _links(
    campaign: CampaignResults, grid: dict[str, Any] | None, scaling: bool, halving: dict[str, Any] | None
) -> list[dict[str, str]]:
    """Every file of the report (and the campaign's own records), with what it holds."""
    runs = campaign.runs.height
    links = [_link(RUNS_CSV, f"per-run CSV: {runs} run(s) with final full-validation results")]
    if grid is not None:
        links += [
            _link(GROUPS_CSV, f"grouped CSV: {grid['groups'].height} combinations, means, sample SDs and ranks"),
            _link(SELECTION_JSON, "the selected point per mode"),
            _link(LR_RESPONSE_CSV, f"LR response at beta2 = {grid['response_beta2']:g}"),
            _link("heatmaps.png", "full-grid heatmaps (PNG)"),
            _link("heatmaps.pdf", "full-grid heatmaps (PDF)"),
            _link("curves.png", "winners' validation curves (PNG)"),
            _link("curves.pdf", "winners' validation curves (PDF)"),
            _link("lr-optimum.png", "fitted LR optimum per mode with its 95 % interval (PNG)"),
            _link("lr-optimum.pdf", "fitted LR optimum per mode with its 95 % interval (PDF)"),
            _link(CURVES_CSV, "curve data: mean and sample SD per token count"),
        ]
        links += [
            {"href": entry["file"], "label": entry["file"], "about": f"selected {mode} recipe, ready for ebd2n train"}
            for mode, entry in grid["selected"].items()
        ]
    if scaling:
        links.append(_link(SCALING_CSV, "the scaling table"))
    if halving is not None:
        links += [
            _link(
                BRACKETS_CSV,
                "successive halving: each point's mean subset loss, rank and outcome at every rung it was ranked at",
            ),
            _link("halving.png", "successive halving: mean subset loss at each rung against LR (PNG)"),
            _link("halving.pdf", "successive halving: mean subset loss at each rung against LR (PDF)"),
        ]
    links.append(
        _link(
            REPORT_RESULTS,
            "JSON results and provenance: per-run and grouped values, selections, grid, seeds, revisions, environment, job ids",
        )
    )
    if CampaignPaths(campaign.directory).campaign_json.is_file():
        links.append(_link(f"../{CAMPAIGN_JSON}", "the campaign's resolved grid and seeds"))
    # the audit writes it after verifying this very page, so the page cannot depend on it: linked once the runs'
    # audit (which comes before every published report) exists, never on a campaign built by hand before any audit
    if campaign.audit is not None:
        links.append(_link(f"../{AUDIT_JSON}", "the audit's checks, this report's verification included"))
    return links


def _link(href: str, about: str) -> dict[str, str]:
    return {"href": href, "label": href.removeprefix("../"), "about": about}


def _words(items: list[Any]) -> str:
    """English list: "a", "a and b", "a, b and c"."""
    texts = [str(item) for item in items]
    return " and ".join(texts) if len(texts) < 3 else f"{', '.join(texts[:-1])} and {texts[-1]}"


def _pm(mean: float, sd: float | None, digits: int) -> str:
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")
