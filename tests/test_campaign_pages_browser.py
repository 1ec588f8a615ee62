"""A real campaign with a diverging learning rate, as its researcher sees it: the console of the one
command that trained it, then its pages in Chromium at 800 and 1,400 px (the report and its explorer,
the winner's run dashboard, the status page and its live explorer)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from offline_browser import EXPLORER_DRAWN, FIGURES_DRAWN, MARKS, Loaded, open_offline
from workflow_support import TINY, copy_repo, snakemake, write_campaign

pytestmark = [*MARKS, pytest.mark.slow]  # a real campaign of its own, trained first
LEARNING_RATES = [0.001, 0.003, 1000.0]
DIVERGING = "synchronous-lr1000.0-beta20.99-seed42"
CAMPAIGN = Path("results/tiny")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The repository copy holding the finished campaign, and the console of the command that trained it."""
    repo = copy_repo(tmp_path_factory.mktemp("pages"))
    raw = json.loads(json.dumps(TINY))
    raw["grid"]["learning_rates"]["synchronous"] = LEARNING_RATES
    console = snakemake(repo, "--configfile", write_campaign(repo, raw)).stderr
    return repo / CAMPAIGN, console


def _results(campaign: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in sorted(campaign.glob("runs/*/results.json"))}


def _winner(campaign: Path) -> str:
    complete = {run: results for run, results in _results(campaign).items() if results["status"] == "complete"}
    return min(complete, key=lambda run: complete[run]["loss"])


def test_the_console_says_what_diverged_and_ends_with_every_outcome(trained: tuple[Path, str]) -> None:
    campaign, console = trained
    step = _results(campaign)[DIVERGING]["diverged"]["step"]
    said = [line for line in console.splitlines() if "diverged at step" in line]
    closing = console.rstrip().splitlines()[-1]
    assert len(said) == 1 and said[0].endswith(f"{DIVERGING} epoch 1: diverged at step {step} (non-finite)")
    assert closing.startswith("report: ") and sorted(closing.split("; runs: ")[1].split(", ")) == [
        "1 diverged",
        "2 complete",
    ]
    assert "were not present when the DAG was created" not in console


PAGES = {
    "report": lambda campaign: campaign / "report" / "index.html",
    "winner": lambda campaign: campaign / "runs" / _winner(campaign) / "report.html",
    "status": lambda campaign: campaign / "status.html",
}


@pytest.fixture(scope="module", params=[(page, width) for page in PAGES for width in (800, 1400)], ids=str)
def opened(request: pytest.FixtureRequest, browser, trained: tuple[Path, str]) -> Iterator[tuple[str, Loaded]]:
    page, width = request.param
    ready = EXPLORER_DRAWN if page == "status" else FIGURES_DRAWN  # the status page draws its explorer alone
    context, loaded = open_offline(browser, PAGES[page](trained[0]), width, ready)
    yield page, loaded
    context.close()


def test_no_page_scrolls_sideways_or_reports_an_error(opened: tuple[str, Loaded]) -> None:
    _, loaded = opened
    widths = loaded.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1] and not loaded.errors


def test_the_winners_dashboard_leads_with_the_loss_the_report_ranks_by(opened: tuple[str, Loaded], trained) -> None:
    page, loaded = opened
    if page != "winner":
        pytest.skip("the winner's dashboard only")
    loss = _results(trained[0])[_winner(trained[0])]["loss"]
    first = loaded.page.locator("#summary .card").first
    assert first.locator(".label").inner_text().startswith("ranking loss: full validation")
    assert first.locator(".value").inner_text() == f"{loss:.4f}"


def test_the_explorers_fill_the_plot_with_the_converged_curves(opened: tuple[str, Loaded]) -> None:
    page, loaded = opened
    if page == "winner":
        pytest.skip("a campaign's pages only")
    loaded.page.wait_for_function(EXPLORER_DRAWN)
    view = loaded.page.evaluate(
        """(() => { const p = document.getElementById('plot-explore');
        const lines = p.data.filter(t => t.mode === 'lines' && t.name), ys = t => t.y.filter(y => y !== null);
        return {range: p.layout.yaxis.range, colours: lines.map(t => t.line.color),
                converged: Math.max(...lines.filter(t => !t.name.includes('LR 1000')).flatMap(ys)),
                marks: p.data.filter(t => t.mode === 'markers').length}; })()"""
    )
    assert view["converged"] <= view["range"][1] < 2 * view["converged"] and view["marks"] == 1
    assert len(set(view["colours"])) == len(view["colours"]) == len(LEARNING_RATES)
