"""The report of an unfinished campaign (a diverged LR, a failed, a missing and a retired run) in
headless Chromium, offline: its outcomes are on screen, the diverged cells are marked in the
figures with a legend entry, and the console stays clean."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from campaign_tree import FAILED_LOG
from offline_browser import MARKS, Loaded, open_offline, overflowing, toolbar_overlaps
from test_report_outcomes import write_unfinished

pytestmark = MARKS


@pytest.fixture(scope="module")
def loaded(browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    campaign = write_unfinished(tmp_path_factory.mktemp("unfinished-browser"))
    context, loaded = open_offline(browser, campaign / "report" / "index.html")
    yield loaded
    context.close()


def test_browser_unfinished_outcomes_are_on_screen(loaded: Loaded) -> None:
    section = loaded.page.locator("#outcomes")
    text = section.inner_text()
    result = (
        section.is_visible(),
        FAILED_LOG in text,
        "synchronous-lr0.006-beta20.95-seed42" in text,
        "synchronous-lr0.0001-beta20.95-seed42" in text,
        "diverged at step 30" in text,
    )
    assert result == (True, True, True, True, True)


def test_browser_unfinished_heatmap_has_a_diverged_legend_entry(loaded: Loaded) -> None:
    result = loaded.page.evaluate(
        "[...document.querySelectorAll('#plot-heatmap-0 .legendtext')].map(element => element.textContent)"
    )
    assert result == ["diverged"]


def test_browser_unfinished_diverged_legend_clear_of_toolbar_and_page_fits(loaded: Loaded) -> None:
    assert (toolbar_overlaps(loaded.page), overflowing(loaded.page)) == ([], [])


def test_browser_unfinished_summary_card_links_to_the_outcomes(loaded: Loaded) -> None:
    loaded.page.locator("#summary a[href='#outcomes']").first.click()
    result = loaded.page.evaluate("location.hash")
    assert result == "#outcomes"


def test_browser_unfinished_console_has_no_errors(loaded: Loaded) -> None:
    assert (loaded.errors, loaded.dialogs) == ([], [])
