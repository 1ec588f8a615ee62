"""Where a mode's LR optimum lies and how sure the seeds let us be.

Near its minimum, final loss is close to a parabola in ln(LR) (the shape optimum-LR laws such as
DeepSeek LLM's and Step Law's are fitted to). Per mode and value of the other axes (beta2, the
further axes) we fit one through the best
LR with every seed and its two neighbours (the first or last three when the best is at the grid's
end) and take its vertex. The 95 % interval is a percentile bootstrap: seeds are resampled within
each grid point and the whole fit redone, best point and window included, so a near-tie between
distant LRs widens the interval as it should. A resample whose parabola opens downwards has its
least value at the lower end of its window, or beyond the grid when that end is the grid's own.
The resampling seed is fixed: the same runs give the same interval.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from ebd2n.campaign.analysis import Edge, completed_runs, diverged_above, lr_edge, outcome_text, point_axes, value_text
from ebd2n.outcomes import DIVERGED, PointOutcome

RESAMPLES = 2000
RESAMPLING_SEED = 0
LEVEL = 0.95
POINTS = 3  # a parabola needs three; more would let far, flat points pull the vertex
METHOD = (
    f"quadratic in ln(LR) through the best LR with every seed and its neighbours; {LEVEL:.0%} percentile "
    f"bootstrap of seeds within each point ({RESAMPLES} resamples, deviations scaled by sqrt(n/(n-1)), "
    f"resampling seed {RESAMPLING_SEED})"
)


def lr_optima(groups: pl.DataFrame, runs: pl.DataFrame, seeds: list[int] | None = None) -> dict[str, dict[str, Any]]:
    """Per mode with a winner: `edge`, `diverged_above` (the diverged point above the winner that
    bounds the optimum, or None) and `lr_optimum` at the winner's other axes, and, where those take
    several values, the fit at each: `lr_optimum_by_<axis>` (its value as text -> the fit) for a
    grid of one such axis (beta2), else `lr_optimum_by_point` (each point's axes and fit).

    `groups` and `seeds` as for `winner_notes`; only eligible points (every seed) are fitted.
    """
    axes = point_axes(groups)
    done = completed_runs(runs, seeds, axes)
    out = {}
    for mode in groups["mode"].unique(maintain_order=True).to_list():
        part = groups.filter(pl.col("mode") == mode)
        eligible = part.filter(pl.col("eligible"))
        if eligible.is_empty():
            continue
        winner = eligible.sort(["mean_loss", "lr", *axes], nulls_last=True).row(0, named=True)
        tested = sorted(part["lr"].unique().to_list())
        points = part.select(axes).unique().sort(axes, nulls_last=True).rows()
        fits = {
            point: fit_optimum(tested, seed_losses(done, mode, dict(zip(axes, point, strict=True)), eligible))
            for point in points
        }
        entry: dict[str, Any] = {
            "edge": lr_edge(winner["lr"], tested),
            "diverged_above": diverged_above(winner, part),
            "lr_optimum": fits[tuple(winner[axis] for axis in axes)],
        }
        if len(fits) > 1 and len(axes) == 1:
            entry[f"lr_optimum_by_{axes[0]}"] = {value_text(point[0]): fit for point, fit in fits.items()}
        elif len(fits) > 1:
            by_point = [{**dict(zip(axes, point, strict=True)), **fit} for point, fit in fits.items()]
            entry["lr_optimum_by_point"] = by_point
        out[mode] = entry
    return out


def optimum_lines(optima: dict[str, dict[str, Any]]) -> list[str]:
    """One line per mode: its fitted LR optimum and interval, or why there is none; and its edge."""
    lines = []
    for mode, entry in optima.items():
        fit = entry["lr_optimum"]
        if fit["estimate"] is None:
            text = f"{mode}: no fitted LR optimum ({fit['reason']})"
        else:
            text = f"{mode}: fitted LR optimum {fit['estimate']:.3g}"
            if fit["low"] is not None or fit["high"] is not None:
                text += f" (95 %: {_bound(fit['low'])} to {_bound(fit['high'])})"
            if fit["reason"]:
                text += f"; {fit['reason']}"
        if entry["edge"]:
            text += f"; the winner is at the {entry['edge']} edge of the grid"
        if entry["diverged_above"]:
            above = entry["diverged_above"]
            diverged = outcome_text({"outcome": PointOutcome.DIVERGED, **above})
            text += f"; bracketed by divergence: LR {above['lr']:g} {diverged}"
        lines.append(text)
    return lines


def _bound(value: float | None) -> str:
    return f"{value:.3g}" if value is not None else "beyond the grid"


def fit_optimum(tested: list[float], losses: dict[float, list[float]]) -> dict[str, Any]:
    """The fitted optimum over `losses` (LR -> per-seed final losses of the points with every
    seed); `tested` is every LR of the grid, whose ends decide whether the interval is open."""
    lrs = sorted(losses)
    result: dict[str, Any] = {
        "estimate": None,
        "low": None,
        "high": None,
        "points_used": [],
        "method": METHOD,
        "open": None,
        "reason": None,
    }
    if len(lrs) < POINTS:
        result["reason"] = (
            f"only {len(lrs)} learning rate{'' if len(lrs) == 1 else 's'} with every seed; "
            f"a quadratic fit needs {POINTS}"
        )
        return result
    x = np.log(lrs)
    means = np.array([[np.mean(losses[lr]) for lr in lrs]])
    start = _window(means)[0]
    result["points_used"] = lrs[start : start + POINTS]
    coefficients = means[:, start : start + POINTS] @ np.linalg.pinv(np.vander(x[start : start + POINTS], 3)).T
    if coefficients[0, 0] <= 0:
        result["reason"] = (
            "the fitted curve bends the wrong way (loss is not convex around the best LR), so it has no minimum"
        )
    else:
        vertex = -coefficients[0, 1] / (2 * coefficients[0, 0])
        low_end, high_end = math.log(min(tested)), math.log(max(tested))
        if low_end <= vertex <= high_end:
            result["estimate"] = math.exp(vertex)
        else:
            result["reason"] = (
                f"the fitted minimum lies beyond the {'upper' if vertex > high_end else 'lower'} end of the grid"
            )
    if min(len(losses[lr]) for lr in lrs) < 2:
        result["reason"] = _join(result["reason"], "one seed per point: no seed variation to resample for an interval")
        return result
    minima = np.sort(bootstrap_minima(losses, RESAMPLING_SEED))
    tail = (1 - LEVEL) / 2
    low, high = minima[int(math.floor(tail * RESAMPLES))], minima[int(math.ceil((1 - tail) * RESAMPLES)) - 1]
    result["low"], result["high"] = _lr(low), _lr(high)
    result["open"] = _open(low, high, math.log(min(tested)), math.log(max(tested)), minima)
    return result


def bootstrap_minima(losses: dict[float, list[float]], seed: int) -> np.ndarray:
    """ln(LR) of the fitted minimum of each of `RESAMPLES` resamples of every point's seeds (in resample order)."""
    lrs = sorted(losses)
    rng = np.random.default_rng(seed)
    resampled = np.stack([resampled_means(np.asarray(losses[lr], dtype=float), rng) for lr in lrs], axis=1)
    return fitted_minima(resampled, np.log(lrs))


def _lr(log_lr: float) -> float | None:
    """The LR of a bound; None for one past any representable LR (a nearly flat resample's vertex)."""
    return math.exp(log_lr) if abs(log_lr) < _FAR else None


_FAR = 700.0  # ln of an LR beyond which exp() overflows; no grid reaches it


def _window(means: np.ndarray) -> np.ndarray:
    """First index of the three LRs fitted for each row of mean losses: the best and its
    neighbours, or the first or last three when the best is at an end (ties go to the lower LR)."""
    return np.clip(np.argmin(means, axis=1) - 1, 0, means.shape[1] - POINTS)


def seed_losses(
    done: pl.DataFrame, mode: str, point: dict[str, Any], eligible: pl.DataFrame
) -> dict[float, list[float]]:
    """LR -> the per-seed losses of the eligible points of one mode at one value of each other axis."""
    at = [pl.col(axis).eq_missing(value) for axis, value in point.items()]
    lrs = eligible.filter(*at)["lr"].to_list()
    rows = done.filter(pl.col("mode") == mode, *at, pl.col("lr").is_in(lrs)).sort("seed")
    return {lr: part["loss"].to_list() for (lr,), part in rows.group_by(["lr"], maintain_order=True)}


def resampled_means(losses: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Means of `RESAMPLES` resamples of one point's seeds; deviations scaled by sqrt(n/(n-1)) so
    their spread matches the sample SD's (a plain bootstrap is too narrow with three seeds)."""
    n = losses.size
    mean = losses.mean()
    picks = losses[rng.integers(0, n, size=(RESAMPLES, n))]
    return mean + math.sqrt(n / (n - 1)) * (picks - mean).mean(axis=1)


def fitted_minima(means: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ln(LR) of the fitted minimum for each row of mean losses, the best point and its window
    chosen per row. A parabola that opens downwards (or is flat) has its least value at the lower
    end of its window; where that end is the grid's own, the minimum lies beyond it (-inf, +inf)."""
    starts = _window(means)
    minima = np.empty(len(means))
    for start in np.unique(starts):
        rows = starts == start
        window = x[start : start + POINTS]
        a, b, c = (means[rows, start : start + POINTS] @ np.linalg.pinv(np.vander(window, 3)).T).T
        with np.errstate(divide="ignore", invalid="ignore"):
            vertex = -b / (2 * a)
        rises = a * window[-1] ** 2 + b * window[-1] < a * window[0] ** 2 + b * window[0]  # right end lower
        lower_end = -math.inf if start == 0 else window[0]
        upper_end = math.inf if start + POINTS == len(x) else window[-1]
        minima[rows] = np.where(a > 0, vertex, np.where(rises, upper_end, lower_end))
    return minima


def _open(low: float, high: float, low_end: float, high_end: float, minima: np.ndarray) -> Edge | None:
    """Which end of the grid the interval reaches past; past both, the end more resamples lie beyond."""
    lower, upper = low < low_end, high > high_end
    if lower and upper:
        return "upper" if np.sum(minima > high_end) >= np.sum(minima < low_end) else "lower"
    return "upper" if upper else "lower" if lower else None


def _join(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second


def optimum_panels(
    groups: pl.DataFrame,
    runs: pl.DataFrame,
    selection: dict[str, dict[str, Any]],
    optima: dict[str, dict[str, Any]],
    seeds: list[int] | None = None,
) -> list[dict[str, Any]]:
    """What the LR-optimum figure draws per mode at its winner's other axes: every seed's loss, each
    point's mean and SD, the fitted parabola over the points it used, the optimum and its interval,
    and the LRs that diverged (with the first step a seed diverged at), which have no loss to draw."""
    axes = point_axes(groups)
    done = completed_runs(runs, seeds, axes)
    panels = []
    for mode, winner in selection.items():
        fit = optima[mode]["lr_optimum"]
        same = [pl.col("mode") == mode, *(pl.col(axis).eq_missing(winner[axis]) for axis in axes)]
        at = groups.filter(*same)
        diverged = at.filter(pl.col("outcome") == PointOutcome.DIVERGED).sort("lr")
        points = at.filter(pl.col("mean_loss").is_not_null() & (pl.col("outcome") != PointOutcome.DIVERGED))
        seeded = done.filter(*same, ~pl.col("lr").is_in(diverged["lr"].to_list())).sort(["lr", "seed"])
        panels.append(
            {
                "mode": mode,
                "at": {axis: winner[axis] for axis in axes},
                "seeds": {
                    "lr": seeded["lr"].to_list(),
                    "loss": seeded["loss"].to_list(),
                    "seed": seeded["seed"].to_list(),
                },
                "points": points.select("lr", "mean_loss", "std_loss", "eligible").sort("lr").to_dicts(),
                "curve": _curve(fit["points_used"], points),
                DIVERGED: [
                    {"lr": row["lr"], "step": row.get("diverged_step")} for row in diverged.iter_rows(named=True)
                ],
                **{key: fit[key] for key in ("estimate", "low", "high", "open", "reason")},
            }
        )
    return panels


def _curve(used: list[float], points: pl.DataFrame) -> dict[str, list[float]]:
    """The fitted parabola, evaluated densely between the first and last LR it was fitted to."""
    if not used:
        return {"lr": [], "loss": []}
    means = {row["lr"]: row["mean_loss"] for row in points.iter_rows(named=True)}
    x = np.log(used)
    coefficients = np.polyfit(x, [means[lr] for lr in used], 2)
    dense = np.linspace(x[0], x[-1], 41)
    return {"lr": np.exp(dense).tolist(), "loss": np.polyval(coefficients, dense).tolist()}
