"""The report's confirmation section (ebd2n.campaign.verdict) as the page shows it: per preset x
mode one row of text, every loss to the page's decimals."""

from __future__ import annotations

from typing import Any

from ebd2n.campaign.runs import BASE
from ebd2n.report.html import DASH


def confirmation_section(confirmation: dict[str, Any] | None, digits: int) -> dict[str, Any] | None:
    """The rows of the section, and the files it was read from; None for a campaign without `confirm`."""
    if confirmation is None:
        return None
    rows = []
    for group in confirmation["groups"]:
        name = group["mode"] if group["scope"] == BASE else f"{group['scope']} {group['mode']}"
        if "winner" not in group:
            rows.append({"mode": name, "winner": DASH, "verdict": group.get("reason", DASH), "cells": [DASH] * 5})
            continue
        runner = group["runner_up"]
        cells = [
            _mean(group["selected"], digits),
            _mean(group["confirmed"], digits),
            _difference(group["optimism"], digits),
            _difference(runner["comparison"], digits) if runner else DASH,
            f"{group['p_best']:.2f}" if group["p_best"] is not None else DASH,
        ]
        verdict = group["verdict"] or "not yet: the fresh seeds are still training"
        runner_up = runner["point"] if runner else None
        rows.append(
            {"mode": name, "winner": group["winner"], "runner_up": runner_up, "verdict": verdict, "cells": cells}
        )
    return {"rows": rows, "seeds": ", ".join(map(str, confirmation["seeds"])), **confirmation}


def _mean(summary: dict[str, Any], digits: int) -> str:
    if summary["mean"] is None:
        return DASH
    sd = f" ± {summary['sd']:.{digits}f}" if summary["sd"] is not None else ""
    return f"{summary['mean']:.{digits}f}{sd} ({summary['seeds']} seeds)"


def _difference(test: dict[str, Any] | None, digits: int) -> str:
    if test is None:
        return DASH
    return (
        f"{test['difference']:+.{digits}f} (95 %: {test['low']:+.{digits}f} to {test['high']:+.{digits}f}; "
        f"Welch p {test['p_value']:.3g})"
    )
