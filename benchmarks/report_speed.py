"""Time `build_report` on a campaign the size of the reference 20M sweep (goal: under 15 s).

Writes a 324-run tree (3 modes x 12 LRs x 3 beta2 x 3 seeds, 40 epoch records per run, final
losses from the published reference results.json), then builds the full report three times,
PNG and PDF figures included, and prints the median and the sizes of what it wrote.
`--runs 36` takes one mode's 12 LRs at one beta2 instead; `--steps-per-epoch N` records every step
(the reference runs: 312); `--browser` opens the page in headless Chromium, offline, and prints its
weight, first contentful paint and the time until the Explore overlay is drawn (goal: under 3 s).

    PYTHONPATH=src python benchmarks/report_speed.py [--runs 36|324] [--steps-per-epoch N] [--browser] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # campaign_tree: the test suite's campaign writer

from campaign_tree import RunSpec, write_campaign  # noqa: E402

from ebd2n.report import build_report  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference" / "recipe_sweep_20m" / "results.json"
EPOCHS = 40
REPEATS = 3
GOAL_S = 15.0


def reference_runs() -> list[RunSpec]:
    """The reference sweep's 324 runs: grid point, seed and final full-validation loss."""
    if not REFERENCE.is_file():
        sys.exit(f"reference results not found at {REFERENCE} (needs the shared/ checkout)")
    runs = json.loads(REFERENCE.read_text())["runs"]
    return [RunSpec(r["mode"], r["lr"], r["beta2"], r["seed"], r["loss"]) for r in runs]


def chosen_runs(count: int) -> list[RunSpec]:
    """All 324 runs, or 36: the synchronous mode's 12 LRs at its first beta2, every seed."""
    runs = reference_runs()
    if count == 324:
        return runs
    beta2 = min(run.beta2 for run in runs)
    return [run for run in runs if run.mode == "synchronous" and run.beta2 == beta2]


def first_paint(page: Path) -> None:
    """Page weight, first contentful paint and the Explore overlay's drawing time, offline in Chromium."""
    from offline_browser import launch, open_offline
    from playwright.sync_api import sync_playwright

    assets = sum(path.stat().st_size for path in (page.parent / "assets").iterdir())
    print(f"page weight: index.html {page.stat().st_size:,} bytes + shared plotly.js {assets:,} bytes")
    with sync_playwright() as playwright:
        browser = launch(playwright)
        for _ in range(REPEATS):
            context, loaded = open_offline(browser, page)
            loaded.page.wait_for_function("document.getElementById('plot-explore').data !== undefined", timeout=60_000)
            paint, drawn = loaded.page.evaluate(
                "[performance.getEntriesByName('first-contentful-paint')[0].startTime, performance.now()]"
            )
            print(
                f"  first contentful paint {paint / 1000:.2f} s; Explore overlay drawn by {drawn / 1000:.2f} s; "
                f"errors: {loaded.errors or 'none'}"
            )
            context.close()
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the tree here and keep it (default: a temporary directory)")
    parser.add_argument("--runs", type=int, choices=(36, 324), default=324)
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="record every step (0: one step record per run)")
    parser.add_argument("--browser", action="store_true", help="also time the page in headless Chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        repo = args.keep or Path(scratch)
        started = time.perf_counter()
        campaign = write_campaign(
            repo,
            "recipe-sweep-20m",
            chosen_runs(args.runs),
            epochs=EPOCHS,
            audit=True,
            steps_per_epoch=args.steps_per_epoch,
        )
        print(f"tree: {len(list((campaign / 'runs').iterdir()))} runs written in {time.perf_counter() - started:.1f} s")
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            build_report(campaign)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        print(f"build_report: {', '.join(f'{t:.2f}' for t in times)} s; median {median:.2f} s (goal < {GOAL_S:.0f} s)")
        for path in sorted((campaign / "report").iterdir()):
            print(f"  {path.name:28} {path.stat().st_size:>10,} bytes")
        store = sum(path.stat().st_size for path in (campaign / "report" / "metrics").rglob("*.parquet"))
        print(f"  metrics store: {store:,} bytes")
        if args.browser:
            first_paint(campaign / "report" / "index.html")
        if median >= GOAL_S:
            sys.exit(f"median {median:.2f} s is over the {GOAL_S:.0f} s goal")


if __name__ == "__main__":
    main()
