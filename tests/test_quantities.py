"""Durations, device-hours and costs keep the digits their size needs (status lines, pages)."""

from __future__ import annotations

import pytest

from ebd2n.quantities import format_amount, format_duration, loss_decimals


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "0"),
        (0.004171, "0.00417"),
        (0.0514, "0.0514"),
        (0.9996, "1.00"),
        (1.2345, "1.23"),
        (9.996, "10.0"),
        (12.34, "12.3"),
        (99.96, "100"),
        (1234.4, "1,234"),
        (123456.7, "123,457"),
    ],
)
def test_format_amount_three_significant_digits(value: float, expected: str) -> None:
    result = format_amount(value)
    assert result == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(0.42, "0.4 s"), (4.23, "4.2 s"), (42.4, "42 s"), (59.6, "1 min 00 s"), (247, "4 min 07 s"), (3930, "1 h 05 min")],
)
def test_format_duration_by_size(seconds: float, expected: str) -> None:
    result = format_duration(seconds)
    assert result == expected


@pytest.mark.parametrize(
    ("sd", "expected"), [(0.031, 3), (0.0031, 4), (0.3, 2), (4.2, 2), (1e-9, 6), (None, 4), (0.0, 4), (float("nan"), 4)]
)
def test_loss_decimals_follow_the_seed_spread(sd: float | None, expected: int) -> None:
    result = loss_decimals(sd)
    assert result == expected
