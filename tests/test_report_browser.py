"""The campaign page in headless Chromium, offline: figures draw, table views toggle, nothing runs
that should not, and the console stays clean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_tree import HOSTILE

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def page(report_campaign: Path) -> Iterator[object]:
    """The report page loaded from file:// with every non-file request aborted; records errors and dialogs."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
        page = context.new_page()
        page.errors = []
        page.dialogs = []
        page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
        page.goto((report_campaign / "report" / "index.html").as_uri())
        page.wait_for_function("document.querySelectorAll('[data-figure] .main-svg').length > 0")
        yield page
        browser.close()


def test_browser_every_figure_renders(page) -> None:
    result = page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].map(div => div.querySelector('.main-svg') !== null)"
    )
    assert result == [True, True, True]


def test_browser_table_views_toggle(page) -> None:
    states = []
    for button in page.locator("button.table-toggle").all():
        view = page.locator(f"#{button.get_attribute('aria-controls')}")
        button.click()
        shown = view.is_visible()
        button.click()
        states.append((shown, view.is_visible()))
    assert states == [(True, False)] * 3


def test_browser_hostile_run_name_is_text(page) -> None:
    page.locator("#runs summary").click()
    result = (page.locator("#runs table").inner_text().count(HOSTILE), page.dialogs)
    assert result == (1, [])


def test_browser_console_has_no_errors(page) -> None:
    result = page.errors
    assert result == []
