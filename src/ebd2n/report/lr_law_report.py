"""The learning-rate law on a scaling campaign's report (ebd2n.campaign.lr_law): for each mode and
beta2 whose runs span two or more cells (presets, budgets) with learning-rate curves, the fitted law
with its intervals, whether it bends, the largest cell predicted from the others with the regret,
and the next size's optimum with a grid that brackets it.

The next size continues the campaign's own ladder: the largest N times the ratio of the two largest,
trained on the campaign's one token budget, or else at the largest cell's tokens per parameter; a
campaign of one size but several budgets gets the next budget the same way. A mode whose cells
locate too few optima says why instead.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ebd2n.campaign.lr_law import Cell, cells_from_runs, curvature, fit_law, leave_largest_out, proposed_grid
from ebd2n.campaign.results import CampaignResults
from ebd2n.config import count_parameters


def lr_law_report(campaign: CampaignResults) -> list[dict[str, Any]]:
    """One entry per mode and beta2 with two or more cells: the law's record, or the reason there is none."""
    runs = campaign.runs
    parameters = _parameters(campaign)
    entries = []
    for (mode, beta2), _part in runs.group_by(["mode", "beta2"], maintain_order=True):
        cells = cells_from_runs(runs, parameters, mode, beta2)
        if len(cells) < 2:
            continue
        entry: dict[str, Any] = {"mode": mode, "beta2": beta2, "cells": len(cells)}
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
                "law": law.record(),
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
    return sorted(entries, key=lambda entry: (entry["mode"], entry["beta2"]))


def lr_law_section(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's text of each entry."""
    return [_section(entry) for entry in entries]


def _section(entry: dict[str, Any]) -> dict[str, Any]:
    heading = f"{entry['mode']}, β2 {entry['beta2']:g} ({entry['cells']} cells)"
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
    return {"parameters": f"{cell['parameters']:,}", "tokens": f"{cell['tokens']:,}", "lr": f"{cell['lr_optimum']:.4g}"}


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
