"""How the campaign page writes its numbers (#57): every loss to one number of decimals, the winner's
margin in Welch standard errors (the scale its p value is on), the modes compared at their own
winners with the values results.json holds, and the cost section's times as people read them."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl
import pytest
from campaign_tree import RunSpec, write_campaign
from scipy import stats

from ebd2n.campaign.analysis import group_runs, winner_notes
from ebd2n.campaign.welch import welch
from ebd2n.report import build_report
from ebd2n.report.page import time_text

WINNER_SD, RUNNER_SD, MARGIN = 0.002, 0.026, 0.03424
"""The synchronous winner's seed SD, its runner-up's (13 times larger) and the runner-up's margin:
17.12 of the winner's SDs, but about 2.3 Welch standard errors."""
SPREADS = {  # (mode, LR): (mean loss, seed SD); packed-4's winner has ten times the synchronous SD
    ("synchronous", 0.001): (3.6 + MARGIN, RUNNER_SD),
    ("synchronous", 0.002): (3.6, WINNER_SD),
    ("synchronous", 0.004): (3.7, 0.01),
    ("packed-4", 0.001): (3.75, 0.015),
    ("packed-4", 0.002): (3.65, 0.015),
    ("packed-4", 0.004): (3.62, 0.02),
}
SEEDS = (42, 43, 44)


def _specs() -> list[RunSpec]:
    """Three seeds per point at mean - SD, mean, mean + SD: a sample SD of exactly SD."""
    return [
        RunSpec(mode, lr, 0.95, seed, mean + offset * sd)
        for (mode, lr), (mean, sd) in SPREADS.items()
        for seed, offset in zip(SEEDS, (-1, 0, 1), strict=True)
    ]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    campaign = write_campaign(tmp_path_factory.mktemp("formats"), "formats", _specs(), audit=True)
    build_report(campaign)
    return campaign


def _page(campaign: Path) -> str:
    return (campaign / "report" / "index.html").read_text()


def _results(campaign: Path) -> dict:
    return json.loads((campaign / "report" / "results.json").read_text())


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]


def test_welch_matches_scipys_t_test_and_its_interval_holds_the_difference_at_p_005() -> None:
    a, b = [3.601, 3.603, 3.6], [3.62, 3.66, 3.59, 3.64]
    test = welch(a, b)
    half = (test["high"] - test["low"]) / 2
    result = (test["p_value"], 2 * stats.t.sf(half / test["se"], test["df"]))
    expected = (pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue), pytest.approx(0.05))
    assert result == expected


def test_winner_margin_is_in_welch_standard_errors_the_t_its_p_value_comes_from() -> None:
    runs = pl.DataFrame(
        [
            {"run": f"{s.mode}-{s.lr}-{s.seed}", "mode": s.mode, "lr": s.lr, "beta2": s.beta2, "seed": s.seed}
            | {"status": "complete", "loss": s.loss}
            for s in _specs()
        ]
    )
    notes = winner_notes(group_runs(runs), runs)["synchronous"]
    se = math.sqrt(WINNER_SD**2 / 3 + RUNNER_SD**2 / 3)
    df = se**4 / ((WINNER_SD**2 / 3) ** 2 / 2 + (RUNNER_SD**2 / 3) ** 2 / 2)
    result = (notes["margin_vs_se"], notes["p_value"], "times its Welch standard error" in notes["verdict"])
    expected = (pytest.approx(MARGIN / se), pytest.approx(2 * stats.t.sf(MARGIN / se, df)), True)
    assert result == expected


def test_report_best_table_margin_reads_in_welch_standard_errors(campaign: Path) -> None:
    best = _section(_page(campaign), '<table class="best">', "</table>")
    notes = _results(campaign)["notes"]
    result = re.findall(r"([\d.]+) × (\w+ \w+|\w+)</span>", best)
    expected = [(f"{notes[mode]['margin_vs_se']:.2f}", "Welch SE") for mode in ("synchronous", "packed-4")]
    assert result == expected


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ('<table class="best">', "</table>"),
        ('<section id="response">', "</section>"),
        ('<table class="runs">', "</table>"),
        ('<div id="modes-compared">', "</div>"),
    ],
    ids=["best recipes", "LR response", "all runs", "modes compared"],
)
def test_report_every_loss_on_the_page_has_one_number_of_decimals(campaign: Path, start: str, end: str) -> None:
    """The winners' SDs (0.002 and 0.02) ask for 4 and 3 decimals: the page takes the 4 everywhere."""
    section = _section(_page(campaign), start, end)
    losses = re.findall(r"(?<![\d.])3\.\d+|± 0\.\d+|[+−]0\.\d+", section)  # losses (3.x nats), SDs, differences
    result = {len(loss.split(".")[1]) for loss in losses}
    assert result == {4}


def test_report_modes_compared_line_holds_the_values_results_json_has(campaign: Path) -> None:
    results = _results(campaign)
    entry = results["mode_comparison"]["modes"][0]
    line = re.search(r'<li data-mode="packed-4">(.*?)</li>', _page(campaign))[1]

    def signed(value: float) -> str:
        return f"{value:+.4f}".replace("-", "−")

    expected = (
        f"packed-4 vs synchronous: {signed(entry['difference'])} nats (95 %: {signed(entry['low'])} "
        f"to {signed(entry['high'])}; Welch p {entry['p_value']:.3g})"
    )
    difference = results["selected"]["packed-4"]["mean_loss"] - results["selected"]["synchronous"]["mean_loss"]
    assert (line, entry["difference"]) == (expected, pytest.approx(difference))


def test_report_cost_section_shows_times_as_people_read_them(campaign: Path) -> None:
    cost = _section(_page(campaign), '<section id="cost">', "</section>")
    result = (re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d", cost), "(2026-09-02 10:00 UTC)" in cost)
    assert result == ([], True)


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ("2026-12-07T16:03:27.512+02:00", "2026-12-07 14:03 UTC"),
        ("2026-12-07T14:03:00+0000", "2026-12-07 14:03 UTC"),
        ("2026-09-01T10:00:00Z", "2026-09-01 10:00 UTC"),
        ("2026-12-07T14:03:00", "2026-12-07 14:03"),
    ],
    ids=["offset", "basic offset", "zulu", "no offset"],
)
def test_time_text_reads_to_the_minute_in_utc(recorded: str, expected: str) -> None:
    result = time_text(recorded)
    assert result == expected
