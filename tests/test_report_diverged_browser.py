"""A campaign with a diverged LR, its report's Explore section in headless Chromium at 800 and 1,400 px:
the converged curves fill the plot (the diverged runs, 2,000 nats, are marks at the top edge until
asked for), every group has its own colour, parallel coordinates tick only the values the grid took,
and the page never scrolls sideways."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_tree import (
    REPORT_BETA2,
    REPORT_MODES,
    REPORT_SEEDS,
    STEPS_PER_EPOCH,
    RunSpec,
    report_runs,
    write_campaign,
)
from offline_browser import (
    MARKS,
    Loaded,
    assert_one_click_scales_to_the_diverged,
    assert_scaled_to_the_converged,
    explorer,
    explorer_view,
)

pytestmark = MARKS
PLOT = "document.getElementById('plot-explore')"
DIVERGED_LR = 10.0
BLOWN_UP = 400.0
"""How far a diverged run's per-step loss is multiplied before it stops (~2,000 nats, as a real one)."""


@pytest.fixture(scope="module")
def diverging_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report tests' 24 runs and, at LR 10, 12 runs that diverged with blown-up losses."""
    from ebd2n.report import build_report

    diverged = [
        RunSpec(mode, DIVERGED_LR, beta2, seed, 0.0, diverged_at=2 * STEPS_PER_EPOCH + 1)
        for mode in REPORT_MODES
        for beta2 in REPORT_BETA2
        for seed in REPORT_SEEDS
    ]
    campaign = write_campaign(
        tmp_path_factory.mktemp("diverging"), "sweep", [*report_runs(), *diverged], steps_per_epoch=30
    )
    for spec in diverged:
        metrics = campaign / "runs" / spec.run_id / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        for record in records:
            if record["type"] == "step":
                record["loss"] *= BLOWN_UP
        metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
    build_report(campaign)
    return campaign


@pytest.fixture(scope="module", params=[800, 1400], ids=["800px", "1400px"])
def explored(request: pytest.FixtureRequest, browser, diverging_campaign: Path) -> Iterator[Loaded]:
    with explorer(browser, diverging_campaign, request.param) as loaded:
        yield loaded


def _view(loaded: Loaded) -> dict:
    return explorer_view(loaded, "LR 10")


def test_converged_curves_fill_the_plot_and_diverged_runs_are_marks_at_its_edge(explored: Loaded) -> None:
    assert_scaled_to_the_converged(explored, "LR 10", 12)


def test_one_click_scales_to_the_diverged_runs_too(explored: Loaded) -> None:
    assert_one_click_scales_to_the_diverged(explored, "LR 10")


@pytest.mark.parametrize("grouping", ["mode,lr,beta2", ""])
def test_every_group_has_its_own_colour(explored: Loaded, grouping: str) -> None:
    explored.page.select_option("#explore-group", grouping)
    colours = _view(explored)["colours"]
    explored.page.select_option("#explore-group", "mode,lr,beta2")
    assert len(colours) == (12 if grouping else 36) and len(set(colours)) == len(colours)


def test_a_group_mixing_diverged_and_converged_runs_is_drawn_from_its_converged_ones(explored: Loaded) -> None:
    """Grouped by mode, each group holds the LR 10 runs too: its mean and band stay within the plot."""
    explored.page.select_option("#explore-group", "mode")
    drawn = explored.page.evaluate(
        f"""(() => {{ const p = {PLOT}, lines = p.data.filter(t => t.mode === 'lines');
        return {{top: p.layout.yaxis.range[1], marks: p.data.filter(t => t.mode === 'markers').length,
                 highest: Math.max(...lines.flatMap(t => t.y.filter(y => y !== null)))}}; }})()"""
    )
    explored.page.select_option("#explore-group", "mode,lr,beta2")
    assert drawn["highest"] <= drawn["top"] and drawn["marks"] == 12


def test_parallel_coordinates_tick_only_the_values_taken(explored: Loaded) -> None:
    ticks = explored.page.evaluate(
        "document.getElementById('plot-parallel').data[0].dimensions"
        ".filter(d => ['beta2', 'seed'].includes(d.label)).map(d => d.ticktext)"
    )
    assert ticks == [[f"{b:g}" for b in REPORT_BETA2], [str(s) for s in REPORT_SEEDS]]


def test_the_page_never_scrolls_sideways(explored: Loaded) -> None:
    widths = explored.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1] and not explored.errors
