"""The LR x other-axes sections of the campaign page as text (winners, grid, response, heatmaps,
curves): grid only. The other axes are beta2 and any further axes (`CampaignResults.axes`); where
beta2 is the only one, every section reads as it always did."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from ebd2n.campaign.analysis import lr_response, outcome_text, point_key, point_name, value_text, values_label
from ebd2n.campaign.results import CampaignResults
from ebd2n.outcomes import DIVERGED, STOPPED, Outcome
from ebd2n.report.html import DASH, percent
from ebd2n.report.plotly_embed import figure_json
from ebd2n.report.plotly_figures import curves_figure, heatmap_figure, lr_optimum_figure, winner_curves
from ebd2n.report.tables import point_runs


def grid_section(
    campaign: CampaignResults, grid: dict[str, Any], stopped: dict[str, int], digits: int
) -> dict[str, Any]:
    """Everything the LR x beta2 sections show: winners, grid, response, figures, commands; every
    loss to `digits` decimals (the page's one choice)."""
    groups: pl.DataFrame = grid["groups"]
    selection = grid["selection"]
    winners = [
        {
            **_winner(campaign, mode, point, grid["notes"][mode], grid["selected"][mode], digits),
            "optimum": _optimum_text(grid["optima"][mode]),
        }
        for mode, point in selection.items()
    ]
    modes = [mode for mode in campaign.learning_rates if not groups.filter(pl.col("mode") == mode).is_empty()]
    return {
        "axes_title": " · ".join(campaign.axes),
        "point_words": "/".join(["LR", *campaign.axes]),
        "combinations": groups.height,
        "eligible": int(groups["eligible"].sum()),
        "modes": modes,
        "winners": winners,
        "unselected": [mode for mode in modes if mode not in selection],
        "inside": [w["mode"] for w in winners if not (w["edge"] or w["unfinished"] or w["diverged_above"])],
        "on_edge": [w for w in winners if w["edge"]],
        "unsettled": [w for w in winners if w["unfinished"]],
        "bounded": [w for w in winners if w["diverged_above"]],
        "modes_compared": _modes_compared(campaign, selection, grid["mode_comparison"], digits),
        "grid_rows": _grid_rows(campaign, groups, stopped),
        "responses": [
            _response(groups, lr_response(groups, at), at, selection, digits)
            for point in campaign.points
            if (at := dict(zip(campaign.axes, point, strict=True)))
            and not groups.filter(*(pl.col(axis).eq_missing(value) for axis, value in at.items())).is_empty()
        ],  # one table per value of the other axes: each winner is bold in its own
        "heatmaps": [
            _heatmap(campaign, groups, mode, selection.get(mode), index, digits) for index, mode in enumerate(modes)
        ],
        "curves": _curves(grid["curves"], digits),
        "optimum_plots": [_optimum_plot(panel, index, digits) for index, panel in enumerate(grid["optimum_panels"])],
        "shifts": [
            {
                "mode": mode,
                "axis": entry["axis"],
                "reference": value_text(entry["reference"]),
                "rows": [_shift_row(row, row["checked"] and _reference(entry)["checked"]) for row in entry["values"]],
                "law": _law_text(entry["axis"], entry.get("law")),
            }
            for mode, entries in grid["optimum_shifts"].items()
            for entry in entries
        ],
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


def _optimum_text(entry: dict[str, Any]) -> dict[str, str]:
    """The fitted optimum as the best-recipes table shows it: estimate, interval, and why not. An
    unchecked optimum (three LRs around its best) gives its bracket, the best LR's neighbours, in
    place of an interval: "unchecked (3 LRs, no residual)" over "between 0.004 and 0.008, vertex 0.00606"."""
    fit = entry["lr_optimum"]
    low = f"{fit['low']:.3g}" if fit["low"] is not None else "beyond the grid"
    high = f"{fit['high']:.3g}" if fit["high"] is not None else "beyond the grid"
    if not fit["checked"] and (fit["low"] is not None or fit["high"] is not None):
        return _bracket_text(fit, low, high)
    interval = f"95 %: {low} to {high}" if fit["low"] is not None or fit["high"] is not None else ""
    if fit["open"]:
        interval += f" (open at the {fit['open']} end)"
    estimate = f"{fit['estimate']:.3g}" if fit["estimate"] is not None else DASH
    if fit["estimate"] is None:
        sentence = f"No fitted LR optimum: {fit['reason']}."
        if fit["open"] == "upper" and fit["low"] is not None:  # what the seeds do say: a bound, in place of a dash
            estimate, interval = f"above {low}", "95 % bound"
        elif fit["open"] == "lower" and fit["high"] is not None:
            estimate, interval = f"below {high}", "95 % bound"
    else:
        sentence = f"Fitted LR optimum {fit['estimate']:.3g}" + (f" ({interval})" if interval else "") + "."
        if fit["checked"]:
            sentence += f" Checked: {fit['check']}."
        if fit["reason"]:
            sentence += f" Note: {fit['reason']}."
    return {"estimate": estimate, "interval": interval, "reason": fit["reason"] or "", "sentence": sentence}


def _bracket_text(fit: dict[str, Any], low: str, high: str) -> dict[str, str]:
    """An unchecked optimum: its bracket (open where the best LR is at the grid's end), the vertex."""
    where = f"between {low} and {high}"
    if fit["low"] is None or fit["high"] is None:
        where = f"above {low}" if fit["high"] is None else f"below {high}"
    label = f"unchecked ({fit['check']})"
    if fit["estimate"] is None:
        sentence = f"No fitted LR optimum: {fit['reason']}; {label}, the best LR's neighbours put it {where}."
        return {"estimate": where, "interval": label, "reason": fit["reason"] or "", "sentence": sentence}
    vertex = f"{where}, vertex {fit['estimate']:.3g}"
    sentence = f"LR optimum {label}: {vertex}."
    if fit["reason"]:
        sentence += f" Note: {fit['reason']}."
    return {"estimate": label, "interval": vertex, "reason": fit["reason"] or "", "sentence": sentence}


def _optimum_plot(panel: dict[str, Any], index: int, digits: int) -> dict[str, Any]:
    """One mode's LR-optimum figure and its table view (one row per LR, a diverged one's saying so)."""
    seeds = panel["seeds"]
    rows = [
        {
            "lr": p["lr"],
            "mean": _pm(p["mean_loss"], p["std_loss"], digits),
            "seeds": ", ".join(
                f"{loss:.{digits}f}" for lr, loss in zip(seeds["lr"], seeds["loss"], strict=True) if lr == p["lr"]
            ),
        }
        for p in panel["points"]
    ]
    rows += [
        {"lr": d["lr"], "mean": outcome_text({"outcome": DIVERGED, "diverged_step": d["step"]}), "seeds": ""}
        for d in panel[DIVERGED]
    ]
    return {
        "id": f"optimum-{index}",
        "mode": panel["mode"],
        "json": figure_json(lr_optimum_figure(panel, index)),
        "rows": [{**row, "lr": f"{row['lr']:g}"} for row in sorted(rows, key=lambda row: row["lr"])],
        "summary": _optimum_text({"lr_optimum": panel}),
    }


def _winner(
    campaign: CampaignResults,
    mode: str,
    point: dict[str, Any],
    notes: dict[str, Any],
    selected: dict[str, Any],
    digits: int,
) -> dict[str, Any]:
    runs = point_runs(campaign, point)
    runner = notes["runner_up"]
    seeds = selected["seeds"]
    return {
        "mode": mode,
        "lr": f"{point['lr']:g}",
        "point": values_label(point_key(point, campaign.axes)),
        "loss": _pm(point["mean_loss"], point["std_loss"], digits),
        "perplexity": f"{math.exp(point['mean_loss']):.3f}",
        "accuracy": percent(runs["accuracy"].mean()),
        "seeds": ", ".join(str(seed) for seed in seeds),
        "runs": selected["runs"],
        "runner_up": (_runner_name(runner, campaign.axes), f"{runner['mean_loss']:.{digits}f}") if runner else None,
        "margin": f"{notes['margin']:.{digits}f}" if notes["margin"] is not None else DASH,
        "margin_vs_se": f"{notes['margin_vs_se']:.2f} × Welch SE" if notes["margin_vs_se"] is not None else "",
        "p_value": f"{notes['p_value']:.3g}" if notes["p_value"] is not None else DASH,
        "edge": notes["edge"],
        "next_lrs": ", ".join(f"{lr:g}" for lr in notes["next_lrs"]),
        "diverged_above": _diverged_above(notes["diverged_above"], campaign.axes),
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


def _shift_row(row: dict[str, Any], checked: bool) -> dict[str, str]:
    """One value of a further axis: its fitted LR optimum and the shift from the axis's first value,
    with intervals; `checked`: both optima are (else the shift's range is their brackets' ratio)."""
    fit = _optimum_text({"lr_optimum": row})
    shift = DASH if row["shift"] is None else f"× {row['shift']:.3g}"
    if row["shift_low"] is not None or row["shift_high"] is not None:
        low = f"{row['shift_low']:.3g}" if row["shift_low"] is not None else "beyond the grid"
        high = f"{row['shift_high']:.3g}" if row["shift_high"] is not None else "beyond the grid"
        shift += f" (95 %: {low} to {high})" if checked else f" (unchecked, bracket: {low} to {high})"
    return {"value": value_text(row["value"]), **fit, "shift": shift}


def _reference(entry: dict[str, Any]) -> dict[str, Any]:
    """The fit the shifts along an axis are taken from (the first value with an optimum)."""
    return next((row for row in entry["values"] if row["value"] == entry["reference"]), entry["values"][0])


def _law_text(axis: str, law: dict[str, Any] | None) -> str:
    """`LR optimum ∝ batch_tokens^0.685 (95 %: 0.357 to 1.14); at batch_tokens 4096 it predicts LR 0.0116 (...)`."""
    if law is None:
        return ""
    text = f"LR optimum ∝ {axis}^{law['exponent']:.3g}"
    if law["exponent_low"] is not None:
        text += f" (95 %: {law['exponent_low']:.3g} to {law['exponent_high']:.3g})"
    following = law["next"]
    text += f"; at {axis} {following['value']} it predicts LR {following['lr']:.3g}"
    if following["low"] is not None:
        text += f" (95 %: {following['low']:.3g} to {following['high']:.3g})"
    if not law["checked"]:
        text += " (no intervals: an optimum it uses is unchecked)"
    return text + "."


def _runner_name(point: dict[str, Any], axes: list[str]) -> str:
    """`LR 0.004, beta2 0.95`: the runner-up, as the best-recipes table names it."""
    return ", ".join([f"LR {point['lr']:g}", *(f"{axis} {value_text(point[axis])}" for axis in axes)])


def _diverged_above(point: dict[str, Any] | None, axes: list[str]) -> str:
    """ "LR 1000 (beta2 0.95) diverged at step 12": the point above a winner that bounds its optimum."""
    if point is None:
        return ""
    return f"{point_name(point, axes)} {outcome_text({'outcome': DIVERGED, **point})}"


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
                "axis_values": _axis_values(campaign),
                "points": groups.filter(pl.col("mode") == mode).height,
                Outcome.COMPLETE.value: runs.filter(pl.col("status") == Outcome.COMPLETE).height,
                DIVERGED: runs.filter(pl.col("status") == Outcome.DIVERGED).height,
                "expected": len(lrs) * len(campaign.points) * len(campaign.seeds) - halted,
                STOPPED: halted,
            }
        )
    return rows


def point_caption(point: dict[str, Any]) -> str:
    """`beta2 = 0.95`, `beta2 = 0.95, beta1 = 0.9`: where on the other axes a table is drawn."""
    return ", ".join(f"{axis} = {value_text(value)}" for axis, value in point.items())


def _axis_values(campaign: CampaignResults) -> str:
    """`0.95, 0.99`; with further axes each axis's values by name: `beta2 0.95; beta1 0.9, 0.95`."""
    texts = [", ".join(value_text(value) for value in values) for values in campaign.axis_values.values()]
    if len(texts) == 1:
        return texts[0]
    return "; ".join(f"{axis} {text}" for axis, text in zip(campaign.axes, texts, strict=True))


def _response(
    groups: pl.DataFrame, table: pl.DataFrame, point: dict[str, Any], selection: dict[str, dict[str, Any]], digits: int
) -> dict[str, Any]:
    """LR-response rows as text ("mean ± sd", "diverged at step k", "not finished", a dash where
    untested, how few seeds an incomplete point rests on); the winner's cell is flagged so the page
    can set it in bold."""
    modes = [name.removesuffix(" mean_loss") for name in table.columns if name.endswith(" mean_loss")]
    at = groups.filter(*(pl.col(axis).eq_missing(value) for axis, value in point.items()))
    eligible = {(row["mode"], row["lr"]) for row in at.filter(pl.col("eligible")).iter_rows(named=True)}
    points = {(row["mode"], row["lr"]): row for row in at.iter_rows(named=True)}

    def text(row: dict[str, Any], mode: str) -> str:
        mean, seeds = row[f"{mode} mean_loss"], row[f"{mode} seeds_completed"]
        if (why := _point_text(points.get((mode, row["lr"])))) is not None:
            return why
        few = "" if (mode, row["lr"]) in eligible else f" (only {seeds} seed{'' if seeds == 1 else 's'})"
        return _pm(mean, row[f"{mode} std_loss"], digits) + few

    rows = [
        {
            "lr": f"{row['lr']:g}",
            "cells": [
                {
                    "text": text(row, mode),
                    "winner": mode in selection
                    and selection[mode]["lr"] == row["lr"]
                    and all(selection[mode][axis] == value for axis, value in point.items()),
                }
                for mode in modes
            ],
        }
        for row in table.iter_rows(named=True)
    ]
    return {
        "attribute": "-".join(point),
        "point": values_label(list(point.values())),
        "caption": point_caption(point),
        "modes": modes,
        "rows": rows,
    }


def _heatmap(
    campaign: CampaignResults, groups: pl.DataFrame, mode: str, winner: dict[str, Any] | None, index: int, digits: int
) -> dict[str, Any]:
    lrs, columns = campaign.learning_rates[mode], campaign.points
    part = groups.filter(pl.col("mode") == mode)
    cells = {(row["lr"], point_key(row, campaign.axes)): row for row in part.iter_rows(named=True)}
    rows = []
    for lr in reversed(lrs):
        texts = []
        for b in columns:
            cell = cells.get((lr, b))
            if (why := _point_text(cell)) is not None:
                diverged = cell is not None and cell["outcome"] == DIVERGED
                texts.append({"mean": why, "sd": "", "winner": False, DIVERGED: diverged})
                continue
            sd = f"± {cell['std_loss']:.{digits}f}" if cell["std_loss"] is not None else ""
            seeds = "" if cell["eligible"] else f" ({cell['seeds_completed']} seeds)"
            texts.append(
                {
                    "mean": f"{cell['mean_loss']:.{digits}f}",
                    "sd": sd + seeds,
                    DIVERGED: False,
                    "winner": winner is not None and (winner["lr"], point_key(winner, campaign.axes)) == (lr, b),
                }
            )
        rows.append({"lr": f"{lr:g}", "cells": texts})
    return {
        "id": f"heatmap-{index}",
        "mode": mode,
        "json": figure_json(heatmap_figure(mode, part, lrs, columns, winner, _loss_scale(groups))),
        "columns": [values_label(b) for b in columns],
        "rows": rows,
    }


def _loss_scale(groups: pl.DataFrame) -> tuple[float, float] | None:
    """The lowest and highest mean loss of every mode: the heatmaps' one colour scale."""
    losses = groups["mean_loss"].drop_nulls().drop_nans()
    return (losses.min(), losses.max()) if not losses.is_empty() else None


def _curves(table: pl.DataFrame, digits: int) -> dict[str, Any]:
    """The curve figure and its table view: one row per token count, one column per winner."""
    columns, cells = [], {}
    for name, part in winner_curves(table):
        mode, point = name.split(": ", 1)
        columns.append(f"{mode} ({point})")
        for row in part.iter_rows(named=True):
            cells[(len(columns) - 1, row["tokens"])] = _pm(row["mean_loss"], row["std_loss"], digits)
    rows = [
        {"tokens": f"{tokens:,}", "cells": [cells.get((index, tokens), DASH) for index in range(len(columns))]}
        for tokens in sorted(set(table["tokens"].to_list()))
    ]
    return {"id": "curves", "json": figure_json(curves_figure(table)), "columns": columns, "rows": rows}


def _modes_compared(
    campaign: CampaignResults, selection: dict[str, dict[str, Any]], comparison: dict[str, Any] | None, digits: int
) -> dict[str, Any] | None:
    """Each mode's winner and how far its loss lies from the first mode's, at their own winners:
    "packed-4 vs synchronous: +0.0118 nats (95 %: −0.0003 to +0.0239; Welch p 0.113)"."""
    if comparison is None:
        return None
    level = f"{100 * comparison['level']:g} %"
    rows = []
    for entry in comparison["modes"]:
        text = f"{entry['mode']} vs {comparison['reference']}: {_signed(entry['difference'], digits)} nats"
        if entry["se"] is None:
            text += " (too few varying seeds for a Welch test)"
        else:
            low, high = _signed(entry["low"], digits), _signed(entry["high"], digits)
            text += f" ({level}: {low} to {high}; Welch p {entry['p_value']:.3g})"
        rows.append({"mode": entry["mode"], "text": text})
    winners = [
        f"{mode} at {_runner_name(point, campaign.axes)}: {_pm(point['mean_loss'], point['std_loss'], digits)} nats"
        for mode, point in selection.items()
    ]
    return {"reference": comparison["reference"], "winners": winners, "rows": rows}


def _signed(value: float, digits: int) -> str:
    """`+0.0118`, `−0.0003`: a difference with its sign, the minus a true minus."""
    return f"{value:+.{digits}f}".replace("-", "−")


def _pm(mean: float, sd: float | None, digits: int) -> str:
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")
