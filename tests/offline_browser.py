"""Headless Chromium for page tests: Debian's browser, no download, no network but file://."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (apt-get install chromium)"),
]
"""pytestmark of every browser test module."""
WIDTH = 1400
"""The window's width, in CSS pixels: a laptop's browser window, where nothing may overlap or overflow."""
_TOOLBAR_OVERLAPS = """() => {
  const box = element => element.getBoundingClientRect();
  const hit = (a, b) => a.width > 0 && b.width > 0
    && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  return [...document.querySelectorAll('[data-figure]')].flatMap(plot => {
    const bar = plot.querySelector('.modebar');
    if (!bar) return [];
    return [...plot.querySelectorAll('.gtitle, .legend, .cbtitle, .g-xtitle, .g-ytitle, .g-y2title')]
      .filter(element => hit(box(bar), box(element))).map(element => `${plot.id}: ${element.getAttribute('class')}`);
  });
}"""


@dataclass
class Loaded:
    """An open page and what it reported: console errors, uncaught exceptions, dialogs."""

    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def launch(playwright: Any) -> Any:
    """Debian's Chromium through Playwright (never a downloaded browser)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)


FIGURES_DRAWN = "document.querySelectorAll('[data-figure] .main-svg').length > 0"
EXPLORER_DRAWN = "document.getElementById('plot-explore')?.data !== undefined"
"""What open_offline waits for: a page's figures drawn, or its explorer (the status page has no other)."""


def open_offline(browser: Any, path: Path, width: int = WIDTH, ready: str = FIGURES_DRAWN) -> tuple[Any, Loaded]:
    """(context, Loaded) for `path` from file:// with every other request aborted, once `ready` holds."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.route(
        "**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_()
    )
    loaded = Loaded(context.new_page())
    loaded.page.on("console", lambda message: loaded.errors.append(message.text) if message.type == "error" else None)
    loaded.page.on("pageerror", lambda error: loaded.errors.append(str(error)))
    loaded.page.on("dialog", lambda dialog: (loaded.dialogs.append(dialog.message), dialog.dismiss()))
    loaded.page.goto(path.as_uri())
    loaded.page.wait_for_function(ready)
    return context, loaded


@contextmanager
def explorer(browser: Any, campaign: Path, width: int) -> Iterator[Loaded]:
    """A campaign's report at `width` once its explorer has drawn; closed on leaving."""
    context, loaded = open_offline(browser, campaign / "report" / "index.html", width=width)
    loaded.page.wait_for_function(EXPLORER_DRAWN)
    yield loaded
    context.close()


_EXPLORER_VIEW = """(diverged) => { const p = document.getElementById('plot-explore');
  const lines = p.data.filter(t => t.mode === 'lines' && t.name), ys = t => t.y.filter(y => y !== null);
  return {range: p.layout.yaxis.range, auto: p.layout.yaxis.autorange === true,
          names: lines.map(t => t.name), ends: Object.fromEntries(lines.map(t => [t.name, Math.max(...t.x)])),
          converged: Math.max(...lines.filter(t => !t.name.includes(diverged)).flatMap(ys)),
          diverged: Math.max(...lines.filter(t => t.name.includes(diverged)).flatMap(ys)),
          marks: p.data.filter(t => t.mode === 'markers').length, colours: lines.map(t => t.line.color),
          count: document.getElementById('explore-count').textContent}; }"""


def explorer_view(loaded: Loaded, diverged: str) -> dict:
    """What the explorer draws: its y range, its curves (names, last steps, colours), the highest
    converged and diverged point (`diverged`: what the diverged runs' names hold), its marks and count."""
    return loaded.page.evaluate(_EXPLORER_VIEW, diverged)


def assert_scaled_to_the_converged(loaded: Loaded, diverged: str, marks: int) -> None:
    """Converged curves fill the plot (its top within 2x their highest point), diverged ones far
    above it, each diverged run a mark and the count line says so."""
    view = explorer_view(loaded, diverged)
    high = view["range"][1]
    assert not view["auto"] and view["converged"] <= high < 2 * view["converged"] and view["diverged"] > 100 * high
    assert view["marks"] == marks and f"{marks} diverged run(s) marked" in view["count"]


def assert_one_click_scales_to_the_diverged(loaded: Loaded, diverged: str) -> None:
    loaded.page.check("#explore-diverged")
    view = explorer_view(loaded, diverged)
    loaded.page.uncheck("#explore-diverged")
    assert view["auto"] and view["range"][1] >= view["diverged"] and view["marks"] == 0


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


def toolbar_overlaps(page: Any) -> list[str]:
    """'<plot id>: <class>' for every title or legend that the Plotly toolbar's box overlaps (shown or
    not: the toolbar appears when the pointer is on the plot, and in screenshots of it)."""
    return page.evaluate(_TOOLBAR_OVERLAPS)


def overflowing(page: Any) -> list[str]:
    """Every scrolling table wrapper, and the page itself, that is wider than the window lets it be,
    measured with every <details> open (and closed again after): '<section id>: <content> > <room>'."""
    return page.evaluate("""() => {
      const closed = [...document.querySelectorAll('details:not([open])')];
      closed.forEach(details => details.open = true);
      const wide = [document.documentElement, ...document.querySelectorAll('.scroll, .table-view')]
        .filter(box => box.clientWidth > 0 && box.scrollWidth > box.clientWidth)
        .map(box => `${box.closest('section')?.id ?? 'page'}: ${box.scrollWidth} > ${box.clientWidth}`);
      closed.forEach(details => details.open = false);
      return wide;
    }""")
