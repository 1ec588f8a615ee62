"""The campaign page's Explore section and runs table in headless Chromium, offline, at 800 and 1,400 px:
grouping, smoothing, filters and log x change what is drawn; the runs table sorts and filters; a table
wider than the window says so; the modes' heatmaps share one colour scale."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from offline_browser import MARKS, Loaded, explorer

pytestmark = MARKS
PLOT = "document.getElementById('plot-explore')"


@pytest.fixture(scope="module", params=[800, 1400], ids=["800px", "1400px"])
def explored(request: pytest.FixtureRequest, browser, curves_campaign: Path) -> Iterator[Loaded]:
    """The 24-run campaign's page, its overlay drawn, at each width."""
    with explorer(browser, curves_campaign, request.param) as loaded:
        yield loaded


def _names(loaded: Loaded) -> list[str]:
    return loaded.page.evaluate(f"{PLOT}.data.filter(t => t.showlegend !== false).map(t => t.name)")


def _choose(loaded: Loaded, grouping: str) -> None:
    loaded.page.select_option("#explore-group", grouping)


def test_explore_grouping_changes_what_is_drawn(explored: Loaded) -> None:
    seeds = _names(explored)
    _choose(explored, "mode")
    modes = _names(explored)
    _choose(explored, "")
    runs = _names(explored)
    _choose(explored, "mode,lr,beta2")
    assert (len(seeds), seeds[0], modes, len(runs), runs[0]) == (
        8,
        "synchronous, LR 0.001, beta2 0.95 (3 runs)",
        ["synchronous (12 runs)", "packed-4 (12 runs)"],
        24,
        "run <script>alert(1)</script>",
    )


def test_explore_group_band_brackets_the_seed_mean(explored: Loaded) -> None:
    result = explored.page.evaluate(
        f"(() => {{ const d = {PLOT}.data; return [d[0].fill, d[1].fill,"
        " d[2].y.every((y, i) => d[0].y[i] >= y && y >= d[1].y[i])]; })()"
    )
    assert result == [None, "tonexty", True]


def test_explore_smoothing_changes_the_curves(explored: Loaded) -> None:
    def roughness() -> float:
        return explored.page.evaluate(
            f"{PLOT}.data[2].y.slice(1).reduce((a, y, i) => a + Math.abs(y - {PLOT}.data[2].y[i]), 0)"
        )

    raw = roughness()
    explored.page.evaluate(
        "(() => { const s = document.getElementById('explore-smooth'); s.value = '0.9';"
        " s.dispatchEvent(new Event('input')); })()"
    )
    smoothed = roughness()
    explored.page.evaluate(
        "(() => { const s = document.getElementById('explore-smooth'); s.value = '0';"
        " s.dispatchEvent(new Event('input')); })()"
    )
    assert smoothed < 0.8 * raw and roughness() == raw


def test_explore_filter_leaves_a_mode_out(explored: Loaded) -> None:
    box = explored.page.locator("#explore-filters input[data-axis='mode'][value='packed-4']")
    box.uncheck()
    result = _names(explored), explored.page.text_content("#explore-count")
    box.check()
    assert result == (
        [
            "synchronous, LR 0.001, beta2 0.95 (3 runs)",
            "synchronous, LR 0.001, beta2 0.999 (3 runs)",
            "synchronous, LR 0.003, beta2 0.95 (3 runs)",
            "synchronous, LR 0.003, beta2 0.999 (3 runs)",
        ],
        "12 of 24 runs drawn",
    )


def test_explore_log_x_and_the_epoch_curve(explored: Loaded) -> None:
    explored.page.check("#explore-logx")
    explored.page.select_option("#explore-metric", "val_loss")
    result = explored.page.evaluate(f"[{PLOT}.layout.xaxis.type, {PLOT}.data[2].x]")
    explored.page.uncheck("#explore-logx")
    explored.page.select_option("#explore-metric", "loss")
    assert result == ["log", [30, 60, 90, 120]]


def test_explore_parallel_coordinates_and_one_heatmap_scale(explored: Loaded) -> None:
    result = explored.page.evaluate(
        "(() => { const p = document.getElementById('plot-parallel').data[0];"
        " const h = [0, 1].map(i => document.getElementById('plot-heatmap-' + i).data[0]);"
        " return [p.type, p.dimensions.map(d => d.label), p.dimensions[4].values.length,"
        " h[0].zmin === h[1].zmin && h[0].zmax === h[1].zmax && h[0].zmin < h[0].zmax]; })()"
    )
    assert result == ["parcoords", ["mode", "log10 LR", "beta2", "seed", "final loss (nats)"], 24, True]


def _column(loaded: Loaded, index: int) -> list[str]:
    return loaded.page.evaluate(
        "[...document.querySelectorAll('table.runs tbody tr:not([hidden])')]"
        f".map(r => r.cells[{index}].textContent.trim())"
    )


def test_runs_table_sorts_by_a_column(explored: Loaded) -> None:
    explored.page.evaluate("document.querySelector('#runs details').open = true")
    header = explored.page.locator("table.runs thead button", has_text="Full-val. loss")
    header.click()
    ascending = [float(v) for v in _column(explored, 6)]
    header.click()
    descending = [float(v) for v in _column(explored, 6)]
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True) and len(ascending) == 24


def test_runs_table_filters_by_words(explored: Loaded) -> None:
    explored.page.evaluate("document.querySelector('#runs details').open = true")
    explored.page.fill("#runs-filter", "packed-4 0.001")
    shown = sorted(zip(_column(explored, 1), _column(explored, 2), strict=True))
    result = shown, explored.page.text_content("#runs-shown")
    explored.page.fill("#runs-filter", "")
    assert result == ([("packed-4", "0.001")] * 6, "6 of 24 runs shown")


def test_wide_tables_carry_a_cue(explored: Loaded) -> None:
    """Every table box wider than the window shows the cue above it; at 800 px some are (the runs table)."""
    result = explored.page.evaluate("""(() => {
      document.querySelectorAll('details').forEach(d => d.open = true);
      return new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(
        [...document.querySelectorAll('.scroll')].filter(box => box.clientWidth > 0).map(box => [
          box.scrollWidth > box.clientWidth + 1, !box.previousElementSibling.hidden,
          box.closest('section').id])))));
    })()""")
    wide = [section for overflows, _, section in result if overflows]
    assert all(overflows == cued for overflows, cued, _ in result)
    assert ("runs" in wide) == (explored.page.viewport_size["width"] == 800)


def test_explore_page_logs_no_error(explored: Loaded) -> None:
    assert (explored.errors, explored.dialogs) == ([], [])
