"""The learning-rate law on a scaling campaign's report (ebd2n.campaign.lr_law): for each mode and
beta2 whose runs span two or more cells (presets, budgets) with learning-rate curves, the fitted law
with its intervals, whether it bends, the largest cell predicted from the others with the regret,
and the next size's optimum with a grid that brackets it.

The next size continues the campaign's own ladder: the largest N times the ratio of the two largest,
trained on the campaign's one token budget, or else at the largest cell's tokens per parameter; a
campaign of one size but several budgets gets the next budget the same way. A mode whose cells
locate too few optima says why instead.

Each law is also drawn (figures.lr_law, from `law_plot`): the cells' optima with their intervals
against N on log-log axes, one series per D, the law through each, and the next cell's prediction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from ebd2n.campaign.analysis import value_text
from ebd2n.campaign.lr_law import Cell, Law, cells_from_runs, curvature, fit_law, leave_largest_out, proposed_grid
from ebd2n.campaign.optimum import LEVEL
from ebd2n.campaign.results import CampaignResults
from ebd2n.config import count_parameters
from ebd2n.report import figures

SHARED_RATIO = 0.01
"""Cells whose tokens per parameter differ by less than this share one (the figure labels D by it)."""


def lr_law_report(campaign: CampaignResults) -> list[dict[str, Any]]:
    """One entry per mode and value of the other axes (beta2, the further axes) with two or more
    cells: the law's record, or the reason there is none."""
    runs = campaign.runs
    parameters = _parameters(campaign)
    entries = []
    for (mode, *values), _part in runs.group_by(["mode", *campaign.axes], maintain_order=True):
        at = dict(zip(campaign.axes, values, strict=True))
        cells = cells_from_runs(runs, parameters, mode, at)
        if len(cells) < 2:
            continue
        entry: dict[str, Any] = {"mode": mode, **at, "cells": len(cells)}  # the other axes between mode and cells
        try:
            law = fit_law(cells)
        except ValueError as error:
            entries.append({**entry, "law": None, "reason": str(error)})
            continue
        parameters_next, tokens_next = _next_cell(list(law.cells), law.terms)
        prediction = law.predict(parameters_next, tokens_next)
        entries.append(
            {
                **entry,
                "law": _record(law),
                "curvature": curvature(law),
                "leave_largest_out": _left_out(cells),
                "next": {
                    "parameters": parameters_next,
                    "tokens": tokens_next,
                    "prediction": prediction,
                    "proposed_grid": proposed_grid(prediction),
                },
            }
        )
    return sorted(entries, key=lambda entry: (entry["mode"], *(_order(value) for value in _at(entry).values())))


def figure_name(entry: dict[str, Any]) -> str:
    """The stem of an entry's figure files (.png and .pdf in the report directory)."""
    return f"lr-law-{entry['mode']}-" + "-".join(f"{axis}{value_text(value)}" for axis, value in _at(entry).items())


def lr_law_figures(entries: list[dict[str, Any]]) -> dict[str, dict[str, bytes]]:
    """Each fitted law's figure by its file stem: format to bytes (deterministic, as every report figure)."""
    return {figure_name(entry): figures.lr_law(law_plot(entry)) for entry in entries if entry["law"] is not None}


def law_plot(entry: dict[str, Any]) -> dict[str, Any]:
    """What an entry's figure draws, from its results.json record alone: per series (one per D, or per
    tokens per parameter where that groups the cells into fewer; one N for a law in D alone, plotted
    against D) each cell's optimum with its interval and the law's line over the cells' range
    (`beyond`: on to the next cell), and the next cell's prediction."""
    law, following = entry["law"], entry["next"]
    coefficients = {name: value["estimate"] for name, value in law["coefficients"].items()}
    axis = "parameters" if "b" in coefficients else "tokens"
    low, high = min(cell[axis] for cell in law["cells"]), max(cell[axis] for cell in law["cells"])
    reach = max(high, following[axis])

    def line(start: float, stop: float, points: int, at: Callable[[float], tuple[float, float]]) -> dict[str, list]:
        xs = [float(x) for x in np.geomspace(start, stop, points)] if stop > start else []
        return {"x": xs, "lr": [_law_at(coefficients, *at(x)) for x in xs]}

    series = []
    for label, members, at in _groups(law["cells"], axis, "c" in coefficients):
        members = sorted(members, key=lambda cell: cell[axis])
        series.append(
            {
                "label": label,
                "cells": {
                    key: [float(cell[name]) for cell in members]
                    for key, name in (("x", axis), ("lr", "lr_optimum"), ("low", "low"), ("high", "high"))
                },
                "line": line(low, high, 32, at),
                "beyond": line(high, reach, 16, at),
            }
        )
    prediction = following["prediction"]
    return {
        "title": f"{entry['mode']}, {_where(entry, 'beta2')}: {law['form']}",
        "axis": axis,
        "series": series,
        "next": {
            "label": f"next: N = {following['parameters']:,}, D = {following['tokens']:,} (predicted)",
            "x": float(following[axis]),
            "lr": prediction["estimate"],
            "low": prediction["low"],
            "high": prediction["high"],
        },
    }


Group = tuple[str, list[dict[str, Any]], Callable[[float], tuple[float, float]]]
"""A series: its label, its cells, and the (N, D) its line passes through at each plotted x."""


def _groups(cells: list[dict[str, Any]], axis: str, in_d: bool) -> list[Group]:
    """The figure's series: by D, or by tokens per parameter where cells share fewer of those."""
    if axis == "tokens":  # a law in D alone: one N
        size = cells[0]["parameters"]
        return [(f"N = {size:,} parameters", cells, lambda x: (size, x))]
    budgets = sorted({cell["tokens"] for cell in cells})
    by_d: list[Group] = [
        (f"D = {d:,} tokens", [cell for cell in cells if cell["tokens"] == d], lambda x, d=d: (x, d)) for d in budgets
    ]
    by_ratio: list[Group] = [
        (f"D = {k:.3g} tokens per parameter", members, lambda x, k=k: (x, k * x)) for k, members in _ratios(cells)
    ]
    if in_d:
        return by_ratio if len(by_ratio) < len(by_d) else by_d
    if len(by_d) == 1 or len(by_ratio) == 1:
        return by_d if len(by_d) == 1 else by_ratio
    return [("D moves with N (a law in N alone)", cells, lambda x: (x, x))]  # the law has no D term


def _ratios(cells: list[dict[str, Any]]) -> list[tuple[float, list[dict[str, Any]]]]:
    """Cells clustered by tokens per parameter (within SHARED_RATIO of a cluster's first), with its geometric mean."""
    clusters: list[list[dict[str, Any]]] = []
    for cell in sorted(cells, key=_ratio):
        if clusters and _ratio(cell) / _ratio(clusters[-1][0]) - 1 < SHARED_RATIO:
            clusters[-1].append(cell)
        else:
            clusters.append([cell])
    return [(math.exp(np.mean([math.log(_ratio(cell)) for cell in cluster])), cluster) for cluster in clusters]


def _ratio(cell: dict[str, Any]) -> float:
    return cell["tokens"] / cell["parameters"]


def _law_at(coefficients: dict[str, float], parameters: float, tokens: float) -> float:
    """η*(N, D) of the law (a term it lacks is ignored)."""
    values = {"b": parameters, "c": tokens}
    return math.exp(
        coefficients["a"]
        + sum(coefficients[name] * math.log(value) for name, value in values.items() if name in coefficients)
    )


def _record(law: Law) -> dict[str, Any]:
    """The law's record with each cell's interval: the percentiles of its optimum over the resamples."""
    record = law.record()
    tail = 100 * (1 - LEVEL) / 2
    lows, highs = np.exp(np.percentile(law.resampled, [tail, 100 - tail], axis=0))
    for cell, low, high in zip(record["cells"], lows, highs, strict=True):
        cell.update(low=float(low), high=float(high))
    return record


def lr_law_section(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's text of each entry."""
    return [_section(entry) for entry in entries]


def _section(entry: dict[str, Any]) -> dict[str, Any]:
    heading = f"{entry['mode']}, {_where(entry, 'β2')} ({entry['cells']} cells)"
    law = entry["law"]
    if law is None:
        return {"heading": heading, "reason": entry["reason"]}
    coefficients = [
        f"{name} = {value['estimate']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"
        for name, value in law["coefficients"].items()
    ]
    bends = [term for term, test in entry["curvature"].items() if test["bends"]]
    left = entry["leave_largest_out"]
    following = entry["next"]
    return {
        "heading": heading,
        "reason": None,
        "figure": figure_name(entry),
        "form": law["form"],
        "coefficients": coefficients,
        "cells": [_cell(cell) for cell in sorted(law["cells"], key=lambda cell: (cell["parameters"], cell["tokens"]))],
        "bends": (
            f"The law bends in {', '.join(bends)}: straight extrapolation is not to be trusted"
            if bends
            else "No term bends (each quadratic term's 95 % interval holds 0)"
            if entry["curvature"]
            else "Too few distinct values to test for a bend (three per term are needed)"
        ),
        "left_out": None if left is None else _left_out_text(left),
        "next": (
            f"Next size, N = {following['parameters']:,} trained on D = {following['tokens']:,} tokens: "
            f"optimal LR {_interval(following['prediction'])}; a grid that brackets it: "
            + ", ".join(f"{lr:g}" for lr in following["proposed_grid"])
        ),
        "notes": law["notes"],
    }


def _cell(cell: dict[str, Any]) -> dict[str, str]:
    return {
        "parameters": f"{cell['parameters']:,}",
        "tokens": f"{cell['tokens']:,}",
        "lr": f"{cell['lr_optimum']:.4g}",
        "interval": f"[{cell['low']:.4g}, {cell['high']:.4g}]",
    }


def _left_out_text(left: dict[str, Any]) -> str:
    cell, regret = left["cell"], left["regret"]["estimate"]
    beyond = " (beyond its grid: held at its end)" if regret["beyond_grid"] else ""
    return (
        f"Left out, the largest cell (N = {cell['parameters']:,}, D = {cell['tokens']:,}) is predicted at "
        f"{_interval(left['prediction'])} against its own fitted optimum {left['lr_optimum']:.4g}; training it at "
        f"the prediction would have cost {regret['nats']:.4f} nats over its best measured mean loss{beyond}."
    )


def _interval(prediction: dict[str, float]) -> str:
    return f"{prediction['estimate']:.4g} [{prediction['low']:.4g}, {prediction['high']:.4g}]"


def _left_out(cells: list[Cell]) -> dict[str, Any] | None:
    """The leave-largest-out check, when the other cells still fit a law (None otherwise)."""
    try:
        return leave_largest_out(cells)
    except ValueError:
        return None


def _next_cell(cells: list[Cell], terms: tuple[str, ...]) -> tuple[int, int]:
    """The next rung of the campaign's ladder: a larger N at the largest cell's tokens per parameter,
    or, for a law in D alone, a longer training of the largest N."""
    largest = max(cells, key=lambda cell: (cell.parameters * cell.tokens, cell.parameters))
    if "ln N" in terms:
        sizes = sorted({cell.parameters for cell in cells})
        parameters = round(sizes[-1] * sizes[-1] / sizes[-2])
        if len({cell.tokens for cell in cells}) == 1:  # every size trained on the same tokens: so is the next
            return parameters, largest.tokens
        return parameters, round(largest.tokens / largest.parameters * parameters)
    budgets = sorted({cell.tokens for cell in cells})
    return largest.parameters, round(budgets[-1] * budgets[-1] / budgets[-2])


def _parameters(campaign: CampaignResults) -> dict[str, int]:
    """Each preset's model size N ("" for a campaign without presets), from one of its runs' recipes."""
    first = campaign.runs.unique("preset", keep="first", maintain_order=True)
    return {
        row["preset"] or "": count_parameters(campaign.recipe(row["directory"]).model)
        for row in first.select(pl.col("preset"), pl.col("directory")).iter_rows(named=True)
    }


def _where(entry: dict[str, Any], beta2: str) -> str:
    """`beta2 0.95`, `β2 0.95, batch_tokens 2048`: an entry's other axes (beta2 under the name given)."""
    return ", ".join(f"{beta2 if axis == 'beta2' else axis} {value_text(value)}" for axis, value in _at(entry).items())


def _order(value: Any) -> tuple:
    """A sort key of axis values of any type: numbers by value, then text, then none."""
    return (value is None, isinstance(value, str), value if not isinstance(value, str) else 0, str(value))


def _at(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's other axes and their values: its keys after `mode`, up to `cells` (or the law)."""
    keys = list(entry)
    end = next((index for index, key in enumerate(keys) if key in _ENTRY_FIELDS), len(keys))
    return {key: entry[key] for key in keys[keys.index("mode") + 1 : end]}


_ENTRY_FIELDS = {"cells", "law", "reason", "curvature", "leave_largest_out", "next"}
"""An entry's keys that are no axis."""
