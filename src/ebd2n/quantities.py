"""How durations, device-hours, costs and losses read on every console line and page: with the
precision their size needs, so a two-minute CPU run shows 0.0334 CPU-hours, not 0.00, a 300-hour
campaign shows 300, not 300.000, and a loss whose seed SD is 0.03 shows 4.527, not 4.527369.
"""

from __future__ import annotations

import math

SIGNIFICANT = 3
"""Significant digits of device-hours and costs."""


def format_duration(seconds: float) -> str:
    """`1 h 05 min`; `4 min 07 s` under an hour; `42 s` under a minute; `4.2 s` under ten seconds."""
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    if hours:
        return f"{hours} h {rest // 60:02d} min"
    return f"{rest // 60} min {rest % 60:02d} s" if rest >= 60 else f"{rest} s"


def format_amount(value: float) -> str:
    """Device-hours or money to SIGNIFICANT digits, whole units from 100 on, in fixed notation:
    `0.00417`, `1.23`, `12.3`, `1,234`; zero is `0`."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 99.95:  # whole units: never round the integer part away
        return f"{value:,.0f}"
    rounded = float(f"{value:.{SIGNIFICANT}g}")  # first, so 9.996 reads 10.0, not 10.00
    decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def loss_decimals(sd: float | None) -> int:
    """Decimals a loss is shown with where its seed SD is `sd`: down to the SD's second significant
    digit (0.031: 3; 0.0031: 4), 4 without an SD; the CSVs keep full precision."""
    if sd is None or not math.isfinite(sd) or sd <= 0:
        return 4
    return min(6, max(2, 1 - math.floor(math.log10(sd))))
