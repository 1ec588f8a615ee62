"""The campaign page's Explore section: every run's curves from the metrics store, for the page to
overlay, group, smooth and filter; and the parallel-coordinates view of the axes against the loss.
The status page draws the same explorer over the runs so far (ebd2n.report.status_page): both build
its payload with `explorer` from per-run `curves`.

The curves are the Parquet store's tables, as the report just wrote them, downsampled for the page:
per bucket of steps the lowest and the highest point, so spikes and the curve's shape survive at a
few hundred points per run. They travel packed (gzip, base64), as the run dashboard's tables do.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
import pyarrow as pa

from ebd2n.campaign.results import CampaignResults
from ebd2n.report.dashboard_figures import pack_rows
from ebd2n.report.plotly_embed import figure_json
from ebd2n.train.records import TYPE, RecordType

BUCKETS = 120
"""Buckets of a per-step curve on the page: at most two points each (the bucket's min and max)."""
METRICS = {
    "loss": (RecordType.STEP, "training loss per step (nats)"),
    "val_loss": (RecordType.EPOCH, "subset validation loss per epoch (nats)"),
}
"""The curves the page offers: record column -> (record type, label)."""


def run_axes(axes: list[str]) -> tuple[str, ...]:
    """What runs are filtered by on the page: mode, LR, the other axes (beta2, the further axes),
    seed and preset (preset only in scaling campaigns)."""
    return ("mode", "lr", *axes, "seed", "preset")


def groupings(axes: list[str]) -> tuple[tuple[tuple[str, ...], str], ...]:
    """The page's grouping choices, the first one drawn at load: by grid point, by mode and LR, by
    each axis alone, and per preset."""
    return (
        (("mode", "lr", *axes), " (mean over seeds)"),
        (("mode", "lr"), ""),
        (("mode",), ""),
        (("lr",), ""),
        *(((axis,), "") for axis in axes),
        (("preset", "mode", "lr", *axes), " (mean over seeds)"),
        (("preset",), ""),
    )


_NAMES = {"lr": "LR"}


def explore(campaign: CampaignResults, store: dict[str, pa.Table]) -> dict[str, Any]:
    """The page's packed curve data (runs, their grid point and each metric's downsampled curve)
    from the store's tables (ebd2n.report.store.write_store), and its parallel-coordinates figure."""
    runs = []
    for row in campaign.runs.iter_rows(named=True):
        table = store.get(row["directory"])
        runs.append(
            {
                **{axis: row[axis] for axis in run_axes(campaign.axes)},
                "run": row["run"],
                "status": row["status"],
                "final": _finite(row["loss"]),
                "curves": curves(pl.from_arrow(table) if table is not None else None),
            }
        )
    explored = explorer(runs, campaign.axes, bool(campaign.presets))
    return {**explored, "parallel": figure_json(parallel_figure(campaign.runs, campaign.axes))}


def explorer(runs: list[dict[str, Any]], axes: list[str], presets: bool) -> dict[str, Any]:
    """What explore.html.j2 and explore.js draw, from one entry per run: its `run_axes` values, `run`,
    `status` (a diverged run is a mark) and `curves`. The campaign report and the status page
    (ebd2n.report.status_page, while the campaign trains) both build theirs here."""
    shown = [axis for axis in run_axes(axes) if axis != "preset" or presets]
    return {
        "packed": pack_rows(runs),
        "metrics": [{"key": key, "label": label} for key, (_, label) in METRICS.items()],
        "axes_json": figure_json(shown),
        "axes_words": ", ".join(axes),
        "groupings": [
            (",".join(fields), ", ".join(_NAMES.get(f, f) for f in fields) + note)
            for fields, note in groupings(axes)
            if set(fields) <= set(shown)
        ],
        "buckets": BUCKETS,
        "runs": len(runs),
    }


def curves(records: pl.DataFrame | None) -> dict[str, list[list[float]]]:
    """Each metric of METRICS downsampled from a run's records (`type`, `step` and the metrics'
    columns; None: no records yet)."""
    return {name: _curve(records, kind, name) for name, (kind, _) in METRICS.items()}


def _curve(records: pl.DataFrame | None, kind: str, column: str) -> list[list[float]]:
    """[xs, ys] of one metric: every point of a short curve, min and max per bucket of a long one."""
    if records is None or column not in records.columns:
        return [[], []]
    part = records.filter((pl.col(TYPE) == kind) & pl.col(column).is_not_null()).select(x="step", y=column)
    if part.height > 2 * BUCKETS:
        bucket = (pl.int_range(pl.len()) * BUCKETS // pl.len()).alias("bucket")
        ends = (
            part.with_columns(bucket)
            .group_by("bucket", maintain_order=True)
            .agg(low=pl.col("y").arg_min(), high=pl.col("y").arg_max(), x=pl.col("x"), y=pl.col("y"))
        )
        keep = [sorted({low, high}) for low, high in zip(ends["low"], ends["high"], strict=True)]
        xs = [x[i] for x, pick in zip(ends["x"], keep, strict=True) for i in pick]
        ys = [y[i] for y, pick in zip(ends["y"], keep, strict=True) for i in pick]
    else:
        xs, ys = part["x"].to_list(), part["y"].to_list()
    return [xs, [_finite(y, 5) for y in ys]]


def _finite(value: float | None, digits: int | None = None) -> float | None:
    """JSON-safe numbers (a diverged loss is null), rounded to significant digits when asked."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}") if digits else value


def parallel_figure(runs: pl.DataFrame, axes: list[str]) -> dict[str, Any]:
    """One line per run with a final loss across mode, log10 LR, the other axes and seed, coloured by that loss."""
    done = runs.filter(pl.col("loss").is_not_null() & pl.col("loss").is_finite())
    dimensions = [
        _categories("mode", done["mode"].to_list()),
        {"label": "log10 LR", "values": [round(math.log10(lr), 6) for lr in done["lr"]]},
        *(_dimension(axis, done[axis]) for axis in axes),
        _dimension("seed", done["seed"]),
        {"label": "final loss (nats)", "values": done["loss"].to_list()},
    ]
    return {
        "data": [
            {
                "type": "parcoords",
                "dimensions": dimensions,
                "line": {
                    "color": done["loss"].to_list(),
                    "colorscale": "Viridis",
                    "reversescale": True,
                    "showscale": True,
                    "colorbar": {"title": {"text": "loss"}, "thickness": 12},
                },
            }
        ],
        "layout": {"height": 380, "margin": {"l": 100, "r": 110, "t": 60, "b": 30}},
    }


def _dimension(axis: str, values: pl.Series) -> dict[str, Any]:
    """A grid axis (or the seed) ticked at the values it takes, never between them (seed 42.2);
    text or yes/no values (a variant's name) as categories."""
    if values.dtype.is_numeric() and not values.has_nulls():
        taken = sorted(set(values.to_list()))
        return {"label": axis, "values": values.to_list(), "tickvals": taken, "ticktext": [f"{v:g}" for v in taken]}
    return _categories(axis, [str(value) for value in values.to_list()])


def _categories(label: str, values: list[str]) -> dict[str, Any]:
    names = list(dict.fromkeys(values))
    indices = [names.index(value) for value in values]
    return {"label": label, "values": indices, "tickvals": list(range(len(names))), "ticktext": names}
