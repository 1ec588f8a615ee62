"""Axis labels as drawn in headless Chromium at 800 and 1,400 px (#57): the run dashboard's
gradient-norm axis labels read as the numbers they stand for, a dense LR grid's axis labels are LRs
the grid took and never overlap, and no summary card's value wraps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from campaign_tree import REPORT_MODES, REPORT_SEEDS, grid_runs, write_campaign
from offline_browser import MARKS, open_offline
from run_dir_factory import fabricate_run

from ebd2n.report import build_report
from ebd2n.report.dashboard import write_dashboard

pytestmark = MARKS
WIDTHS = pytest.mark.parametrize("width", [800, 1400], ids=["800px", "1400px"])
DENSE_LRS = [round(0.0005 * 2 ** (k / 2), 6) for k in range(9)]
"""Nine LRs a factor sqrt(2) apart: 1.2 decades, too close for a label at every one."""
_LABELS = """(selector) => [...document.querySelectorAll(selector)].filter(t => t.textContent).map(t => {
  const box = t.getBoundingClientRect();
  return {text: t.textContent, left: box.left, right: box.right, top: box.top, bottom: box.bottom,
          y: box.top + box.height / 2};
})"""


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fabricated run's dashboard: gradient norms between 0.2 and 2, one decade."""
    return write_dashboard(fabricate_run(tmp_path_factory.mktemp("dashboard") / "run"))


@pytest.fixture(scope="module")
def dense_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    campaign = write_campaign(
        tmp_path_factory.mktemp("dense"), "dense", grid_runs(REPORT_MODES, DENSE_LRS, (0.95,), REPORT_SEEDS)
    )
    build_report(campaign)
    return campaign


def _labels(browser, path: Path, width: int, selector: str) -> list[dict]:
    context, loaded = open_offline(browser, path, width=width)
    try:
        return loaded.page.evaluate(_LABELS, selector)
    finally:
        context.close()


def _overlapping(labels: list[dict]) -> list[tuple[str, str]]:
    return [
        (a["text"], b["text"])
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]
    ]


@WIDTHS
def test_gradient_norm_axis_labels_are_numbers_at_1_2_5_where_their_values_lie(
    browser, dashboard: Path, width: int
) -> None:
    """0.4 reads "0.4", not "4": each label is 1, 2 or 5 times a power of ten, and its height on
    the axis is linear in its log (a digit alone would be a decade off)."""
    labels = sorted(_labels(browser, dashboard, width, "#plot-optimizer .ytick text"), key=lambda t: -t["y"])
    values = [float(label["text"]) for label in labels]
    logs = [math.log10(value) for value in values]
    per_decade = (labels[0]["y"] - labels[-1]["y"]) / (logs[-1] - logs[0])
    misplaced = [
        label["text"]
        for label, log in zip(labels, logs, strict=True)
        if abs(labels[0]["y"] - label["y"] - (log - logs[0]) * per_decade) > 2
    ]
    steps = {round(value / 10 ** math.floor(math.log10(value) + 1e-9), 6) for value in values}
    result = (steps <= {1.0, 2.0, 5.0}, len(values) >= 3, misplaced, 0.1 <= min(values), max(values) <= 10)
    assert result == (True, True, [], True, True)


@WIDTHS
def test_lr_axis_labels_are_lrs_taken_and_never_overlap(browser, dense_campaign: Path, width: int) -> None:
    labels = _labels(browser, dense_campaign / "report" / "index.html", width, "[id^=plot-optimum] .xtick text")
    taken = {f"{lr:.3g}".replace("e-0", "e-") for lr in DENSE_LRS}
    result = ({label["text"] for label in labels} <= taken, len(labels) >= 2 * 3, _overlapping(labels))
    assert result == (True, True, [])


def test_summary_cards_keep_each_value_on_one_line_at_800px(browser, dense_campaign: Path) -> None:
    context, loaded = open_offline(browser, dense_campaign / "report" / "index.html", width=800)
    try:
        result = loaded.page.evaluate(
            """[...document.querySelectorAll('.card .value')].filter(v =>
                v.getBoundingClientRect().height > 1.5 * parseFloat(getComputedStyle(v).lineHeight)
                || v.scrollWidth > v.clientWidth).map(v => v.textContent)"""
        )
    finally:
        context.close()
    assert result == []
