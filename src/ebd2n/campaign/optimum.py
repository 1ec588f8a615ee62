"""Where a mode's LR optimum lies, and how sure the design lets us be.

Near its minimum, final loss is close to a parabola in ln(LR) (the shape optimum-LR laws such as
DeepSeek LLM's and Step Law's are fitted to). Per mode and value of the other axes (beta2, the
further axes) we fit one by least squares through the best LR with every seed and up to two
neighbours on each side, as many as the grid has (3 to 5 LRs), and take its vertex.

Checked or not. Through three LRs (a three-LR grid, or a best LR at the grid's end) the parabola
passes through every point: no residual is left to test it, and a real curve, steeper above its
optimum than below, moves the vertex further than the seeds do. Such an optimum is *unchecked*
(`checked` false, `check` says why) and `low` and `high` are its bracket, the best LR's neighbours
among the measured and the diverged LRs (None where it has none), which hold the minimum of any
curve with one minimum whose best point is the measured best: no interval is claimed.

With four or five LRs the residuals measure the misfit, and the 95 % interval is a percentile
bootstrap that carries it. Each resample (1) resamples the seeds within every grid point, their
deviations scaled by sqrt(n/(n-1)) since a plain bootstrap of three seeds is too narrow, and (2)
adds a drawn misfit: the point fit's residuals read as the next terms of the curve's expansion
about the vertex, (ln LR - vertex)^3 and with five LRs also ^4 (the residuals fix their
coefficients exactly), each term added with its own standard-normal weight times its coefficient.
The cubic, which tilts the curve and so moves the vertex, keeps its whole coefficient; the quartic
keeps what exceeds seed noise. A smooth misfit shifts the vertex coherently: added instead as
independent noise per LR (the plain lack-of-fit inflation) it held the optimum of asymmetric
curves in about two sweeps of three (benchmarks/README.md). The whole fit is redone per
resample, best point and window included, so a near-tie between distant LRs widens the interval as
it should. A resample whose parabola opens downwards has its least value at an end of its window,
or beyond the grid when that end is the grid's own. The resampling seed is fixed: the same runs
give the same interval. Coverage on simulated sweeps: benchmarks/optimum_coverage.py, docs/results.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ebd2n.campaign.analysis import Edge, completed_runs, diverged_above, lr_edge, outcome_text, point_axes, value_text
from ebd2n.outcomes import DIVERGED, PointOutcome

RESAMPLES = 2000
RESAMPLING_SEED = 0
LEVEL = 0.95
POINTS = 3  # a parabola needs three; through exactly three nothing checks it
REACH = 2  # neighbours fitted on each side of the best LR, where the grid has them (at most 5 LRs)
METHOD = (
    f"least-squares quadratic in ln(LR) through the best LR with every seed and up to {REACH} neighbours "
    f"on each side; with 4 or more LRs a {LEVEL:.0%} percentile bootstrap ({RESAMPLES} resamples, resampling "
    f"seed {RESAMPLING_SEED}) of seeds within each point (deviations scaled by sqrt(n/(n-1))) plus the fit's "
    "misfit, drawn as cubic and quartic terms about the vertex sized by the residuals beyond seed noise; "
    "through 3 LRs unchecked: low and high bracket it by the best LR's neighbours"
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
            point: fit_optimum(
                tested,
                seed_losses(done, mode, at := dict(zip(axes, point, strict=True)), eligible),
                diverged=part.filter(
                    *(pl.col(axis).eq_missing(value) for axis, value in at.items()),
                    pl.col("outcome") == PointOutcome.DIVERGED,
                )["lr"].to_list(),
            )
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
    """One line per mode: its fitted LR optimum and interval (or, unchecked, its bracket), or why
    there is none; and its edge."""
    lines = []
    for mode, entry in optima.items():
        fit = entry["lr_optimum"]
        if fit["estimate"] is None:
            text = f"{mode}: no fitted LR optimum ({fit['reason']})"
            if not fit["checked"] and (fit["low"] is not None or fit["high"] is not None):
                text += f"; unchecked bracket {_bound(fit['low'])} to {_bound(fit['high'])}"
        elif not fit["checked"]:
            text = (
                f"{mode}: LR optimum unchecked ({fit['check']}): between {_bound(fit['low'])} and "
                f"{_bound(fit['high'])}, vertex {fit['estimate']:.3g}"
            )
        else:
            text = f"{mode}: fitted LR optimum {fit['estimate']:.3g}"
            if fit["low"] is not None or fit["high"] is not None:
                text += f" (95 %: {_bound(fit['low'])} to {_bound(fit['high'])}; {fit['check']})"
        if fit["estimate"] is not None and fit["reason"]:
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


def fit_optimum(
    tested: list[float],
    losses: dict[float, list[float]],
    resamples: int = RESAMPLES,
    diverged: list[float] | tuple[float, ...] = (),
) -> dict[str, Any]:
    """The fitted optimum over `losses` (LR -> per-seed final losses of the points with every
    seed); `tested` is every LR of the grid, whose ends decide whether the interval is open;
    `diverged` the LRs whose point diverged, worse than any loss, so one beside the best closes
    its bracket.

    `checked` says whether anything tested the parabola (a residual to compare with seed noise);
    `low`/`high` are then the interval, else the bracket (`bracket`: the best LR's neighbours,
    None past an end, in either case); `check` says what tested it, or why nothing did; `misfit` is
    the point means' RMS departure from the parabola (nats; about the seed noise of a mean where the
    curve is a parabola; None unchecked)."""
    lrs = sorted(losses)
    means = np.array([np.mean(losses[lr]) for lr in lrs])
    best = int(np.argmin(means)) if lrs else 0
    bounds = sorted({*lrs, *diverged})
    place = bounds.index(lrs[best]) if lrs else 0
    bracket = [bounds[place - 1] if place > 0 else None, bounds[place + 1] if place + 1 < len(bounds) else None]
    result: dict[str, Any] = {
        "estimate": None,
        "low": None,
        "high": None,
        "points_used": [],
        "method": METHOD,
        "open": None,
        "reason": None,
        "checked": False,
        "check": None,
        "bracket": bracket if lrs else [None, None],
        "misfit": None,
    }
    if len(lrs) < POINTS:
        result["reason"] = (
            f"only {len(lrs)} learning rate{'' if len(lrs) == 1 else 's'} with every seed; "
            f"a quadratic fit needs {POINTS}"
        )
        result["check"] = "too few LRs to fit"
        return result
    x = np.log(lrs)
    start, stop = (int(end[0]) for end in _windows(means[None]))
    result["points_used"] = lrs[start:stop]
    a, vertex = _vertex(*_parabola(x[start:stop], means[None, start:stop]))
    if a[0] <= 0:
        result["reason"] = (
            "the fitted curve bends the wrong way (loss is not convex around the best LR), so it has no minimum"
        )
    else:
        vertex = float(vertex[0])
        low_end, high_end = math.log(min(tested)), math.log(max(tested))
        if low_end <= vertex <= high_end:
            result["estimate"] = math.exp(vertex)
        else:
            result["reason"] = (
                f"the fitted minimum lies beyond the {'upper' if vertex > high_end else 'lower'} end of the grid"
            )
    if stop - start == POINTS or min(len(losses[lr]) for lr in lrs) < 2:
        result["check"] = f"{POINTS} LRs, no residual" if stop - start == POINTS else "one seed per LR, no seed noise"
        result["low"], result["high"] = bracket
        result["open"] = "lower" if bracket[0] is None else "upper" if bracket[1] is None else None
        return result
    misfit = misfit_terms(losses)
    result["checked"] = True
    result["misfit"] = misfit.residual
    freedom = stop - start - POINTS
    result["check"] = (
        f"{stop - start} LRs, {freedom} residual degree{'s' if freedom > 1 else ''} of freedom: "
        f"the means depart from the parabola by {misfit.residual:.2g} nats RMS, seed noise alone {misfit.noise:.2g}"
    )
    minima = np.sort(bootstrap_minima(losses, RESAMPLING_SEED, resamples))
    tail = (1 - LEVEL) / 2
    low, high = minima[int(math.floor(tail * resamples))], minima[int(math.ceil((1 - tail) * resamples)) - 1]
    result["low"], result["high"] = _lr(low), _lr(high)
    result["open"] = _open(low, high, math.log(min(tested)), math.log(max(tested)), minima)
    return result


@dataclass(frozen=True)
class Misfit:
    """The point fit's misfit as drawn into resamples: terms (one row each) over LRs start:stop."""

    start: int
    stop: int
    terms: np.ndarray
    """Each term's values at the window's LRs: (ln LR - vertex)^3, and ^4 with five LRs."""
    scales: np.ndarray
    """Each term's coefficient, less seed noise (root of the difference of squares, 0 at least)."""
    noise: float
    """The seed noise of a point's mean: the pooled seed SD over sqrt(seeds), nats."""
    residual: float | None
    """The point means' RMS departure from the parabola, over its residual degrees of freedom
    (about `noise` where the curve is a parabola), nats; None through three LRs."""


def misfit_terms(losses: dict[float, list[float]]) -> Misfit:
    """The misfit of the point fit's window (of 4 or 5 LRs, each with 2 or more seeds; none drawn
    through 3): the residuals as the cubic and quartic terms about the vertex that give them, the
    cubic's coefficient whole and the quartic's square less its variance under seed noise alone
    (pooled over the window)."""
    lrs = sorted(losses)
    x = np.log(lrs)
    means = np.array([np.mean(losses[lr]) for lr in lrs])
    start, stop = (int(end[0]) for end in _windows(means[None]))
    window, fitted = x[start:stop], [np.asarray(losses[lr], dtype=float) for lr in lrs[start:stop]]
    counts = np.array([values.size for values in fitted])
    pooled = sum(float(np.sum((values - values.mean()) ** 2)) for values in fitted) / float(np.sum(counts - 1))
    noise = math.sqrt(pooled / float(np.mean(counts)))
    if stop - start == POINTS:
        return Misfit(start, stop, np.zeros((0, POINTS)), np.zeros(0), noise, None)
    a, vertex = _vertex(*_parabola(window, means[None, start:stop]))
    centre = float(np.clip(vertex[0], window[0], window[-1])) if a[0] > 0 else float(x[int(np.argmin(means))])
    u = window - centre
    design = np.vander(u, POINTS)
    rest = np.eye(u.size) - design @ np.linalg.pinv(design)  # onto the residuals
    terms = np.stack([u**power for power in range(POINTS, u.size)])  # cubic, and quartic with five LRs
    solve = np.linalg.pinv(rest @ terms.T)  # residuals -> coefficients (exact: they span the residuals)
    coefficients = solve @ means[start:stop]
    residuals = rest @ means[start:stop]
    residual = math.sqrt(float(residuals @ residuals) / (u.size - POINTS))
    variance = solve**2 @ (pooled / counts)  # each coefficient's variance under seed noise alone
    # the cubic tilts the curve and so moves the vertex: its coefficient is taken whole, its seed
    # noise kept, so a tilt that noise half-hides still widens the interval; the quartic mostly
    # bends it, and keeps only what exceeds seed noise (chosen by benchmarks/optimum_coverage.py)
    scales = np.sqrt(np.maximum(coefficients**2 - variance * (np.arange(coefficients.size) > 0), 0.0))
    return Misfit(start, stop, terms, scales, noise, residual)


def bootstrap_minima(losses: dict[float, list[float]], seed: int, resamples: int = RESAMPLES) -> np.ndarray:
    """ln(LR) of the fitted minimum of each resample of every point's seeds, its misfit drawn in (in
    resample order)."""
    return fitted_minima(resampled_grid(losses, np.random.default_rng(seed), resamples), np.log(sorted(losses)))


def resampled_grid(
    losses: dict[float, list[float]], rng: np.random.Generator, resamples: int = RESAMPLES
) -> np.ndarray:
    """Resampled mean losses (resamples x LRs, in LR order): every point's seeds resampled, and the
    point fit's misfit (`misfit_terms`) added at its LRs with independent standard-normal weights."""
    lrs = sorted(losses)
    grid = np.stack([resampled_means(np.asarray(losses[lr], dtype=float), rng, resamples) for lr in lrs], axis=1)
    misfit = misfit_terms(losses)
    if misfit.scales.size:
        weights = rng.standard_normal((resamples, misfit.scales.size)) * misfit.scales
        grid[:, misfit.start : misfit.stop] += weights @ misfit.terms
    return grid


def _lr(log_lr: float) -> float | None:
    """The LR of a bound; None for one past any representable LR (a nearly flat resample's vertex)."""
    return math.exp(log_lr) if abs(log_lr) < _FAR else None


_FAR = 700.0  # ln of an LR beyond which exp() overflows; no grid reaches it


def _windows(means: np.ndarray, reach: int = REACH) -> tuple[np.ndarray, np.ndarray]:
    """First and past-last index of the LRs fitted for each row of mean losses: the best (ties go
    to the lower LR) and up to `reach` neighbours on each side, at least three at the grid's end."""
    best, size = np.argmin(means, axis=1), means.shape[1]
    start, stop = np.maximum(best - reach, 0), np.minimum(best + reach + 1, size)
    return np.minimum(start, max(size - POINTS, 0)), np.maximum(stop, min(POINTS, size))


def _parabola(window: np.ndarray, means: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The least-squares parabola a*u^2 + b*u + c through each row of `means` at `window`, with u
    ln LR less the window's centre: a, b and the centre."""
    centre = float(np.mean(window))
    a, b, _ = (means @ np.linalg.pinv(np.vander(window - centre, POINTS)).T).T
    return a, b, centre


def _vertex(a: np.ndarray, b: np.ndarray, centre: float) -> tuple[np.ndarray, np.ndarray]:
    """The curvature and the vertex's ln LR (meaningful where the curvature is positive)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return a, centre - b / (2 * a)


def seed_losses(
    done: pl.DataFrame, mode: str, point: dict[str, Any], eligible: pl.DataFrame
) -> dict[float, list[float]]:
    """LR -> the per-seed losses of the eligible points of one mode at one value of each other axis."""
    at = [pl.col(axis).eq_missing(value) for axis, value in point.items()]
    lrs = eligible.filter(*at)["lr"].to_list()
    rows = done.filter(pl.col("mode") == mode, *at, pl.col("lr").is_in(lrs)).sort("seed")
    return {lr: part["loss"].to_list() for (lr,), part in rows.group_by(["lr"], maintain_order=True)}


def resampled_means(losses: np.ndarray, rng: np.random.Generator, resamples: int = RESAMPLES) -> np.ndarray:
    """Means of `resamples` resamples of one point's seeds; deviations scaled by sqrt(n/(n-1)) so
    their spread matches the sample SD's (a plain bootstrap is too narrow with three seeds)."""
    n = losses.size
    mean = losses.mean()
    picks = losses[rng.integers(0, n, size=(resamples, n))]
    return mean + math.sqrt(n / (n - 1)) * (picks - mean).mean(axis=1)


def fitted_minima(means: np.ndarray, x: np.ndarray, reach: int = REACH) -> np.ndarray:
    """ln(LR) of the fitted minimum for each row of mean losses, the best point and its window
    (`reach` neighbours each side) chosen per row. A parabola that opens downwards (or is flat) has
    its least value at the end of its window where it is lower; where that end is the grid's own,
    the minimum lies beyond it (-inf, +inf)."""
    starts, stops = _windows(means, reach)
    minima = np.empty(len(means))
    for start, stop in np.unique(np.stack([starts, stops], axis=1), axis=0):
        rows = (starts == start) & (stops == stop)
        window = x[start:stop]
        a, b, centre = _parabola(window, means[rows, start:stop])
        vertex = _vertex(a, b, centre)[1]
        first, last = window[0] - centre, window[-1] - centre
        rises = a * (last**2 - first**2) + b * (last - first) < 0  # its right end lower
        lower_end = -math.inf if start == 0 else window[0]
        upper_end = math.inf if stop == len(x) else window[-1]
        minima[rows] = np.where(a > 0, vertex, np.where(rises, upper_end, lower_end))
    return minima


def _open(low: float, high: float, low_end: float, high_end: float, minima: np.ndarray) -> Edge | None:
    """Which end of the grid the interval reaches past; past both, the end more resamples lie beyond."""
    lower, upper = low < low_end, high > high_end
    if lower and upper:
        return "upper" if np.sum(minima > high_end) >= np.sum(minima < low_end) else "lower"
    return "upper" if upper else "lower" if lower else None


def optimum_panels(
    groups: pl.DataFrame,
    runs: pl.DataFrame,
    selection: dict[str, dict[str, Any]],
    optima: dict[str, dict[str, Any]],
    seeds: list[int] | None = None,
) -> list[dict[str, Any]]:
    """What the LR-optimum figure draws per mode at its winner's other axes: every seed's loss, each
    point's mean and SD, the fitted parabola over the points it used, the optimum and its band (`low`
    to `high`: the interval, or the bracket of an unchecked optimum), and the LRs that diverged (with
    the first step a seed diverged at), which have no loss to draw."""
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
                **{key: fit[key] for key in ("estimate", "low", "high", "open", "reason", "checked", "check")},
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
