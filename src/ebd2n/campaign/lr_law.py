"""The learning-rate law: how a campaign's optimal LR moves with model size N and training length D.

ln η* = a + b·ln N + c·ln D is fitted by least squares to each cell's fitted optimum (the vertex of
ebd2n.campaign.optimum's parabola in ln LR), as DeepSeek LLM's and Step Law's laws are. How sure it
is comes from the optimum fit's bootstrap: in every resample the seeds are resampled within each
grid point of every cell and the cell's misfit to its parabola is drawn in (ebd2n.campaign.optimum),
each cell's optimum is fitted again (its window included) and so is the law; the 2.5 and 97.5
percentiles give the interval of each coefficient and of each prediction. A cell whose optimum is
unchecked (three LRs around its best: nothing tests its parabola) carries seed noise alone, and is
named in the notes. A resample whose
optimum falls beyond a cell's grid is held at the grid's end (the share is reported): the campaign
says nothing past its grid. A term whose values do not vary, or that moves with another (presets
trained at one tokens-per-parameter have D = k·N), is left out and named.

Beyond the fit: a curvature test (the law bends when a quadratic term's interval excludes 0), the
largest cell predicted from the others with the loss regret of training it at the predicted LR
(its measured mean losses interpolated linearly in ln LR), and a prediction for a new N or D with
its interval and a grid that brackets it. The resampling seed is fixed: the same runs give the
same law.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ebd2n.campaign.optimum import LEVEL, RESAMPLES, RESAMPLING_SEED, fit_optimum, fitted_minima, resampled_grid
from ebd2n.outcomes import Outcome

TERMS = ("ln N", "ln D")


@dataclass(frozen=True)
class Cell:
    """One model size and training length of a campaign: per learning rate, its seeds' final losses."""

    parameters: int
    tokens: int
    losses: Mapping[float, Sequence[float]]

    @property
    def label(self) -> str:
        return f"N={self.parameters:,} D={self.tokens:,}"

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """ln LR and mean loss of every learning rate, in LR order."""
        lrs = sorted(self.losses)
        return np.log(lrs), np.array([np.mean(self.losses[lr]) for lr in lrs])


@dataclass(frozen=True)
class Law:
    """A fitted law: its terms, the cells' optima and their bootstrap draws, and what was left out."""

    terms: tuple[str, ...]
    cells: tuple[Cell, ...]
    optima: np.ndarray
    """ln η* of each cell (the point fit)."""
    resampled: np.ndarray
    """ln η* of each cell (columns) in each resample (rows)."""
    held_at_grid_end: float
    notes: tuple[str, ...]

    @property
    def design(self) -> np.ndarray:
        return np.array([self.row(cell.parameters, cell.tokens) for cell in self.cells])

    @property
    def coefficients(self) -> np.ndarray:
        """Intercept first, then one per term."""
        return np.linalg.pinv(self.design) @ self.optima

    @property
    def draws(self) -> np.ndarray:
        """The coefficients of each resample (rows)."""
        return self.resampled @ np.linalg.pinv(self.design).T

    def row(self, parameters: float, tokens: float) -> np.ndarray:
        values = {"ln N": math.log(parameters), "ln D": math.log(tokens)}
        return np.array([1.0, *(values[term] for term in self.terms)])

    def predict(self, parameters: float, tokens: float) -> dict[str, float]:
        """The optimal LR the law predicts at (N, D), with its interval."""
        row = self.row(parameters, tokens)
        low, high = _interval(self.draws @ row)
        return {"estimate": math.exp(float(row @ self.coefficients)), "low": math.exp(low), "high": math.exp(high)}

    def record(self) -> dict[str, Any]:
        """What selection.json and the report carry: coefficients with intervals, the cells' optima."""
        names = ("a", *({"ln N": "b", "ln D": "c"}[term] for term in self.terms))
        form = "".join(f" + {name}*{term}" for name, term in zip(names[1:], self.terms, strict=True))
        return {
            "form": f"ln(lr*) = a{form}",
            "coefficients": {
                name: _with_interval(value, self.draws[:, i])
                for i, (name, value) in enumerate(zip(names, self.coefficients, strict=True))
            },
            "cells": [
                {"parameters": cell.parameters, "tokens": cell.tokens, "lr_optimum": math.exp(optimum)}
                for cell, optimum in zip(self.cells, self.optima, strict=True)
            ],
            "resamples": RESAMPLES,
            "level": LEVEL,
            "held_at_grid_end": self.held_at_grid_end,
            "notes": list(self.notes),
        }


def cells_from_runs(
    runs: pl.DataFrame,
    parameters: Mapping[str, int],
    mode: str,
    at: Mapping[str, Any] | float,
    seeds: list[int] | None = None,
) -> list[Cell]:
    """A campaign's cells of one mode at one value of each other axis (`at`: axis -> value; a bare
    number is a beta2) from its runs table (runs.csv): one per preset and tokens trained, its
    learning rates with every seed's final loss (ordered by seed); `parameters` maps each preset
    ("" outside scaling campaigns) to its model's N."""
    at = at if isinstance(at, Mapping) else {"beta2": at}
    done = runs.filter(
        pl.col("status") == Outcome.COMPLETE,
        pl.col("loss").is_finite(),
        pl.col("mode") == mode,
        *(pl.col(axis).eq_missing(value) for axis, value in at.items()),
        pl.lit(True) if seeds is None else pl.col("seed").is_in(seeds),
    )
    done = done.unique(["preset", "tokens", "lr", "seed"], keep="first", maintain_order=True).sort("seed")
    cells = []
    for (preset, tokens), part in done.group_by(["preset", "tokens"], maintain_order=True):
        losses = {lr: group["loss"].to_list() for (lr,), group in part.group_by(["lr"], maintain_order=True)}
        most = max(len(values) for values in losses.values())
        cells.append(Cell(parameters[preset or ""], int(tokens), {lr: v for lr, v in losses.items() if len(v) == most}))
    return cells


def fit_law(cells: Sequence[Cell], seed: int = RESAMPLING_SEED) -> Law:
    """The law over `cells` (each with a fitted optimum inside its grid); ValueError when too few
    cells have one, or none of N and D varies."""
    rng = np.random.default_rng(seed)
    used, optima, draws, held, notes = [], [], [], 0, []
    for cell in cells:
        fit = fit_optimum(sorted(cell.losses), {lr: list(losses) for lr, losses in cell.losses.items()})
        if fit["estimate"] is None:
            notes.append(f"{cell.label} left out: {fit['reason']}")
            continue
        if min(len(losses) for losses in cell.losses.values()) < 2:
            raise ValueError(
                f"{cell.label}: one seed at a learning rate; the law's intervals resample seeds (2 or more)"
            )
        if not fit["checked"]:
            notes.append(
                f"{cell.label}: optimum unchecked ({fit['check']}); its resamples carry seed noise alone, "
                "not the parabola's misfit"
            )
        x, _ = cell.curve()
        minima = fitted_minima(resampled_grid({lr: list(losses) for lr, losses in cell.losses.items()}, rng), x)
        held += int(np.sum((minima < x[0]) | (minima > x[-1])))
        used.append(cell)
        optima.append(math.log(fit["estimate"]))
        draws.append(np.clip(minima, x[0], x[-1]))
    terms = _terms(used, notes)
    if not terms or len(used) < len(terms) + 1:
        raise ValueError(
            f"an LR law needs cells of different N or D, each with a fitted optimum: {len(used)} of "
            f"{len(cells)} cells have one{'; ' + '; '.join(notes) if notes else ''}"
        )
    return Law(
        tuple(terms),
        tuple(used),
        np.array(optima),
        np.stack(draws, axis=1),
        held / (len(used) * RESAMPLES),
        tuple(notes),
    )


def curvature(law: Law) -> dict[str, dict[str, Any]]:
    """Per term with three or more distinct values: the coefficient of its square (centred) added to
    the law, with its interval; the law bends in that term when the interval excludes 0."""
    out = {}
    for term in law.terms:
        values = np.array([_value(cell, term) for cell in law.cells])
        if len(np.unique(values)) < 3 or len(law.cells) < len(law.terms) + 2:
            continue
        solve = np.linalg.pinv(np.column_stack([law.design, (values - values.mean()) ** 2]))[-1]
        coefficient = float(solve @ law.optima)
        low, high = _interval(law.resampled @ solve)
        out[term] = {"quadratic": coefficient, "low": low, "high": high, "bends": not low <= 0 <= high}
    return out


def leave_largest_out(cells: Sequence[Cell], seed: int = RESAMPLING_SEED) -> dict[str, Any]:
    """The largest cell (most N·D) predicted by the law of the others: the prediction, the cell's own
    fitted optimum, and the loss regret of training it at the predicted LR and at its interval's ends."""
    largest = max(cells, key=lambda cell: (cell.parameters * cell.tokens, cell.parameters))
    law = fit_law([cell for cell in cells if cell is not largest], seed)
    prediction = law.predict(largest.parameters, largest.tokens)
    own = fit_optimum(sorted(largest.losses), {lr: list(losses) for lr, losses in largest.losses.items()})["estimate"]
    return {
        "cell": {"parameters": largest.parameters, "tokens": largest.tokens},
        "prediction": prediction,
        "lr_optimum": own,
        "regret": {key: regret(largest, value) for key, value in prediction.items()},
        "law": law.record(),
    }


def regret(cell: Cell, lr: float) -> dict[str, Any]:
    """The cell's mean loss at `lr` (linear in ln LR between its measured points) above its best
    measured mean loss; an LR beyond the grid is held at its end and said so."""
    x, means = cell.curve()
    inside = x[0] <= math.log(lr) <= x[-1]
    loss = float(np.interp(math.log(lr), x, means))
    return {"nats": loss - float(means.min()), "beyond_grid": not inside}


def proposed_grid(prediction: Mapping[str, float], points: int = 5, spacing: float = 2**0.5) -> list[float]:
    """`points` learning rates, equally spaced in ln LR and centred on the prediction, wide enough to
    bracket its interval and at least `spacing` apart (3 significant figures)."""
    centre = math.log(prediction["estimate"])
    half = max(
        math.log(prediction["high"]) - centre,
        centre - math.log(prediction["low"]),
        math.log(spacing) * (points - 1) / 2,
    )
    return [float(f"{math.exp(value):.3g}") for value in np.linspace(centre - half, centre + half, points)]


def _terms(cells: Sequence[Cell], notes: list[str]) -> list[str]:
    """The terms that vary over the cells; ln D left out when it moves with ln N."""
    terms = [term for term in TERMS if len({_value(cell, term) for cell in cells}) > 1]
    if len(terms) == 2:
        design = np.array([[1.0, _value(cell, "ln N"), _value(cell, "ln D")] for cell in cells])
        if np.linalg.matrix_rank(design, tol=1e-9) < 3:
            notes.append("D moves with N over these cells (one tokens per parameter): the law is in N alone")
            terms = ["ln N"]
    return terms


def _value(cell: Cell, term: str) -> float:
    return math.log(cell.parameters if term == "ln N" else cell.tokens)


def _interval(values: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def _with_interval(value: float, draws: np.ndarray) -> dict[str, float]:
    low, high = _interval(draws)
    return {"estimate": float(value), "low": low, "high": high}
