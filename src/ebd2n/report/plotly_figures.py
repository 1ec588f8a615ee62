"""The campaign report's interactive figures as Plotly specs (plain dicts; ebd2n.report.plotly_embed
puts them into a page). Apart from the embedding, which every run dashboard loads, because only the
campaign's pages draw these: loss grids, curves, LR optima, halving rungs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ebd2n.campaign.analysis import column_labels, outcome_text, point_axes, point_key, value_text
from ebd2n.outcomes import DIVERGED
from ebd2n.report.plotly_embed import MODEBAR_BAND

if TYPE_CHECKING:
    import polars as pl

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
"""Line colours shared by the interactive and the static figures, so a mode looks the same in both."""

_FONT = {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 12}
_NARROWEST_PLOT = 220
"""Width (CSS px) of the narrowest plot area an LR axis is drawn in, a 21rem column of the figure
grid less its margins: labels that would touch there are left out (their ticks stay)."""
_LABEL_PX = (7.5, 8)  # per character of _FONT's digits, and the room kept between two labels


def heatmap_figure(
    mode: str,
    groups: pl.DataFrame,
    lrs: list[float],
    columns: list[tuple],
    winner: dict[str, Any] | None,
    scale: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """One mode's LR x other axes grid of mean loss (`columns` as `figures.heatmaps`), annotated;
    untested cells are empty (null). `scale` (lowest, highest) puts every mode's heatmap on one
    colour scale, so colours compare across modes."""
    axes = point_axes(groups)
    title, labels = column_labels(columns, axes, "<br>")
    lines = max(label.count("<br>") for label in labels) if labels else 0
    cells = {(row["lr"], point_key(row, axes)): row for row in groups.iter_rows(named=True)}
    z, text, hover = [], [], []
    for lr in lrs:
        row_z, row_text, row_hover = [], [], []
        for b in columns:
            cell = cells.get((lr, b))
            mean = cell["mean_loss"] if cell and cell["outcome"] != DIVERGED else None
            row_z.append(mean)
            row_text.append("" if mean is None else f"{mean:.4f}" + ("" if cell["eligible"] else "*"))
            row_hover.append(_hover(cell))
        z.append(row_z)
        text.append(row_text)
        hover.append(row_hover)
    diverged = [cell for cell in cells.values() if cell["outcome"] == DIVERGED]
    shapes = []
    if winner is not None:
        i, j = lrs.index(winner["lr"]), columns.index(point_key(winner, axes))
        shapes.append(
            {
                "type": "rect",
                "x0": j - 0.5,
                "x1": j + 0.5,
                "y0": i - 0.5,
                "y1": i + 0.5,
                "line": {"color": "#d62728", "width": 3},
            }
        )
    return {
        "data": [
            {
                "type": "heatmap",
                "x": labels,
                "y": [f"{lr:g}" for lr in lrs],
                "z": z,
                "text": text,
                "texttemplate": "%{text}",
                "customdata": hover,
                "hovertemplate": f"LR %{{y}}, {title} %{{x}}<br>%{{customdata}}<extra></extra>",
                "colorscale": "Viridis",
                "reversescale": True,
                **({"zmin": scale[0], "zmax": scale[1]} if scale else {}),
                "hoverongaps": False,
                "colorbar": {"title": {"text": "mean loss (nats)", "side": "right"}, "thickness": 12, "nticks": 8},
            },
            *(
                [
                    _diverged_trace(
                        [labels[columns.index(point_key(cell, axes))] for cell in diverged],
                        [f"{cell['lr']:g}" for cell in diverged],
                        [outcome_text(cell) for cell in diverged],
                        title,
                    )
                ]
                if diverged
                else []
            ),
        ],
        "layout": {
            # just above the plot area, under the band the toolbar takes at the top (MODEBAR_BAND)
            "title": {"text": mode, "yref": "paper", "y": 1, "yanchor": "bottom", "pad": {"b": 8}},
            "xaxis": {"title": {"text": title}, "type": "category"},
            "yaxis": {"title": {"text": "peak learning rate"}, "type": "category"},
            "shapes": shapes,
            # the diverged cross's entry above the plot's right end, clear of the colour bar
            "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1, "yanchor": "bottom"},
            "height": max(280, 160 + 30 * len(lrs)),
            "margin": {"l": 80, "r": 20, "t": MODEBAR_BAND + 36, "b": 50 + 16 * lines},
            "font": _FONT,
        },
    }


def curves_figure(table: pl.DataFrame) -> dict[str, Any]:
    """Winners' subset validation loss: a ± one-SD band (two traces, filled) and the mean line."""
    data: list[dict[str, Any]] = []
    for index, (name, part) in enumerate(winner_curves(table)):
        mode = part["mode"][0]
        color = PALETTE[index % len(PALETTE)]
        tokens = part["tokens"].to_list()
        mean = part["mean_loss"].to_list()
        sd = part["std_loss"].fill_null(0.0).to_list()
        band = {
            "x": tokens,
            "mode": "lines",
            "line": {"width": 0},
            "hoverinfo": "skip",
            "showlegend": False,
            "legendgroup": mode,
        }
        data.append({**band, "type": "scatter", "y": [m - s for m, s in zip(mean, sd, strict=True)]})
        data.append(
            {
                **band,
                "type": "scatter",
                "y": [m + s for m, s in zip(mean, sd, strict=True)],
                "fill": "tonexty",
                "fillcolor": _translucent(color),
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": tokens,
                "y": mean,
                "customdata": sd,
                "name": name,
                "legendgroup": mode,
                "line": {"color": color, "width": 2},
                "marker": {"size": 4},
                "hovertemplate": "%{x:,} tokens<br>%{y:.4f} ± %{customdata:.4f} nats<extra>%{fullData.name}</extra>",
            }
        )
    return {
        "data": data,
        "layout": {
            "xaxis": {"title": {"text": "training tokens"}, "zeroline": False},
            "yaxis": {"title": {"text": "subset validation loss (nats)"}, "zeroline": False},
            "legend": {"orientation": "h", "y": -0.2},
            "height": 440,
            "margin": {"l": 70, "r": 20, "t": MODEBAR_BAND, "b": 60},
            "font": _FONT,
        },
    }


def winner_curves(table: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """curves.csv's lines, each named by its point: `synchronous: LR 0.004, beta2 0.95`."""
    columns = table.columns
    axes = columns[columns.index("lr") + 1 : columns.index("tokens")]
    lines = []
    for (mode, lr, *values), part in table.group_by(["mode", "lr", *axes], maintain_order=True):
        named = ", ".join(f"{axis} {value_text(value)}" for axis, value in zip(axes, values, strict=True))
        lines.append((f"{mode}: LR {lr:g}, {named}", part))
    return lines


def panel_title(panel: dict[str, Any]) -> str:
    """An LR-optimum panel's title: its mode and where on the other axes it is drawn."""
    at = ", ".join(f"{axis} {value_text(value)}" for axis, value in panel["at"].items())
    return f"{panel['mode']} ({at})"


def _diverged_trace(x: list[Any], y: list[Any], texts: list[str], title: str) -> dict[str, Any]:
    """The diverged points as red crosses, with their own legend entry ("diverged") and the step on hover."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": DIVERGED,
        "x": x,
        "y": y,
        "customdata": texts,
        "marker": {"symbol": "x", "size": 14, "color": DIVERGED_COLOR},
        "showlegend": True,
        "hovertemplate": f"LR %{{y}}, {title} %{{x}}<br>%{{customdata}}<extra></extra>",
    }


DIVERGED_COLOR = "#b00020"


def _hover(cell: dict[str, Any] | None) -> str:
    if cell is not None and cell["outcome"] == DIVERGED:
        return outcome_text(cell)
    if cell is None:
        return "not tested"
    if cell["mean_loss"] is None:
        return "no result yet"
    sd = f" ± {cell['std_loss']:.4f}" if cell["std_loss"] is not None else ""
    return f"{cell['mean_loss']:.4f}{sd} nats, {cell['seeds_completed']} seed(s), rank {cell['rank']}"


def _translucent(color: str, alpha: float = 0.2) -> str:
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"


def converged_range(panel: dict[str, Any]) -> tuple[float, float]:
    """The x range of an LR-optimum panel, on the page and in the static figure: its converged LRs,
    padded, and a band's finite ends up to a grid step or so beyond them (a band further out runs to
    the edge)."""
    lrs = [p["lr"] for p in panel["points"]] or [d["lr"] for d in panel[DIVERGED]] or [1.0]
    left, right = min(lrs) / 1.25, max(lrs) * 1.25
    if panel["low"] is not None:
        left = min(left, max(panel["low"] / 1.25, min(lrs) / 2.5))
    if panel["high"] is not None:
        right = max(right, min(panel["high"] * 1.25, max(lrs) * 2.5))
    return left, right


def lr_optimum_figure(panel: dict[str, Any], index: int) -> dict[str, Any]:
    """One mode's loss against LR (log axis, spanning the converged LRs): seeds, mean ± SD, the
    fitted parabola, the optimum and its 95 % interval, or unchecked its bracket, as a shaded band
    (an open end runs to the plot's edge); an ✕ on the top edge per diverged LR, at the side edge
    with its LR written for one beyond the range."""
    color = PALETTE[index % len(PALETTE)]
    points = panel["points"]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "seeds",
            "x": panel["seeds"]["lr"],
            "y": panel["seeds"]["loss"],
            "customdata": panel["seeds"]["seed"],
            "marker": {"color": _translucent(color, 0.5), "size": 6},
            "hovertemplate": "LR %{x:.4g}, seed %{customdata}<br>%{y:.4f} nats<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "mean ± SD",
            "x": [p["lr"] for p in points],
            "y": [p["mean_loss"] for p in points],
            "error_y": {"type": "data", "array": [p["std_loss"] or 0.0 for p in points], "color": color},
            "marker": {"color": color, "size": 9},
            "hovertemplate": "LR %{x:.4g}<br>mean %{y:.4f} nats<extra></extra>",
        },
    ]
    if panel["curve"]["lr"]:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "quadratic fit",
                "x": panel["curve"]["lr"],
                "y": panel["curve"]["loss"],
                "line": {"color": "black", "width": 1.5},
                "hoverinfo": "skip",
            }
        )
    shapes = []
    left, right = converged_range(panel)
    if panel["low"] is not None or panel["high"] is not None:
        low, high = (panel["low"] or left, panel["high"] or right)
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": low,
                "x1": high,
                "y0": 0,
                "y1": 1,
                "fillcolor": _translucent(color, 0.15),
                "line": {"width": 0},
                "layer": "below",
            }
        )
    if panel["estimate"] is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": panel["estimate"],
                "x1": panel["estimate"],
                "y0": 0,
                "y1": 1,
                "line": {"color": color, "dash": "dash", "width": 2},
            }
        )
    crossed = panel[DIVERGED]
    if crossed:  # at the top edge: a diverged LR has no loss to draw; one beyond the range at its side
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": DIVERGED,
                "x": [min(max(d["lr"], left), right) for d in crossed],
                "y": [1.0] * len(crossed),
                "yaxis": "y2",
                "cliponaxis": False,
                "text": ["" if left <= d["lr"] <= right else f"LR {d['lr']:g}" for d in crossed],
                "textposition": ["bottom left" if d["lr"] > right else "bottom right" for d in crossed],
                "textfont": {"color": DIVERGED_COLOR, "size": 10},
                "customdata": [
                    f"LR {d['lr']:g}: " + outcome_text({"outcome": DIVERGED, "diverged_step": d["step"]})
                    for d in crossed
                ],
                "marker": {"symbol": "x", "size": 12, "color": DIVERGED_COLOR},
                "hovertemplate": "%{customdata}<extra></extra>",
            }
        )
    inside = [d["lr"] for d in crossed if left <= d["lr"] <= right]
    return {
        "data": data,
        "layout": {
            # just above the plot area, under the band the toolbar takes at the top (MODEBAR_BAND)
            "title": {"text": panel_title(panel), "yref": "paper", "y": 1, "yanchor": "bottom", "pad": {"b": 8}},
            "xaxis": _lr_axis([p["lr"] for p in points] + inside, [left, right], pad=0.0),
            "yaxis": {"title": {"text": "final full-validation loss (nats)"}, "zeroline": False},
            "yaxis2": {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
            "shapes": shapes,
            "legend": {"orientation": "h", "y": -0.25},
            "height": 420,
            "margin": {"l": 70, "r": 20, "t": MODEBAR_BAND + 36, "b": 60},
            "font": _FONT,
        },
    }


def halving_series(bracket: dict[str, Any]) -> list[tuple[dict[str, Any], float, list[dict[str, Any]]]]:
    """(rung, beta2, the points ranked there at that beta2 in LR order), rung by rung: the lines of
    the successive-halving figures, static and interactive alike (`bracket` as ebd2n.report.halving
    gives it)."""
    series = []
    for rung in bracket["rungs"]:
        key = str(rung["epoch"])
        ranked = [p for p in bracket["points"] if key in p["rungs"] and p["rungs"][key]["mean_loss"] is not None]
        for beta2 in sorted({p["beta2"] for p in ranked}):
            series.append((rung, beta2, sorted((p for p in ranked if p["beta2"] == beta2), key=lambda p: p["lr"])))
    return series


def series_label(bracket: dict[str, Any], rung: dict[str, Any], beta2: float) -> str:
    """`epoch 2`, with the beta2 when the bracket has several."""
    several = len({p["beta2"] for p in bracket["points"]}) > 1
    return f"epoch {rung['epoch']}" + (f", beta2 {beta2:g}" if several else "")


def halving_figure(bracket: dict[str, Any]) -> dict[str, Any]:
    """One bracket's rungs: mean subset loss against LR (log axis), a line per rung (and beta2);
    a filled circle trained on, a cross stopped there."""
    data: list[dict[str, Any]] = []
    dashes = ("solid", "dash", "dot", "dashdot")
    beta2s = sorted({p["beta2"] for p in bracket["points"]})
    for rung, beta2, points in halving_series(bracket):
        key, name = str(rung["epoch"]), series_label(bracket, rung, beta2)
        color = PALETTE[bracket["rungs"].index(rung) % len(PALETTE)]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "legendgroup": name,
                "hoverinfo": "skip",
                "x": [p["lr"] for p in points],
                "y": [p["rungs"][key]["mean_loss"] for p in points],
                "line": {"color": color, "width": 1.5, "dash": dashes[beta2s.index(beta2) % len(dashes)]},
            }
        )
        for continued, symbol, outcome in ((True, "circle", "trained on"), (False, "x-thin-open", "stopped here")):
            marked = [p for p in points if p["rungs"][key]["continued"] is continued]
            if marked:
                data.append(
                    {
                        "type": "scatter",
                        "mode": "markers",
                        "name": f"{name}: {outcome}",
                        "legendgroup": name,
                        "showlegend": False,
                        "x": [p["lr"] for p in marked],
                        "y": [p["rungs"][key]["mean_loss"] for p in marked],
                        "customdata": [[p["point"], p["rungs"][key]["rank"]] for p in marked],
                        "marker": {"color": color, "size": 9, "symbol": symbol, "line": {"color": color, "width": 2}},
                        "hovertemplate": f"epoch {rung['epoch']}: %{{customdata[0]}}<br>"
                        "mean %{y:.4f} nats, rank %{customdata[1]} of "
                        f"{rung['candidates']}<br>{outcome}<extra></extra>",
                    }
                )
    lrs = sorted({p["lr"] for p in bracket["points"]})
    return {
        "data": data,
        "layout": {
            "title": {"text": bracket["bracket"], "yref": "paper", "y": 1, "yanchor": "bottom", "pad": {"b": 8}},
            "xaxis": _lr_axis(lrs, lrs),
            "yaxis": {"title": {"text": "mean subset validation loss (nats)"}, "zeroline": False},
            "legend": {"orientation": "h", "y": -0.25},
            "height": 420,
            "margin": {"l": 70, "r": 20, "t": MODEBAR_BAND + 36, "b": 60},
            "font": _FONT,
        },
    }


def _lr_axis(taken: list[float], shown: list[float], pad: float = 0.1) -> dict[str, Any]:
    """A log LR axis spanning `shown` (and `pad` decades beyond), ticked at every LR `taken` and
    labelled compactly (`3e-5`); from the smallest LR up, a label that would touch its neighbour's in
    the _NARROWEST_PLOT is blank."""
    low, high = math.log10(min(shown)) - pad, math.log10(max(shown)) + pad
    char, room = _LABEL_PX
    ticks, texts, end = sorted(set(taken)), [], -math.inf
    for lr in ticks:
        text = f"{lr:.3g}".replace("e-0", "e-").replace("e+0", "e")
        centre, half = (math.log10(lr) - low) / (high - low) * _NARROWEST_PLOT, len(text) * char / 2
        fits = centre - half >= end + room
        texts.append(text if fits else "")
        end = centre + half if fits else end
    return {
        "title": {"text": "peak learning rate"},
        "type": "log",
        "range": [low, high],
        "tickvals": ticks,
        "ticktext": texts,
    }
