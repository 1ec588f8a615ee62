"""The campaign page in headless Chromium, offline: figures draw, table views toggle, nothing runs
that should not, and the console stays clean."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class Loaded:
    """The open page and what it reported: console errors, uncaught exceptions, dialogs."""

    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def loaded(report_campaign: Path) -> Iterator[Loaded]:
    """The report page loaded from file:// with every non-file request aborted."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
        loaded = Loaded(context.new_page())
        loaded.page.on("console", lambda message: loaded.errors.append(message.text) if message.type == "error" else None)
        loaded.page.on("pageerror", lambda error: loaded.errors.append(str(error)))
        loaded.page.on("dialog", lambda dialog: (loaded.dialogs.append(dialog.message), dialog.dismiss()))
        loaded.page.goto((report_campaign / "report" / "index.html").as_uri())
        loaded.page.wait_for_function("document.querySelectorAll('[data-figure] .main-svg').length > 0")
        yield loaded
        browser.close()


def test_browser_every_figure_renders(loaded: Loaded) -> None:
    result = loaded.page.evaluate(
        "[...document.querySelectorAll('[data-figure]')].map(div => div.querySelector('.main-svg') !== null)"
    )
    assert result == [True, True, True]


def test_browser_table_views_toggle(loaded: Loaded) -> None:
    states = []
    for button in loaded.page.locator("button.table-toggle").all():
        view = loaded.page.locator(f"#{button.get_attribute('aria-controls')}")
        button.click()
        shown = view.is_visible()
        button.click()
        states.append((shown, view.is_visible()))
    assert states == [(True, False)] * 3


def test_browser_hostile_run_name_is_text(loaded: Loaded) -> None:
    loaded.page.locator("#runs summary").click()
    result = (loaded.page.locator("#runs table").inner_text().count(HOSTILE), loaded.dialogs)
    assert result == (1, [])


def test_browser_console_has_no_errors(loaded: Loaded) -> None:
    result = loaded.errors
    assert result == []
