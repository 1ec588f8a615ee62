"""The modes compared directly: each mode's winner against the first mode's (the campaign's order,
synchronous training in most campaigns), each at its own best point, by Welch's test over their
seeds (`ebd2n.campaign.welch`). The winners' ranking within a mode never says how far apart the
modes are; this does, with the interval and p value on the same seeds the means use.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ebd2n.campaign.analysis import completed_runs, point_axes, point_losses
from ebd2n.campaign.welch import LEVEL, welch


def compare_modes(
    groups: pl.DataFrame, runs: pl.DataFrame, selection: dict[str, dict[str, Any]], seeds: list[int] | None = None
) -> dict[str, Any] | None:
    """{reference, level, modes: [{mode, difference (its winner's mean loss minus the reference's),
    se, df, p_value, low, high}]}; None with fewer than two modes selected. Pass the `seeds` given
    to `group_runs`, so the test sees the losses the means used."""
    if len(selection) < 2:
        return None
    axes = point_axes(groups)
    done = completed_runs(runs, seeds, axes)
    reference, *others = selection
    base = point_losses(done, selection[reference], axes)
    modes = []
    for mode in others:
        test = welch(base, point_losses(done, selection[mode], axes))
        difference = selection[mode]["mean_loss"] - selection[reference]["mean_loss"]
        empty = dict.fromkeys(("se", "df", "p_value", "low", "high"))
        modes.append({"mode": mode, **(test or {**empty, "difference": difference})})
    return {"reference": reference, "level": LEVEL, "modes": modes}
