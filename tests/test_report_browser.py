"""The campaign page in headless Chromium, offline: figures draw, table views toggle, nothing runs
that should not, and the console stays clean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_tree import HOSTILE
from offline_browser import MARKS, Loaded, launch, open_offline, toggle_states

pytestmark = MARKS


@pytest.fixture(scope="module")
def loaded(report_campaign: Path) -> Iterator[Loaded]:
    """The report page loaded from file:// with every non-file request aborted."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        _, loaded = open_offline(browser, report_campaign / "report" / "index.html")
        yield loaded
        browser.close()


def test_browser_every_figure_renders(loaded: Loaded) -> None:
    result = loaded.page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].map(div => div.querySelector('.main-svg') !== null)"
    )
    assert result == [True, True, True]


def test_browser_table_views_toggle(loaded: Loaded) -> None:
    states = toggle_states(loaded.page)
    assert states == [(True, False)] * 3


def test_browser_hostile_run_name_is_text(loaded: Loaded) -> None:
    loaded.page.locator("#runs summary").click()
    result = (loaded.page.locator("#runs table").inner_text().count(HOSTILE), loaded.dialogs)
    assert result == (1, [])


def test_browser_console_has_no_errors(loaded: Loaded) -> None:
    result = loaded.errors
    assert result == []
