"""Size and speed of run dashboards: one run alone at 10,000 and 50,000 batches (goal: under 8 MB
at 10,000), and the 324 runs of the 20M recipe sweep inside a campaign (goal: under 150 MB in all).

Fabricates finished runs with the test suite's run writer, times `write_dashboard` (median of
three), and with --browser also the time headless Chromium takes to open the page offline and
draw every figure. Prints one table row per size. --campaign N writes the dashboards of N runs of
12,480 batches and 40 epochs (the sweep's 20m runs) under results/<campaign>/runs/, where they
share one plotly.js, and sums every page and the shared copy; the reference is the same N pages
self-contained (one exported page times N).

    PYTHONPATH=src python benchmarks/dashboard_size.py [--steps 10000 50000] [--browser] [--campaign 324]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # run_dir_factory: the test suite's run writer

from offline_browser import CHROMIUM, launch  # noqa: E402
from run_dir_factory import fabricate_run  # noqa: E402

from ebd2n.report.dashboard import write_dashboard  # noqa: E402

GOAL_BYTES = 8_000_000
GOAL_STEPS = 10_000
REPEATS = 3
CAMPAIGN_GOAL_BYTES = 150_000_000
SWEEP_STEPS, SWEEP_EPOCHS = 12_480, 40
"""A 20m run of config/campaigns/recipe-sweep-20m.yaml: 40 epochs of 312 steps."""


def page_seconds(path: Path) -> float:
    """Seconds from navigation to every figure drawn, offline, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.route(
            "**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_()
        )
        started = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_function(
            "[...document.querySelectorAll('[data-figure]')].every(div => div.querySelector('.main-svg'))"
        )
        seconds = time.perf_counter() - started
        browser.close()
    return seconds


def campaign_total(runs: int, scratch: Path) -> str | None:
    """Write `runs` dashboards inside one campaign; print their total beside the self-contained total."""
    root = scratch / "results" / "sweep"
    source = fabricate_run(root / "runs" / "run-0000", steps=SWEEP_STEPS, epochs=SWEEP_EPOCHS)
    for index in range(1, runs):
        shutil.copytree(source, root / "runs" / f"run-{index:04d}")
    started = time.perf_counter()
    pages = [write_dashboard(run) for run in sorted((root / "runs").iterdir())]
    seconds = time.perf_counter() - started
    shared = sum(path.stat().st_size for path in (root / "report" / "assets").iterdir())
    total = sum(page.stat().st_size for page in pages) + shared
    alone = write_dashboard(source, scratch / "exported.html", self_contained=True).stat().st_size
    print(
        f"\n{runs} runs of {SWEEP_STEPS:,} batches in one campaign: "
        f"pages {min(p.stat().st_size for p in pages) / 1e3:,.0f}"
        f"-{max(p.stat().st_size for p in pages) / 1e3:,.0f} kB each, shared plotly.js {shared / 1e6:.2f} MB, "
        f"total {total / 1e6:.1f} MB (written in {seconds:.0f} s)"
    )
    print(
        f"self-contained reference: {alone / 1e6:.2f} MB a page, {runs * alone / 1e6:.1f} MB in all; "
        f"ratio {runs * alone / total:.1f}x"
    )
    if runs == 324 and total >= CAMPAIGN_GOAL_BYTES:
        return f"campaign of 324 runs: {total / 1e6:.1f} MB is over the {CAMPAIGN_GOAL_BYTES / 1e6:.0f} MB goal"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="*", default=[10_000, 50_000])
    parser.add_argument("--browser", action="store_true", help=f"also time opening the page in {CHROMIUM}")
    parser.add_argument(
        "--campaign", type=int, metavar="RUNS", help="also the total of RUNS dashboards in one campaign"
    )
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
        if args.campaign:
            failed += filter(None, [campaign_total(args.campaign, Path(scratch))])
    if failed:
        sys.exit("; ".join(failed))


if __name__ == "__main__":
    main()
