"""The run dashboard's figures: Plotly specs of its curves, each with the table its "Table view" shows.

Per-batch series are down-sampled for plotting only; each per-batch table holds every batch,
packed (gzip, base64) so a long run's page stays small.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from typing import Any

from ebd2n.report.html import finite, fixed, percent, scientific
from ebd2n.report.plotly_embed import MODEBAR_BAND, figure_json

MAX_POINTS = 2000
"""Most points a per-batch curve draws; more would slow the page without showing more."""
TREND_STRETCHES = 200
"""A per-batch curve of more batches than twice this also draws its mean over this many stretches."""


def run_figures(steps: list[dict[str, Any]], epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's figures, in order, from a run's step and epoch records."""
    spread = [_spread_figure(epochs)] if any("consensus_distance" in epoch for epoch in epochs) else []
    return [
        _loss_figure(steps),
        _accuracy_figure(steps),
        _optimizer_figure(steps),
        _validation_figure(epochs),
        _throughput_figure(epochs),
        *spread,
    ]


def downsample(points: list[tuple[int, float]], limit: int = MAX_POINTS) -> list[tuple[int, float]]:
    """At most `limit` points, in order: each bucket keeps its lowest and highest, so spikes stay visible."""
    if len(points) <= limit:
        return points
    size = math.ceil(len(points) / (limit // 2))
    kept: list[tuple[int, float]] = []
    for start in range(0, len(points), size):
        bucket = points[start : start + size]
        extremes = {min(bucket, key=lambda point: point[1]), max(bucket, key=lambda point: point[1])}
        kept.extend(sorted(extremes))
    return kept


def stretch_means(points: list[tuple[int, float]], size: int) -> list[tuple[float, float]]:
    """Mean position and value of each run of `size` points: the trend under per-batch noise."""
    return [
        (sum(x for x, _ in chunk) / len(chunk), sum(y for _, y in chunk) / len(chunk))
        for chunk in (points[start : start + size] for start in range(0, len(points), size))
    ]


def _figure(
    key: str,
    title: str,
    note: str,
    data: list[dict[str, Any]],
    layout: dict[str, Any],
    columns: list[str],
    rows: list[list[str]],
    packed: bool = False,
) -> dict[str, Any]:
    """A figure and its table view; `packed` tables (one row per batch) travel compressed, see `pack_rows`."""
    # the legend goes under the plot: the band above it is the toolbar's (MODEBAR_BAND)
    base = {
        "height": 400,
        "margin": {"l": 70, "r": 70, "t": MODEBAR_BAND, "b": 50},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
    }
    return {
        "id": key,
        "title": title,
        "note": note,
        "json": figure_json({"data": data, "layout": base | layout}),
        "columns": columns,
        "rows": [] if packed else rows,
        "packed": pack_rows(rows) if packed else None,
    }


def pack_rows(rows: list[list[str]]) -> str:
    """Table rows as base64 of gzip-compressed JSON, unpacked by the page when its table is first shown.

    A per-batch table holds every batch: as HTML rows it would make each page of a 12,000-batch
    run 1.7 MB, packed it takes about a seventh of that. No timestamp in the gzip header, so an
    unchanged run gives the same page."""
    text = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
    return base64.b64encode(gzip.compress(text.encode("utf-8"), mtime=0)).decode("ascii")


def _series(steps: list[dict[str, Any]], field: str) -> list[tuple[int, float]]:
    return [(step["step"], step[field]) for step in steps if finite(step[field])]


def _line(points: list[tuple[float, float]], name: str, color: str, width: float = 1) -> dict[str, Any]:
    """A curve, its values to 6 significant digits (more than a plot or its hover shows; the table has the data)."""
    return {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "line": {"color": color, "width": width},
        "x": [_short(x) for x, _ in points],
        "y": [_short(y) for _, y in points],
    }


def _short(value: float) -> float:
    return value if isinstance(value, int) else float(f"{value:.6g}")


def _batch_traces(points: list[tuple[int, float]], name: str, colors: tuple[str, str]) -> list[dict[str, Any]]:
    """Every batch (down-sampled), light under a dark trend line when the series is long enough to be noisy."""
    if len(points) <= 2 * TREND_STRETCHES:
        return [_line(points, name, colors[1])]
    size = math.ceil(len(points) / TREND_STRETCHES)
    return [
        _line(downsample(points), name, colors[0]),
        _line(stretch_means(points, size), f"mean over {size:,} batches", colors[1], width=2),
    ]


def _sampling_note(count: int) -> str:
    if count <= MAX_POINTS:
        return f"All {count:,} batches are drawn."
    return (
        f"{count:,} batches, drawn as {MAX_POINTS:,} points that keep each stretch's lowest and highest value; "
        "the table view lists every batch."
    )


def _loss_figure(steps: list[dict[str, Any]]) -> dict[str, Any]:
    points = _series(steps, "loss")
    skipped = [step["step"] for step in steps if step["skipped"]]
    data = _batch_traces(points, "training loss", ("#a6c8e6", "#1f5fa8"))
    layout = {
        "xaxis": {"title": {"text": "batch (optimizer step)"}},
        "yaxis": {"title": {"text": "loss (nats)"}},
        "shapes": [_marker_line(step) for step in skipped],
    }
    note = _sampling_note(len(steps)) + (
        f" Red dotted lines mark the {len(skipped):,} skipped step(s)." if skipped else ""
    )
    rows = [
        [
            f"{s['step']:,}",
            fixed(s["loss"], 4),
            scientific(s["lr"]),
            fixed(s["grad_norm"], 3),
            "skipped" if s["skipped"] else "",
        ]
        for s in steps
    ]
    return _figure(
        "batch-loss",
        "Per-batch training loss",
        note,
        data,
        layout,
        ["Step", "Loss", "LR", "Gradient norm", "Skipped"],
        rows,
        packed=True,
    )


def _marker_line(step: int) -> dict[str, Any]:
    """A full-height vertical line at a skipped step (its loss may be NaN, so no point can mark it)."""
    return {
        "type": "line",
        "x0": step,
        "x1": step,
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "line": {"color": "#d62728", "width": 1, "dash": "dot"},
    }


def _accuracy_figure(steps: list[dict[str, Any]]) -> dict[str, Any]:
    points = [(step, 100 * value) for step, value in _series(steps, "accuracy")]
    data = _batch_traces(points, "token accuracy", ("#b5dfb0", "#1e7a3c"))
    layout = {
        "xaxis": {"title": {"text": "batch (optimizer step)"}},
        "yaxis": {"title": {"text": "token accuracy (%)"}},
    }
    rows = [[f"{s['step']:,}", percent(s["accuracy"])] for s in steps]
    return _figure(
        "batch-accuracy",
        "Per-batch token accuracy",
        _sampling_note(len(steps)),
        data,
        layout,
        ["Step", "Token accuracy"],
        rows,
        packed=True,
    )


def _optimizer_figure(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Gradient norm per batch (log axis: spikes span decades) under the LR schedule the trainer applied."""
    data = _batch_traces(_series(steps, "grad_norm"), "gradient norm", ("#f4b6b6", "#b3261e"))
    data.append({**_line(downsample(_series(steps, "lr")), "learning rate", "#1f5fa8", width=2), "yaxis": "y2"})
    layout = {
        "xaxis": {"title": {"text": "batch (optimizer step)"}},
        # three ticks' worth of range: Plotly ticks 1, 2 and 5 of a decade (never all nine digits,
        # whose labels collide), each labelled in full (its default labels 0.4 as "4")
        "yaxis": {
            "title": {"text": "gradient norm (before clipping)"},
            "type": "log",
            "nticks": 3,
            "minorloglabels": "complete",
        },
        "yaxis2": {
            "title": {"text": "learning rate"},
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "tickformat": ".1e",
            "rangemode": "tozero",
        },
    }
    rows = [[f"{s['step']:,}", scientific(s["lr"]), fixed(s["grad_norm"], 3)] for s in steps]
    return _figure(
        "optimizer",
        "Gradient norm and learning-rate schedule",
        _sampling_note(len(steps)),
        data,
        layout,
        ["Step", "LR", "Gradient norm"],
        rows,
        packed=True,
    )


def _spread_figure(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """A packed run's K local models: how far apart they are after each epoch (the only spread its
    metrics record; per-model losses are not recorded)."""
    points = [(e["epoch"], e.get("consensus_distance")) for e in epochs]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "consensus distance",
            "x": [x for x, _ in points],
            "y": [_finite_or_none(y) for _, y in points],
            "line": {"color": "#8c564b"},
        }
    ]
    layout = {"xaxis": {"title": {"text": "epoch"}, "dtick": 1}, "yaxis": {"title": {"text": "consensus distance"}}}
    rows = [[str(x), scientific(y)] for x, y in points]
    return _figure(
        "spread",
        "Spread of the K local models",
        "Consensus distance after each epoch: the root mean square, over the K local models, of their "
        "parameters' distance from the models' mean (0: identical models).",
        data,
        layout,
        ["Epoch", "Consensus distance"],
        rows,
    )


def _validation_figure(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    x = [e["epoch"] for e in epochs]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "train loss (epoch mean)",
            "x": x,
            "y": [_finite_or_none(e["train_loss"]) for e in epochs],
            "line": {"color": "#9ecae1", "dash": "dot"},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "subset validation loss",
            "x": x,
            "y": [_finite_or_none(e["val_loss"]) for e in epochs],
            "line": {"color": "#1f77b4"},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "subset validation accuracy",
            "x": x,
            "yaxis": "y2",
            "y": [100 * e["val_accuracy"] for e in epochs],
            "line": {"color": "#2ca02c"},
        },
    ]
    layout = {
        "xaxis": {"title": {"text": "epoch"}, "dtick": 1},
        "yaxis": {"title": {"text": "loss (nats)"}},
        "yaxis2": {
            "title": {"text": "token accuracy (%)"},
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "tickmode": "auto",
        },
    }
    rows = [
        [
            str(e["epoch"]),
            f"{e['tokens']:,}",
            fixed(e["train_loss"], 4),
            fixed(e["val_loss"], 4),
            percent(e["val_accuracy"]),
        ]
        for e in epochs
    ]
    return _figure(
        "epoch-validation",
        "Validation after each epoch",
        "Loss and token accuracy on the fixed validation subset, after each epoch.",
        data,
        layout,
        ["Epoch", "Tokens", "Train loss", "Subset val loss", "Subset val accuracy"],
        rows,
    )


def _throughput_figure(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens/s as a line, batches/s as dots; both axes start at zero with the same headroom, so with a fixed
    batch size the dots sit on the line and either axis reads the same curve."""
    x = [e["epoch"] for e in epochs]
    tokens, batches = [e["tokens_per_s"] for e in epochs], [e["batches_per_s"] for e in epochs]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "tokens/s",
            "x": x,
            "y": tokens,
            "line": {"color": "#7b4fa6", "width": 2},
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "batches/s",
            "x": x,
            "yaxis": "y2",
            "y": batches,
            "marker": {"color": "#e07b00", "size": 9},
        },
    ]
    layout = {
        "xaxis": {"title": {"text": "epoch"}, "dtick": 1},
        "yaxis": {"title": {"text": "tokens/s"}, "range": _headroom(tokens), "tickformat": ",.0f"},
        "yaxis2": {
            "title": {"text": "batches/s"},
            "overlaying": "y",
            "side": "right",
            "range": _headroom(batches),
            "showgrid": False,
            "tickmode": "auto",
        },
    }
    rows = [
        [str(e["epoch"]), f"{e['tokens_per_s']:,.0f}", f"{e['batches_per_s']:,.2f}", f"{e['wall_s']:,.1f}"]
        for e in epochs
    ]
    return _figure(
        "throughput",
        "Throughput per epoch",
        "Training time only (validation excluded): tokens/s on the left axis, batches/s on the right.",
        data,
        layout,
        ["Epoch", "Tokens/s", "Batches/s", "Wall (s)"],
        rows,
    )


def _headroom(values: list[float]) -> list[float]:
    return [0, 1.1 * max(values, default=1.0)]


def _finite_or_none(value: float | None) -> float | None:
    """Plotly JSON has no NaN or infinity: such points become gaps."""
    return value if finite(value) else None
