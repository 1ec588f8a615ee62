"""Size and speed of the run dashboard at 10,000 and 50,000 batches (goal: under 8 MB at 10,000).

Fabricates finished runs with the test suite's run writer, times `write_dashboard` (median of
three), and with --browser also the time headless Chromium takes to open the page offline and
draw every figure. Prints one table row per size.

    PYTHONPATH=src python benchmarks/dashboard_size.py [--steps 10000 50000] [--browser]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # run_dir_factory: the test suite's run writer

from run_dir_factory import fabricate_run  # noqa: E402
from offline_browser import CHROMIUM, launch  # noqa: E402

from ebd2n.report.dashboard import write_dashboard  # noqa: E402

GOAL_BYTES = 8_000_000
GOAL_STEPS = 10_000
REPEATS = 3


def page_seconds(path: Path) -> float:
    """Seconds from navigation to every figure drawn, offline, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
        started = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_function("[...document.querySelectorAll('[data-figure]')].every(div => div.querySelector('.main-svg'))")
        seconds = time.perf_counter() - started
        browser.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--browser", action="store_true", help=f"also time opening the page in {CHROMIUM}")
    args = parser.parse_args()
    print(f"{'batches':>8} {'page MB':>8} {'write s':>8} {'open s':>7}")
    failed = []
    with tempfile.TemporaryDirectory() as scratch:
        for steps in args.steps:
            run = fabricate_run(Path(scratch) / f"run-{steps}", steps=steps, epochs=5)
            times = []
            for _ in range(REPEATS):
                started = time.perf_counter()
                path = write_dashboard(run)
                times.append(time.perf_counter() - started)
            size = path.stat().st_size
            opened = f"{page_seconds(path):7.2f}" if args.browser else f"{'-':>7}"
            print(f"{steps:>8,} {size / 1e6:>8.2f} {statistics.median(times):>8.2f} {opened}")
            if steps <= GOAL_STEPS and size >= GOAL_BYTES:
                failed.append(f"{steps:,} batches: {size / 1e6:.2f} MB is over the {GOAL_BYTES / 1e6:.0f} MB goal")
    if failed:
        sys.exit("; ".join(failed))


if __name__ == "__main__":
    main()
