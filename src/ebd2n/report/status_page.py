"""The campaign's status page, results/<campaign>/status.html: the status table (the terminal's
cells, ebd2n.campaign.status_display), each run's training loss drawn small, and the report's
explorer (ebd2n.report.explore, explore.js) over every run so far, reloading itself every
REFRESH_S seconds until the campaign has finished. It lives in the report layer for the explorer.

`ebd2n status` and `ebd2n dashboard CAMPAIGN_DIR` write it, and so does the console while the
workflow runs (snakemake_logger_plugin_ebd2n, every 20 s). The explorer's curves are read from each
run's metrics.jsonl and downsampled as the report's are, then kept per file with the file's identity
(ebd2n.fileidentity): a process that writes the page again parses only the files that changed, those
of the running runs, and holds a few hundred points per run, never the records
(benchmarks/live_explorer.py measures it at 1,000 runs).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from markupsafe import Markup

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.grid import grid_from_record
from ebd2n.campaign.runs import run_label
from ebd2n.campaign.status import CampaignStatus
from ebd2n.campaign.status_display import COLUMNS, LOSSES, campaign_line, finished, row_cells
from ebd2n.campaign.status_plan import read_plan
from ebd2n.fileidentity import FileIdentity
from ebd2n.layout import CampaignPaths
from ebd2n.report.explore import METRICS, curves, explorer
from ebd2n.report.html import template_environment
from ebd2n.report.plotly_embed import plotly_tag
from ebd2n.train.records import TYPE, Metrics

REFRESH_S = 30
"""How often the page reloads itself."""
CURVE = "training loss"
"""The table's last column: each run's training loss by step, drawn (live, as the page reloads)."""
CURVE_SIZE = (120, 28)
_SCHEMA = {TYPE: pl.String, "step": pl.Int64, **{name: pl.Float64 for name in METRICS}}
"""The record fields the explorer's curves read; a value of another type is null."""


@dataclass(frozen=True)
class Drawing:
    """What the page draws of one run, from one read of its metrics.jsonl."""

    curves: dict[str, list[list[float]]]
    """The explorer's (ebd2n.report.explore.curves)."""
    sparkline: Markup
    """The table's training-loss cell."""


_DRAWN: dict[Path, tuple[FileIdentity, Drawing]] = {}
"""Each metrics.jsonl's drawing, with the identity of the file it was read from."""


def write_status_page(campaign_dir: Path, status: CampaignStatus) -> Path:
    """Write results/<campaign>/status.html for `status` (ebd2n.campaign.status.campaign_status) and
    return its path."""
    paths = CampaignPaths(Path(campaign_dir))
    drawn = {row.run: run_drawing(paths.run(row.run).metrics) for row in status.runs}
    explored = live_explorer(paths, status, drawn)
    page = (
        template_environment()
        .get_template("status.html.j2")
        .render(
            campaign=status.campaign,
            line=campaign_line(status),
            brackets=status.brackets,
            finished=finished(status),
            refresh_s=REFRESH_S,
            written=time.strftime("%Y-%m-%d %H:%M:%S"),
            columns=(*COLUMNS, CURVE),
            rows=[
                {
                    "state": row.state,
                    "run": _run_cell(row.run, paths),
                    "cells": row_cells(row)[1:],
                    "curve": drawn[row.run].sparkline if drawn[row.run] else "",
                }
                for row in status.runs
            ],
            losses=LOSSES,
            explore=explored,
            plotly=plotly_tag(paths.status_page, paths.report) if explored["runs"] else None,
        )
    )
    atomic_write_text(paths.status_page, page)
    return paths.status_page


def live_explorer(paths: CampaignPaths, status: CampaignStatus, drawn: dict[str, Drawing | None]) -> dict[str, Any]:
    """The explorer's payload (ebd2n.report.explore.explorer) of every run that has recorded a
    curve so far (`drawn`: each run's `run_drawing`), at its grid point from the campaign's plan, in
    its state (a diverged run is a mark)."""
    grid = grid_from_record(read_plan(paths.directory))  # there: `status` was read from it
    planned = {run.id: run for run in grid.runs()}
    runs = []
    for row in status.runs:
        drawing = drawn[row.run]
        if drawing is None or not any(xs for xs, _ in drawing.curves.values()):
            continue  # a run with nothing recorded yet
        run = planned[row.run]
        runs.append(
            {
                "mode": run.mode,
                "lr": run.lr,
                "beta2": run.beta2,
                **grid.columns(run),
                "seed": run.seed,
                "preset": run.preset,
                "run": row.run,
                "status": row.state,
                "final": row.full_loss,
                "curves": drawing.curves,
            }
        )
    return explorer(runs, ["beta2", *(axis.name for axis in grid.axes)], bool(grid.presets))


def run_drawing(metrics: Path) -> Drawing | None:
    """What the page draws of one metrics.jsonl (None: no such file), read again only when the
    file's identity changed since this process last read it."""
    try:
        identity = FileIdentity.of(metrics)
    except FileNotFoundError:
        _DRAWN.pop(metrics, None)
        return None
    cached = _DRAWN.get(metrics)
    if cached is None or cached[0] != identity:
        records = Metrics(metrics).records
        drawn = curves(pl.from_dicts(records, schema=_SCHEMA, strict=False) if records else None)
        cached = _DRAWN[metrics] = (identity, Drawing(drawn, _sparkline(*drawn["loss"])))
    return cached[1]


def _sparkline(xs: list[float], ys: list[float | None]) -> Markup:
    """A run's training loss by step (its explorer curve) as a small inline line chart; empty with
    under two finite points."""
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if len(points) < 2:
        return Markup("")
    (first, start), (last, end) = points[0], points[-1]
    low, high = min(y for _, y in points), max(y for _, y in points)
    width, height = CURVE_SIZE
    line = " ".join(
        f"{width * (x - first) / ((last - first) or 1):.1f},{2 + (height - 4) * (high - y) / ((high - low) or 1):.1f}"
        for x, y in points
    )
    text = f"training loss by step: {start:.3f} to {end:.3f} (lowest {low:.3f})"
    return Markup(
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{text}"><title>{text}</title><polyline fill="none" stroke="#1f5fa8" '
        f'stroke-width="1.5" points="{line}"/></svg>'
    )


def _run_cell(run_id: str, paths: CampaignPaths) -> Markup:
    """The run id, a link to the run's dashboard (or live page) once it has one; its grid point on hover."""
    label = run_label(run_id)
    title = f' title="{html.escape(label)}"' if label else ""
    run = paths.run(run_id)
    dashboard = run.dashboard if run.dashboard.is_file() else run.live_dashboard  # a run still training: its live page
    if not dashboard.is_file():
        return Markup(f"<span{title}>{html.escape(run_id)}</span>")
    href = html.escape(dashboard.relative_to(paths.directory).as_posix())
    return Markup(f'<a href="{href}"{title}>{html.escape(run_id)}</a>')
