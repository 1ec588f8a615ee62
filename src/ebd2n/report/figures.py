"""Static figures (PNG and PDF) for papers and slides: grid heatmaps, winners' curves, LR optima,
successive-halving rungs and a scaling campaign's LR law.

Figures are drawn on `matplotlib.figure.Figure` directly (Agg for PNG, the PDF backend for PDF),
never through pyplot, so no global state or display is touched. PDF creation dates are left out,
so regenerating a report gives byte-identical files.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import polars as pl
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import EngFormatter, MaxNLocator, NullLocator

from ebd2n.campaign.analysis import column_labels, point_axes, point_key
from ebd2n.outcomes import DIVERGED
from ebd2n.report.plotly_figures import (
    PALETTE,
    converged_range,
    halving_series,
    panel_title,
    series_label,
    winner_curves,
)

_CMAP = colormaps["viridis_r"].with_extremes(bad="white")  # low loss bright; untested cells blank
_METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "Producer": None, "Creator": None}}


def heatmaps(
    groups: pl.DataFrame,
    learning_rates: dict[str, list[float]],
    columns: list[tuple],
    selection: dict[str, dict[str, Any]],
) -> dict[str, bytes]:
    """One panel per mode: mean loss over its LR x other axes grid (`columns`: each value of the axes
    besides mode and LR, beta2's alone in most campaigns), annotated; untested cells blank."""
    modes = list(learning_rates)
    rows = max(len(lrs) for lrs in learning_rates.values())
    figure = Figure(figsize=(0.6 + 1.1 * len(columns) * len(modes) + 1.2 * len(modes), 1.4 + 0.34 * rows))
    axes = figure.subplots(1, len(modes), squeeze=False)[0]
    losses = groups["mean_loss"].drop_nulls().drop_nans()
    scale = (losses.min(), losses.max()) if not losses.is_empty() else (None, None)  # one colour scale for every mode
    for ax, mode in zip(axes, modes, strict=True):
        part = groups.filter(pl.col("mode") == mode)
        _heatmap_panel(figure, ax, part, mode, learning_rates[mode], columns, selection.get(mode), scale)
    partial = "; * not every seed" if not groups["eligible"].all() else ""
    figure.suptitle(f"Mean final full-validation loss (nats) over seeds; winner outlined{partial}", fontsize=10)
    figure.tight_layout()
    if (groups["outcome"] == DIVERGED).any():
        mark = Patch(facecolor=_DIVERGED_FILL, hatch="xx", edgecolor=_DIVERGED_LINE, label="diverged (step)")
        figure.legend(handles=[mark], loc="lower right", fontsize=7, frameon=False)
    return _save(figure)


def curves(table: pl.DataFrame) -> dict[str, bytes]:
    """Winners' epoch-subset validation loss against tokens: mean line and a band of one sample SD."""
    figure = Figure(figsize=(7.5, 4.5))
    ax = figure.subplots()
    for index, (name, part) in enumerate(winner_curves(table)):
        color = PALETTE[index % len(PALETTE)]
        tokens = part["tokens"].to_numpy()
        mean = part["mean_loss"].to_numpy()
        sd = part["std_loss"].fill_null(0.0).to_numpy()
        ax.fill_between(tokens, mean - sd, mean + sd, color=color, alpha=0.22, linewidth=0)
        ax.plot(tokens, mean, color=color, linewidth=1.6, label=name)
    if table.is_empty():
        ax.text(0.5, 0.5, "no grid point has every seed yet", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(frameon=False)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_xlabel("training tokens")
    ax.set_ylabel("subset validation loss (nats)")
    ax.set_title("Winners' epoch-subset validation loss: mean ± one sample SD over seeds", fontsize=10)
    ax.grid(alpha=0.3)
    figure.tight_layout()
    return _save(figure)


def _heatmap_panel(
    figure: Figure,
    ax: Any,
    groups: pl.DataFrame,
    mode: str,
    lrs: list[float],
    columns: list[tuple],
    winner: dict | None,
    scale: tuple[float | None, float | None] = (None, None),
) -> None:
    axes = point_axes(groups)
    cells = {(row["lr"], point_key(row, axes)): row for row in groups.iter_rows(named=True)}
    values = np.full((len(lrs), len(columns)), np.nan)
    for i, lr in enumerate(lrs):
        for j, b in enumerate(columns):
            row = cells.get((lr, b))
            if row and row["outcome"] == DIVERGED:
                ax.add_patch(
                    Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        facecolor=_DIVERGED_FILL,
                        hatch="xx",
                        edgecolor=_DIVERGED_LINE,
                        linewidth=0,
                    )
                )
                step = row.get("diverged_step")
                ax.text(
                    j,
                    i,
                    DIVERGED + (f"\nstep {step}" if step is not None else ""),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color=_DIVERGED_LINE,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
                )
            elif row and row["mean_loss"] is not None:
                values[i, j] = row["mean_loss"]
    masked = np.ma.masked_invalid(values)
    image = ax.imshow(masked, cmap=_CMAP, aspect="auto", origin="lower", vmin=scale[0], vmax=scale[1])
    low, high = (np.nanmin(values), np.nanmax(values)) if masked.count() else (0.0, 1.0)
    for i, lr in enumerate(lrs):
        for j, b in enumerate(columns):
            if math.isnan(values[i, j]):
                continue
            shade = image.cmap(image.norm(values[i, j]))
            dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
            mark = "" if cells[(lr, b)]["eligible"] else "*"
            ax.text(
                j,
                i,
                f"{values[i, j]:.4f}{mark}",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
            )
    if winner is not None:
        i, j = lrs.index(winner["lr"]), columns.index(point_key(winner, axes))
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#d62728", linewidth=2.2))
    title, labels = column_labels(columns, axes, "\n")
    ax.set_xticks(range(len(columns)), labels)
    ax.set_yticks(range(len(lrs)), [f"{lr:g}" for lr in lrs])
    ax.set_xlabel(title)
    ax.set_ylabel("peak learning rate")
    ax.set_title(mode, fontsize=10)
    if high > low:
        bar = figure.colorbar(image, ax=ax, fraction=0.08, pad=0.03)
        bar.set_label("mean loss (nats)", fontsize=8)
        bar.locator = MaxNLocator(nbins=6)
        bar.update_ticks()


_DIVERGED_FILL, _DIVERGED_LINE = "#eeeeee", "#b00020"
"""How a diverged point is drawn: a hatched cell, or a cross on the LR axis, in this red."""


def _save(figure: Figure) -> dict[str, bytes]:
    out = {}
    for fmt in ("png", "pdf"):
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt, dpi=150, metadata=_METADATA[fmt])
        out[fmt] = buffer.getvalue()
    return out


def lr_optimum(panels: list[dict[str, Any]]) -> dict[str, bytes]:
    """One panel per mode: final loss against LR (log axis) with every seed, mean ± SD, the fitted
    parabola and the optimum's band: its 95 % interval, or the bracket of an unchecked optimum (open
    ends run to the axis edge). The x axis spans the converged LRs; an LR that diverged beyond them
    is an ✕ at the axis edge with its LR written, one inside them an ✕ at its LR."""
    figure = Figure(figsize=(0.6 + 4.2 * max(1, len(panels)), 3.9))
    axes = figure.subplots(1, max(1, len(panels)), squeeze=False)[0]
    for index, (ax, panel) in enumerate(zip(axes[: len(panels)], panels, strict=True)):
        color = PALETTE[index % len(PALETTE)]
        points = panel["points"]
        ax.scatter(panel["seeds"]["lr"], panel["seeds"]["loss"], s=12, color=color, alpha=0.45, label="seeds")
        ax.errorbar(
            [p["lr"] for p in points],
            [p["mean_loss"] for p in points],
            yerr=[p["std_loss"] or 0.0 for p in points],
            fmt="o",
            color=color,
            capsize=3,
            label="mean ± SD",
        )
        if panel["curve"]["lr"]:
            ax.plot(panel["curve"]["lr"], panel["curve"]["loss"], color="black", linewidth=1.2, label="quadratic fit")
        ax.set_xscale("log")
        left, right = converged_range(panel)
        if panel["low"] is not None or panel["high"] is not None:
            ax.axvspan(
                panel["low"] or left,
                panel["high"] or right,
                color=color,
                alpha=0.15,
                linewidth=0,
                label="95 % interval" if panel["checked"] else "bracket (unchecked)",
            )
        if panel["estimate"] is not None:
            label = f"{'optimum' if panel['checked'] else 'vertex'} {panel['estimate']:.3g}"
            ax.axvline(panel["estimate"], color=color, linestyle="--", linewidth=1.2, label=label)
        inside = _diverged_marks(ax, panel[DIVERGED], left, right)
        ax.set_xlim(left, right)
        ticks = sorted([p["lr"] for p in points] + inside)
        ax.set_xticks(ticks, [f"{lr:g}" for lr in ticks], rotation=45, fontsize=7)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("peak learning rate (log scale; ticks at the LRs drawn)")
        ax.set_ylabel("final full-validation loss (nats)")
        ax.set_title(panel_title(panel), fontsize=10, pad=14)
        if panel["estimate"] is None:  # above the plot area, under the title: clear of every point
            ax.text(
                0.5,
                1.01,
                f"no fitted optimum: {panel['reason']}",
                ha="center",
                va="bottom",
                fontsize=6.5,
                transform=ax.transAxes,
                wrap=True,
            )
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=7)
    if not panels:
        axes[0].text(
            0.5, 0.5, "no grid point has every seed yet", ha="center", va="center", transform=axes[0].transAxes
        )
    figure.suptitle(
        "Fitted LR optimum per mode: quadratic in ln(LR) near the best point, 95 % band or unchecked bracket",
        fontsize=10,
    )
    figure.tight_layout()
    return _save(figure)


def _diverged_marks(ax: Any, diverged: list[dict[str, Any]], left: float, right: float) -> list[float]:
    """An ✕ on the top edge at each diverged LR inside the x range, and one at the left or right
    edge, its LRs written beside it, for those beyond; the LRs inside (ticked) are returned."""
    inside = [d["lr"] for d in diverged if left <= d["lr"] <= right]
    marks = [(lr, 0.97, ax.get_xaxis_transform()) for lr in inside]
    for edge, group, align in (
        (0.0, [d["lr"] for d in diverged if d["lr"] < left], "left"),
        (1.0, [d["lr"] for d in diverged if d["lr"] > right], "right"),
    ):
        if group:
            marks.append((edge, 0.97, ax.transAxes))
            words = f"LR {', '.join(f'{lr:g}' for lr in group)} {DIVERGED}"
            text = f"{words} →" if align == "right" else f"← {words}"
            ax.text(edge, 0.92, text, ha=align, va="top", fontsize=6.5, color=_DIVERGED_LINE, transform=ax.transAxes)
    for number, (x, y, transform) in enumerate(marks):
        ax.scatter(
            [x],
            [y],
            marker="x",
            s=40,
            color=_DIVERGED_LINE,
            transform=transform,
            label=DIVERGED if number == 0 else None,
            clip_on=False,
        )
    return inside


def halving(brackets: list[dict[str, Any]]) -> dict[str, bytes]:
    """One panel per bracket: each rung's mean subset loss against LR (log axis), one colour per
    rung; a filled circle trained on, a cross stopped there."""
    figure = Figure(figsize=(max(6.4, 0.6 + 4.6 * len(brackets)), 4.4))
    axes = figure.subplots(1, max(1, len(brackets)), squeeze=False)[0]
    for ax, bracket in zip(axes, brackets, strict=False):
        for rung, beta2, points in halving_series(bracket):
            color = PALETTE[bracket["rungs"].index(rung) % len(PALETTE)]
            style = ("-", "--", ":", "-.")[sorted({p["beta2"] for p in bracket["points"]}).index(beta2) % 4]
            lrs = [p["lr"] for p in points]
            losses = [p["rungs"][str(rung["epoch"])]["mean_loss"] for p in points]
            ax.plot(lrs, losses, color=color, linestyle=style, linewidth=1.1, label=series_label(bracket, rung, beta2))
            for lr, loss, point in zip(lrs, losses, points, strict=True):
                if point["rungs"][str(rung["epoch"])]["continued"]:
                    ax.scatter([lr], [loss], color=color, s=28, zorder=3)
                else:
                    ax.scatter([lr], [loss], color=color, marker="x", s=40, zorder=3)
        tested = sorted({p["lr"] for p in bracket["points"]})
        ax.set_xscale("log")
        ax.set_xticks(tested, [f"{lr:g}" for lr in tested], rotation=45, fontsize=7)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("peak learning rate (log scale)")
        ax.set_ylabel("mean subset validation loss (nats)")
        ax.set_title(bracket["bracket"], fontsize=10)
        ax.grid(alpha=0.3)
        if bracket["rungs"]:
            ax.legend(frameon=False, fontsize=7)
        else:
            ax.text(0.5, 0.5, "no rung decided yet", ha="center", va="center", transform=ax.transAxes)
    figure.suptitle(
        "Successive halving: mean subset loss over seeds at each rung\n(dot: trained on; cross: stopped there)",
        fontsize=10,
    )
    figure.tight_layout()
    return _save(figure)


def lr_law(plot: dict[str, Any]) -> dict[str, bytes]:
    """One mode and beta2's LR law (ebd2n.report.lr_law_report.law_plot) as PNG and PDF."""
    return _save(lr_law_figure(plot))


def lr_law_figure(plot: dict[str, Any]) -> Figure:
    """The LR law on log-log axes: each cell's fitted optimum with its 95 % interval as error bars, one
    colour per D, the law's line through each (dashed where it extrapolates to the next cell) and the
    next cell's prediction as an open diamond; a Figure, so its drawn points can be counted."""
    figure = Figure(figsize=(6.4, 4.4))
    ax = figure.subplots()
    for index, series in enumerate(plot["series"]):
        color = PALETTE[index % len(PALETTE)]
        cells = series["cells"]
        ax.errorbar(
            cells["x"], cells["lr"], yerr=_spread(cells), fmt="o", color=color, capsize=3, label=series["label"]
        )
        ax.plot(series["line"]["x"], series["line"]["lr"], color=color, linewidth=1.2)
        ax.plot(series["beyond"]["x"], series["beyond"]["lr"], color=color, linewidth=1.2, linestyle="--")
    ax.plot([], [], color="0.3", linewidth=1.2, label="fitted law, in each series' colour (dashed: extrapolated)")
    following = plot["next"]
    ax.errorbar(
        [following["x"]],
        [following["lr"]],
        yerr=_spread({key: [following[key]] for key in ("lr", "low", "high")}),
        fmt="D",
        color="black",
        markerfacecolor="white",
        capsize=3,
        label=following["label"],
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(
        "model size N (parameters, log scale)" if plot["axis"] == "parameters" else "training tokens D (log scale)"
    )
    ax.set_ylabel("optimal peak learning rate (log scale)")
    ax.set_title(plot["title"], fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(frameon=False, fontsize=7)
    figure.suptitle("Fitted LR optimum per cell with its 95 % interval (seeds and misfit), and the law", fontsize=10)
    figure.tight_layout()
    return figure


def _spread(points: dict[str, list[float]]) -> list[list[float]]:
    """Error bars below and above each estimate (none where a resampled interval misses it)."""
    return [
        [max(0.0, lr - low) for lr, low in zip(points["lr"], points["low"], strict=True)],
        [max(0.0, high - lr) for lr, high in zip(points["lr"], points["high"], strict=True)],
    ]
