"""The verdict of a confirmation, planted: synthetic campaigns whose winner on the grid's seeds was,
or was not, the better point, their fresh seeds' results beside them, the selection made by
ebd2n.campaign.confirmation and the report built as `ebd2n report` builds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_tree import RunSpec, write_campaign

from ebd2n.campaign.confirmation import Confirm, select_points
from ebd2n.campaign.runs import parse_run_id
from ebd2n.campaign.verdict import CONFIRMED, INSIDE_NOISE, NOT_CONFIRMED
from ebd2n.layout import CampaignPaths

GRID_SEEDS, FRESH = (42, 43), (1, 2, 3)
CONFIRM = Confirm(2, FRESH)
LUCKY, STEADY, WORSE = 0.004, 0.002, 0.001


def _campaign(
    tmp_path: Path, grid: dict[float, list[float]], fresh: dict[float, list[float]], confirm: Confirm = CONFIRM
) -> dict:
    """A campaign of the grid's losses per LR (seeds 42, 43), its selection, the fresh seeds' losses
    of the points it chose; the report's `confirmation` entry."""
    from ebd2n.report import build_report

    specs = [
        RunSpec("synchronous", lr, 0.99, seed, loss)
        for lr, losses in grid.items()
        for seed, loss in zip(GRID_SEEDS, losses, strict=True)
    ]
    campaign = write_campaign(tmp_path, "sweep", specs)
    candidates = [parse_run_id(spec.run_id) for spec in specs]
    results = {
        spec.run_id: json.loads((campaign / "runs" / spec.run_id / "results.json").read_text()) for spec in specs
    }
    selection = select_points(candidates, confirm, results) | {"made": "2026-12-07T00:00:00+0000"}
    path = CampaignPaths(campaign).confirm_selection(selection["digest"])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(selection))
    chosen = [point["lr"] for point in selection["groups"][0]["points"]]
    extra = [
        RunSpec("synchronous", lr, 0.99, seed, loss)
        for lr in chosen
        for seed, loss in zip(FRESH, fresh[lr], strict=True)
    ]
    write_campaign(tmp_path, "sweep", extra, campaign_json=False, manifest=False)
    build_report(campaign)
    (group,) = json.loads((campaign / "report" / "results.json").read_text())["confirmation"]["groups"]
    return group


def test_a_winner_that_was_a_lucky_seed_is_not_confirmed(tmp_path: Path) -> None:
    """LR 0.004 won on two lucky grid seeds; on fresh seeds LR 0.002 is clearly the better point."""
    grid = {WORSE: [3.10, 3.11], STEADY: [3.05, 3.06], LUCKY: [2.98, 2.99]}
    fresh = {STEADY: [3.000, 3.002, 2.998], LUCKY: [3.020, 3.022, 3.018]}
    group = _campaign(tmp_path, grid, fresh)
    assert (group["winner"], group["runner_up"]["point"]) == (
        "synchronous-lr0.004-beta20.99",
        "synchronous-lr0.002-beta20.99",
    )
    assert group["verdict"] == NOT_CONFIRMED and group["runner_up"]["comparison"]["high"] < 0
    assert group["optimism"]["difference"] == pytest.approx(2.985 - 3.020) and group["p_best"] == 0.0


def test_a_winner_ahead_on_fresh_seeds_is_confirmed(tmp_path: Path) -> None:
    grid = {WORSE: [3.10, 3.11], STEADY: [3.05, 3.06], LUCKY: [2.98, 2.99]}
    fresh = {STEADY: [3.050, 3.052, 3.048], LUCKY: [3.000, 3.002, 2.998]}
    group = _campaign(tmp_path, grid, fresh)
    assert (group["verdict"], group["p_best"]) == (CONFIRMED, 1.0) and group["runner_up"]["comparison"]["low"] > 0


def test_fresh_seeds_that_cannot_tell_the_two_apart_read_inside_noise(tmp_path: Path) -> None:
    grid = {WORSE: [3.10, 3.11], STEADY: [3.05, 3.06], LUCKY: [2.98, 2.99]}
    fresh = {STEADY: [3.00, 3.06, 2.97], LUCKY: [3.01, 2.96, 3.05]}
    group = _campaign(tmp_path, grid, fresh)
    comparison = group["runner_up"]["comparison"]
    assert group["verdict"] == INSIDE_NOISE and comparison["low"] < 0 < comparison["high"]
    assert 0 < group["p_best"] < 1


@pytest.mark.parametrize(
    ("fresh", "verdict"),
    [([3.060, 3.062, 3.058], NOT_CONFIRMED), ([2.990, 2.980, 2.985], CONFIRMED)],
    ids=["fresh-seeds-read-it-worse", "fresh-seeds-reproduce-it"],
)
def test_a_lone_winner_is_judged_by_its_optimism(tmp_path: Path, fresh: list[float], verdict: str) -> None:
    """`top: 1`: no runner-up; a winner the fresh seeds read clearly worse (optimism's interval below 0)
    is not confirmed."""
    grid = {WORSE: [3.10, 3.11], STEADY: [3.05, 3.06], LUCKY: [2.98, 2.99]}
    group = _campaign(tmp_path, grid, {LUCKY: fresh}, Confirm(1, FRESH))
    assert (group["runner_up"], group["verdict"]) == (None, verdict)
