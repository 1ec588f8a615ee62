"""The campaign's HTML page: one file that opens offline in any browser, plotly.js from report/assets/.

Values are formatted here and passed to a Jinja2 template with autoescaping on, so anything that
came from a user (run names, campaign names, purposes, paths) is shown as text, never as markup.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ebd2n.campaign.analysis import point_key, values_label
from ebd2n.campaign.results import CampaignResults
from ebd2n.campaign.runs import run_label
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
from ebd2n.outcomes import STOPPED, Outcome
from ebd2n.quantities import format_amount, format_duration, loss_decimals
from ebd2n.report import html
from ebd2n.report.halving import stopped_at
from ebd2n.report.html import DASH, percent
from ebd2n.report.page_confirmation import confirmation_section
from ebd2n.report.page_grid import grid_section
from ebd2n.report.plotly_embed import figure_json, plotly_tag
from ebd2n.report.plotly_figures import halving_figure
from ebd2n.report.tables import settings_rows, split_rows


def render_page(
    campaign: CampaignResults,
    summary: dict[str, Any],
    cost: dict[str, Any],
    *,
    grid: dict[str, Any] | None = None,
    scaling: list[dict[str, Any]] | None = None,
    halving: dict[str, Any] | None = None,
    explore: dict[str, Any] | None = None,
    lr_law: list[dict[str, Any]] | None = None,
) -> str:
    """index.html for a grid campaign (`grid` from the selection) or a scaling one (`scaling` rows);
    `halving` (ebd2n.report.halving) adds the successive-halving section, `explore` (ebd2n.report.explore)
    the runs' overlaid curves, `lr_law` (ebd2n.report.lr_law_report) a scaling campaign's learning-rate law."""
    stopped = stopped_at(halving)
    digits = _loss_digits(grid)
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
            _run_row(campaign, row, hours, stopped, digits)
            for row, hours in zip(campaign.runs.iter_rows(named=True), cost["runs"], strict=True)
        ],
        "cost": _cost(cost, campaign.axes),
        "scaling": _scaling(scaling) if scaling is not None else None,
        "grid": grid_section(campaign, grid, stopped, digits) if grid is not None else None,
        "confirmation": confirmation_section(grid["confirmation"], digits) if grid is not None else None,
        "halving": _halving(halving, digits) if halving is not None else None,
        "links": _links(campaign, grid, scaling is not None, halving),
        "explore": explore,
        "lr_law": lr_law or [],
    }
    report_dir = campaign.directory / "report"
    drawn = grid is not None or halving is not None or explore is not None
    context["plotly"] = plotly_tag(report_dir / "index.html", report_dir) if drawn else None
    return environment.get_template("campaign.html.j2").render(context)


def _halving(outputs: dict[str, Any], digits: int) -> dict[str, Any]:
    """The successive-halving section: the hours, and per bracket its figure and its points at every rung."""
    hours = outputs["hours"]
    brackets = []
    for index, bracket in enumerate(outputs["brackets"]):
        rows = []
        for point in bracket["points"]:
            cells = []
            for rung in bracket["rungs"]:
                entry = point["rungs"].get(str(rung["epoch"]))
                loss = DASH if entry is None or entry["mean_loss"] is None else f"{entry['mean_loss']:.{digits}f}"
                rank = "" if entry is None else f"rank {entry['rank']}" + ("" if entry["continued"] else ", stopped")
                cells.append({"text": loss, "rank": rank})
            rows.append(
                {
                    "lr": f"{point['lr']:g}",
                    "beta2": f"{point['beta2']:g}",
                    "outcome": point["outcome"],
                    "cells": cells,
                    STOPPED: point["stopped_at"] is not None,
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
                STOPPED: sum(row[STOPPED] for row in rows),
                "points": len(rows),
                "epochs": bracket["epochs"],
            }
        )
    return {
        "keep": f"{outputs['keep']:g}",
        STOPPED: len(outputs["stopped_runs"]),
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
            "sentence": f"Used {used} training hours; the full grid's cannot be estimated yet "
            "(an epoch no run has trained).",
        }
    full, share = format_amount(hours["full_grid_hours"]), f"{100 * hours['share']:.0f} %"
    return {
        "used": used,
        "full": full,
        "share": share,
        "sentence": f"Used {share} of the full grid's training hours ({used} of {full} h).",
    }


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
        "created": time_text(summary["created"]) if summary["created"] else None,
        "environments": [
            {**env, "devices": ", ".join(env.get("devices") or []) or DASH} for env in summary["environment"]
        ],
        "hosts": ", ".join(summary["hosts"]) or DASH,
        "job_ids": summary["job_ids"],
        "signing_key_id": summary["signing_key_id"],
    }


def _cost(cost: dict[str, Any], axes: list[str]) -> dict[str, Any]:
    """The cost section: one row per mode and the campaign's, one per grid point; money only with a price."""

    def texts(entry: dict[str, Any]) -> dict[str, str]:
        return {
            "runs": str(entry["runs"]),
            "gpu_hours": format_amount(entry["gpu_hours"]),
            "cpu_hours": format_amount(entry["cpu_hours"]),
            "cost": format_amount(entry["cost"]) if entry["cost"] is not None else DASH,
        }

    return {
        "measured": _measured(cost),
        "price": f"{cost['cost_per_gpu_hour']:g}" if cost["cost_per_gpu_hour"] is not None else None,
        "modes": [{"mode": entry["mode"], **texts(entry)} for entry in cost["mode"]],
        "campaign": texts(cost["campaign"]),
        "axes_title": " · ".join(axes),
        "points": [
            {"mode": e["mode"], "lr": f"{e['lr']:g}", "point": values_label(point_key(e, axes)), **texts(e)}
            for e in cost["point"]
        ],
    }


def _measured(cost: dict[str, Any]) -> str:
    """What the hours count, and the campaign's wall-clock time when its runs recorded one."""
    jobs = cost["campaign"]["jobs"]
    text = (
        f"Time the runs' {jobs} training and validation job{'s' if jobs != 1 else ''} recorded, each from its "
        "process's start (start-up included) to its work committed, times each job's GPUs and CPUs; "
        "a no-op rerun adds nothing, and a job killed or failed before committing its work is not counted"
    )
    if unrecorded := sum(1 for run in cost["runs"] if not run["jobs"]):
        text += (
            f"; {unrecorded} run{'s' if unrecorded != 1 else ''} without job records (trained by an earlier ebd2n) "
            "count their epochs' training and full-validation time, start-up not included"
        )
    span = cost["span"]
    if span["wall_s"] is None:
        return f"{text}. Wall-clock time: not known (no job recorded its start)"
    return (
        f"{text}. Wall-clock time: {format_duration(span['wall_s'])}, from the first job's start "
        f"({time_text(span['started'])}) to the last job's end ({time_text(span['ended'])}), pauses between "
        "invocations included"
    )


def time_text(iso: str) -> str:
    """`2026-12-07 14:03 UTC`: a recorded ISO time as people read it, to the minute; one without an
    offset as recorded (converting it would depend on the machine building the page)."""
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        return f"{moment:%Y-%m-%d %H:%M}"
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _loss_digits(grid: dict[str, Any] | None) -> int:
    """Decimals of every loss on the page, chosen once so no table mixes them: what the smaller of
    the points' median seed SD and the winners' smallest supports (no winner's SD reads as 0)."""
    if grid is None:
        return loss_decimals(None)
    sds = grid["groups"]["std_loss"].drop_nulls().drop_nans()
    winners = [sd for point in grid["selection"].values() if (sd := point["std_loss"]) is not None and sd > 0]
    return loss_decimals(min([sds.median(), *winners]) if not sds.is_empty() else None)


def _run_row(
    campaign: CampaignResults, row: dict[str, Any], hours: dict[str, Any], stopped: dict[str, int], digits: int
) -> dict[str, Any]:
    """A runs-table row as text; its link opens the run's dashboard, or its folder when it has none."""
    dashboard = f"{row['directory']}/{DASHBOARD}"
    return {
        **row,
        "status": Outcome.STOPPED.value if row["run"] in stopped else row["status"],
        "stopped_at": stopped.get(row["run"]),
        "gpu_hours": format_amount(hours["gpu_hours"]),
        "cpu_hours": format_amount(hours["cpu_hours"]),
        "href": f"../{dashboard}" if (campaign.directory / dashboard).is_file() else f"../{row['directory']}/",
        "label": run_label(row["run"]),  # the grid point, readable, on the id's tooltip
        "lr": f"{row['lr']:g}",
        "beta2": f"{row['beta2']:g}",
        "loss": f"{row['loss']:.{digits}f}" if row["loss"] is not None else DASH,
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
            _link(LR_RESPONSE_CSV, f"LR response at every {' x '.join(grid['response_at'])}, one row per value and LR"),
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
            "JSON results and provenance: per-run and grouped values, selections, grid, seeds, revisions, "
            "environment, job ids",
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
