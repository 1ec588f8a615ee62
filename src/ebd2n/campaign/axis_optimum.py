"""How the fitted LR optimum moves along a further axis: the optimum at each batch size (or beta1,
schedule, ...), the other axes at the mode's winner, and its shift from the axis's first value.

The shift is the ratio of two fitted optima; its 95 % interval comes from the two points'
bootstraps (ebd2n.campaign.optimum: seeds and the fit's misfit), resampled independently and paired
resample by resample, so it is as wide as both make it. Where either optimum is unchecked (three
LRs around its best), the shift's range is the ratio of their ranges instead (each end of one over
the other end of the other: a bracket, not an interval). A value whose fit has no optimum has no
shift.

Along an axis of whole numbers (a batch size, a token count) the optima also give a power law,
LR* proportional to value^k, fitted by least squares in log-log over every value with an optimum;
its exponent's interval, and the LR it predicts at the next value (the axis continued by its last
ratio), come from the same paired resamples, where every optimum is checked (`checked`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from ebd2n.campaign.analysis import completed_runs, point_axes
from ebd2n.campaign.optimum import LEVEL, RESAMPLES, RESAMPLING_SEED, bootstrap_minima, fit_optimum, seed_losses


def optimum_shifts(
    groups: pl.DataFrame,
    runs: pl.DataFrame,
    selection: dict[str, dict[str, Any]],
    further: Sequence[str],
    seeds: list[int] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per mode with a winner, per further axis with several values: each value's fitted optimum and
    its shift from the first value's, with intervals (`fit_optimum`'s fields, then `shift`,
    `shift_low`, `shift_high`)."""
    axes = point_axes(groups)
    done = completed_runs(runs, seeds, axes)
    out: dict[str, list[dict[str, Any]]] = {}
    for mode, winner in selection.items():
        part = groups.filter(pl.col("mode") == mode)
        eligible = part.filter(pl.col("eligible"))
        tested = sorted(part["lr"].unique().to_list())
        for axis in further:
            values = sorted(part[axis].drop_nulls().unique().to_list())
            if len(values) < 2:
                continue
            rows = []
            for index, value in enumerate(values):
                point = {name: value if name == axis else winner[name] for name in axes}
                losses = seed_losses(done, mode, point, eligible)
                rows.append({"value": value, "losses": losses, **fit_optimum(tested, losses), "index": index})
            minima = [_minima(row.pop("losses"), RESAMPLING_SEED + row.pop("index"), row) for row in rows]
            shifted = _shifts(rows, minima)
            reference = next((row["value"] for row in shifted if row["estimate"] is not None), None)
            entry = {"axis": axis, "reference": reference, "values": shifted}
            if all(isinstance(value, int) and not isinstance(value, bool) and value > 0 for value in values):
                entry["law"] = _power_law(rows, minima)
            out.setdefault(mode, []).append(entry)
    return out


def _shifts(rows: list[dict[str, Any]], minima: list[np.ndarray | None]) -> list[dict[str, Any]]:
    """Each value's fit with its shift from the first value with an optimum (None where either has
    none; the reference itself shifts by 1 with no interval): the paired resamples' interval, or
    the ratio of the two ranges where either is unchecked."""
    first = next((index for index, row in enumerate(rows) if row["estimate"] is not None), None)
    shifted = []
    for index, row in enumerate(rows):
        shift = low = high = None
        if first is not None and row["estimate"] is not None:
            shift = row["estimate"] / rows[first]["estimate"]
            if index != first and minima[index] is not None and minima[first] is not None:
                low, high = _bounds(np.exp(minima[index] - minima[first]))
            elif index != first:
                low, high = _ratio(row["low"], rows[first]["high"]), _ratio(row["high"], rows[first]["low"])
        shifted.append({**row, "shift": shift, "shift_low": low, "shift_high": high})
    return shifted


def _power_law(rows: list[dict[str, Any]], minima: list[np.ndarray | None]) -> dict[str, Any] | None:
    """LR* = c * value^k over the values with an optimum, and the LR it predicts at the next value;
    None with fewer than two such values. Intervals only where every optimum used is checked."""
    used = [index for index, row in enumerate(rows) if row["estimate"] is not None]
    if len(used) < 2:
        return None
    x = np.log([float(rows[index]["value"]) for index in used])
    slope, intercept = np.polyfit(x, np.log([rows[index]["estimate"] for index in used]), 1)
    values = [rows[index]["value"] for index in used]
    following = round(values[-1] * values[-1] / values[-2])
    law = {
        "exponent": float(slope),
        "exponent_low": None,
        "exponent_high": None,
        "values_used": values,
        "checked": all(rows[index]["checked"] for index in used),
        "next": {
            "value": following,
            "lr": math.exp(intercept + slope * math.log(following)),
            "low": None,
            "high": None,
        },
    }
    resampled = [minima[index] for index in used]
    if all(sample is not None for sample in resampled):
        logs = np.stack(resampled, axis=1)  # RESAMPLES x values, ln LR*
        finite = np.all(np.isfinite(logs), axis=1)
        if finite.sum() >= RESAMPLES * LEVEL:  # an interval only where nearly every resample has an optimum
            fits = np.polyfit(x, logs[finite].T, 1)  # 2 x resamples: slopes, intercepts
            predicted = fits[1] + fits[0] * math.log(following)
            law["exponent_low"], law["exponent_high"] = _tails(fits[0])
            low, high = _tails(predicted)
            law["next"]["low"], law["next"]["high"] = math.exp(low), math.exp(high)
    return law


def _minima(losses: dict[float, list[float]], seed: int, fit: dict[str, Any]) -> np.ndarray | None:
    """A point's bootstrap minima (ln LR), or None where its fit is unchecked (too few LRs, three
    around the best, or one seed per LR)."""
    return bootstrap_minima(losses, seed) if fit["checked"] else None


def _ratio(top: float | None, bottom: float | None) -> float | None:
    """One end of a shift's range from unchecked ranges; None where either end is past the grid."""
    return top / bottom if top is not None and bottom is not None else None


def _bounds(ratios: np.ndarray) -> tuple[float | None, float | None]:
    """The percentile interval of the resampled shifts; an end past any grid is None."""
    low, high = _tails(np.nan_to_num(ratios, nan=np.inf))
    return (low if 0 < low < np.inf else None, high if 0 < high < np.inf else None)


def _tails(samples: np.ndarray) -> tuple[float, float]:
    """The `LEVEL` percentile interval of resampled values, indexed as `fit_optimum`'s interval is."""
    tail, ordered = (1 - LEVEL) / 2, np.sort(samples)
    return float(ordered[int(math.floor(tail * ordered.size))]), float(
        ordered[int(math.ceil((1 - tail) * ordered.size)) - 1]
    )
