"""Headless Chromium for page tests: Debian's browser, no download, no network but file://."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (apt-get install chromium)"),
]
"""pytestmark of every browser test module."""


@dataclass
class Loaded:
    """An open page and what it reported: console errors, uncaught exceptions, dialogs."""

    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def launch(playwright: Any) -> Any:
    """Debian's Chromium through Playwright (never a downloaded browser)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)


def open_offline(browser: Any, path: Path) -> tuple[Any, Loaded]:
    """(context, Loaded) for `path` from file:// with every other request aborted; waits for the figures."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
    loaded = Loaded(context.new_page())
    loaded.page.on("console", lambda message: loaded.errors.append(message.text) if message.type == "error" else None)
    loaded.page.on("pageerror", lambda error: loaded.errors.append(str(error)))
    loaded.page.on("dialog", lambda dialog: (loaded.dialogs.append(dialog.message), dialog.dismiss()))
    loaded.page.goto(path.as_uri())
    loaded.page.wait_for_function("document.querySelectorAll('[data-figure] .main-svg').length > 0")
    return context, loaded


def toggle_states(page: Any) -> list[tuple[bool, bool]]:
    """(visible after one click, visible after a second click) for every table-view button."""
    states = []
    for button in page.locator("button.table-toggle").all():
        view = page.locator(f"#{button.get_attribute('aria-controls')}")
        button.click()
        shown = view.is_visible()
        button.click()
        states.append((shown, view.is_visible()))
    return states
