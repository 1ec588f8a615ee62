"""Welch's comparison of two points' seed losses: the difference of their means, its standard error
sqrt(sd_a²/n_a + sd_b²/n_b), the t-test p and the 95 % interval, all from one Welch-Satterthwaite df.

The margin of a winner over its runner-up and the difference between modes' winners are read on
this one scale, so a margin in standard errors is the t statistic its p value comes from (not a
multiple of one side's SD, which reads as large when the other side is the noisy one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

LEVEL = 0.95
"""Coverage of the difference's interval."""


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, Any] | None:
    """{difference (mean b - mean a), se, df, p_value, low, high}; None when there is no spread to
    test (fewer than two seeds on a side, or no seed varies)."""
    if len(a) < 2 or len(b) < 2:
        return None
    var_a, var_b = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return None
    df = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    difference = float(np.mean(b) - np.mean(a))
    half = float(stats.t.ppf((1 + LEVEL) / 2, df)) * se
    return {
        "difference": difference,
        "se": se,
        "df": float(df),
        "p_value": float(2 * stats.t.sf(abs(difference) / se, df)),
        "low": difference - half,
        "high": difference + half,
    }
