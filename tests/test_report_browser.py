"""The campaign page in headless Chromium, offline: figures draw from the campaign's shared
plotly.js, table views toggle, nothing runs that should not, the page's small print reads well,
run links open the runs' dashboards, and the console stays clean."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_tree import HOSTILE, grid_runs, report_runs, write_campaign
from offline_browser import MARKS, Loaded, open_offline, overflowing, toggle_states, toolbar_overlaps
from run_dir_factory import fabricate_run

from ebd2n.report import build_report
from ebd2n.report.dashboard import write_dashboard
from ebd2n.report.plotly_embed import plotly_asset_name

pytestmark = MARKS


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report tests' audited 24-run campaign; its first run also has its dashboard (run.json
    as the trainer writes it), the others have none, as after an interrupted dashboard write."""
    root = tmp_path_factory.mktemp("linked")
    campaign = write_campaign(
        root, "sweep", report_runs(), audit=True, purpose=f"purpose {HOSTILE}", description=f"description {HOSTILE}"
    )
    first = sorted((campaign / "runs").iterdir())[0]
    shutil.copy(fabricate_run(root / "scratch" / first.name) / "run.json", first / "run.json")
    write_dashboard(first)
    build_report(campaign)
    return campaign


@pytest.fixture(scope="module")
def loaded(browser, campaign: Path) -> Iterator[Loaded]:
    """The report page loaded from file:// with every non-file request aborted."""
    context, loaded = open_offline(browser, campaign / "report" / "index.html")
    yield loaded
    context.close()


def test_browser_every_figure_renders(loaded: Loaded) -> None:
    result = loaded.page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].map(div => div.querySelector('.main-svg') !== null)"
    )
    assert result == [True] * 6  # two heatmaps, two LR-optimum figures, the curves, the parallel coordinates


def test_browser_plotly_is_the_campaigns_shared_copy(loaded: Loaded) -> None:
    result = loaded.page.evaluate("[...document.scripts].filter(s => s.src).map(s => s.getAttribute('src'))")
    assert result == [f"assets/{plotly_asset_name()}"]


def test_browser_table_views_toggle(loaded: Loaded) -> None:
    states = toggle_states(loaded.page)
    assert states == [(True, False)] * 5


@pytest.fixture(scope="module")
def bracketed(browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """The page of a campaign whose synchronous optimum (0.002) lies inside its three LRs."""
    root = tmp_path_factory.mktemp("bracketed")
    campaign = write_campaign(root, "bracketed", grid_runs(["synchronous"], [0.001, 0.002, 0.004], [0.99], [1, 2, 3]))
    build_report(campaign)
    context, loaded = open_offline(browser, campaign / "report" / "index.html")
    yield loaded
    context.close()


def test_browser_lr_optimum_figure_draws_seeds_fit_band_and_optimum(bracketed: Loaded) -> None:
    plot = "document.getElementById('plot-optimum-0')"
    result = bracketed.page.evaluate(
        f"[{plot}.data.map(t => t.name), {plot}.layout.shapes.map(s => s.type), "
        f"{plot}.querySelectorAll('.shapelayer path').length, {plot}.layout.xaxis.type]"
    )
    assert result == [["seeds", "mean ± SD", "quadratic fit"], ["rect", "line"], 2, "log"]


def test_browser_lr_optimum_caption_gives_the_unchecked_bracket_of_three_lrs(bracketed: Loaded) -> None:
    """Three LRs leave the parabola unchecked: the caption gives the bracket and the vertex, no interval."""
    result = bracketed.page.locator("#figures figcaption").first.inner_text()
    expected = "synchronous: optimum unchecked (3 LRs, no residual), between 0.001 and 0.004, vertex 0.00"
    assert result.startswith(expected) and "95 %" not in result


def test_browser_hostile_run_name_is_text(loaded: Loaded) -> None:
    loaded.page.locator("#runs summary").click()
    result = (loaded.page.locator("#runs table").inner_text().count(HOSTILE), loaded.dialogs)
    assert result == (1, [])


def test_browser_modebar_only_on_hover(loaded: Loaded) -> None:
    """The Plotly toolbar stays out of the way (over titles and legends) until the pointer is on the plot."""
    page = loaded.page
    opacity = "[...document.querySelectorAll('#plot-heatmap-0 .modebar-group')].map(g => getComputedStyle(g).opacity)"
    page.mouse.move(1, 1)
    page.wait_for_function(f"{opacity}.every(o => o === '0')")
    page.locator("#plot-heatmap-0").hover()
    page.wait_for_function(f"{opacity}.every(o => o === '1')")
    result = page.evaluate(f"{opacity}.length") > 0
    assert result


def test_browser_heatmap_colour_bars_have_a_unit_and_ticks(loaded: Loaded) -> None:
    bars = loaded.page.evaluate(
        "[...document.querySelectorAll('.heatmaps .colorbar')].map(bar => [bar.querySelector('.cbtitle').textContent,"
        " bar.querySelectorAll('.cbaxis text').length])"
    )
    result = [(title, ticks >= 4) for title, ticks in bars]
    assert result == [("mean loss (nats)", True)] * 2


def test_browser_split_rows_are_counts_not_dicts(loaded: Loaded) -> None:
    result = loaded.page.evaluate(
        "[...document.querySelectorAll('#data th')].filter(th => th.textContent.startsWith('Split'))"
        ".map(th => th.parentElement.innerText)"
    )
    assert result == [
        "Split train\t1,000,000 tokens, 2,000 documents, 1 shard",
        "Split validation\t99,304 tokens, 200 documents, 99,303 targets, 1 shard",
    ]


def test_browser_run_links_open_dashboards(browser, loaded: Loaded, campaign: Path) -> None:
    """The run with a dashboard links to it (and it draws offline from the shared plotly.js); the others link to
    their folder."""
    links = loaded.page.evaluate("[...document.querySelectorAll('#runs tbody a')].map(a => a.getAttribute('href'))")
    first = sorted((campaign / "runs").iterdir())[0].name
    linked = [link for link in links if link.endswith("/report.html")]
    context, dashboard = open_offline(browser, campaign / "report" / linked[0])
    drawn = dashboard.page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].every(div => div.querySelector('.main-svg'))"
    )
    context.close()
    result = (linked, sorted(links)[1:3], drawn, dashboard.errors)
    assert result == (
        [f"../runs/{first}/report.html"],
        [f"../runs/{name}/" for name in sorted(p.name for p in (campaign / "runs").iterdir())[1:3]],
        True,
        [],
    )


def test_browser_console_has_no_errors(loaded: Loaded) -> None:
    result = loaded.errors
    assert result == []


def test_browser_toolbar_covers_no_title_or_legend(loaded: Loaded) -> None:
    """At 1,400 px the Plotly toolbar's band is clear of every heatmap title, colour-bar title and legend."""
    result = toolbar_overlaps(loaded.page)
    assert result == []


def test_browser_no_table_overflows(loaded: Loaded) -> None:
    """At 1,400 px every table fits its section, "All runs" included, and the page has no sideways scroll."""
    result = overflowing(loaded.page)
    assert result == []


BROKEN_CODE_SPANS = """[...document.querySelectorAll('p code, li code')].filter(code => {
    const text = code.firstChild;
    if (!text || text.nodeType !== Node.TEXT_NODE || Math.max(...text.data.split(' ').map(w => w.length)) > 30) {
        return false;  // a long path may have to break anywhere; words of ordinary length never
    }
    const range = document.createRange();
    let top = null;
    for (let i = 0; i < text.length; i++) {
        range.setStart(text, i);
        range.setEnd(text, i + 1);
        const rect = range.getClientRects()[0];
        if (!rect) continue;
        if (top !== null && Math.round(rect.top) > top && text.data[i] !== ' ' && text.data[i - 1] !== ' ') return true;
        top = Math.round(rect.top);
    }
    return false;
}).map(code => code.textContent)"""
"""The code spans of the page's prose that the browser broke inside a word."""


@pytest.mark.parametrize("width", [800, 1400])
def test_browser_code_spans_break_only_between_words(browser, campaign: Path, width: int) -> None:
    context, loaded = open_offline(browser, campaign / "report" / "index.html", width)
    try:
        result = loaded.page.evaluate(BROKEN_CODE_SPANS)
    finally:
        context.close()
    assert result == []


def test_browser_run_ids_show_their_grid_point_readably_on_hover(loaded: Loaded, campaign: Path) -> None:
    """`beta20.95` in an id reads as "beta 20.95": each run link's tooltip spells the point out."""
    titles = loaded.page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#runs tbody a')].map(a => [a.textContent, a.title]))"
    )
    from ebd2n.campaign.runs import parse_run_id

    grid_ids = {path.name for path in (campaign / "runs").iterdir()} & set(titles)
    expected = {name: parse_run_id(name).label if name in grid_ids else "" for name in titles}
    assert (titles, len(grid_ids) >= 20, all(" · β2 " in titles[name] for name in grid_ids)) == (expected, True, True)


@pytest.fixture(scope="module")
def past_the_grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a campaign whose synchronous optimum (0.002) lies well above its three LRs."""
    root = tmp_path_factory.mktemp("edge")
    campaign = write_campaign(root, "edge", grid_runs(["synchronous"], [0.0004, 0.0006, 0.0009], [0.99], [1, 2, 3]))
    build_report(campaign)
    return campaign


@pytest.mark.parametrize("width", [800, 1400])
@pytest.mark.parametrize("which", ["campaign", "past_the_grid"])
def test_browser_lr_optimum_legends_name_only_what_is_drawn_and_every_band_is_in_view(
    browser, request: pytest.FixtureRequest, which: str, width: int
) -> None:
    """Each LR-optimum figure: no empty legend entry, one entry per drawn trace, and its band and
    optimum line inside the plot area (an interval past the grid included), at 800 and 1,400 px."""
    context, shown = open_offline(browser, request.getfixturevalue(which) / "report" / "index.html", width)
    result = shown.page.evaluate(
        """[...document.querySelectorAll('[id^=plot-optimum-]')].map(plot => {
            const area = plot.querySelector('.nsewdrag').getBoundingClientRect();
            const legend = [...plot.querySelectorAll('.legendtext')].map(text => text.textContent.trim());
            const shapes = [...plot.querySelectorAll('.shapelayer path')].map(path => path.getBoundingClientRect());
            return [
                legend.length > 0 && legend.every(text => text.length > 0),
                legend.length === plot.data.filter(trace => trace.showlegend !== false).length,
                shapes.length === plot.layout.shapes.length,
                shapes.every(box => box.right > area.left && box.left < area.right),
            ];
        })"""
    )
    context.close()
    assert result == [[True, True, True, True]] * {"campaign": 2, "past_the_grid": 1}[which]
