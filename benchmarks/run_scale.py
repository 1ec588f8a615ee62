"""How each command grows with the number of runs: 324, 3,000 and 10,000 (benchmarks/scale_campaign.py).

For each size, a structurally real campaign (every run directory as the trainer and validation
write it, made without training each one) is built once, then each command runs REPEATS times as a
fresh process, its wall time and peak memory (`/usr/bin/time`) recorded:

- audit: `ebd2n audit` with nothing changed (what rule `all` runs on every invocation);
- audit --full: every file hashed by content and the report rebuilt;
- status: `ebd2n status` (the live page);
- report: `ebd2n report` (rebuilds and publishes the campaign page);
- first paint: the campaign page opened in Chromium (Playwright, offline), until its
  first-contentful-paint (goal: at most 3 s at 10,000 runs).

Prints one table row per command and size, and the growth from each size to the next (time ratio
over run ratio: 1.0 is linear). Writes benchmarks/run_scale.json (or --out) after every size.

    PYTHONPATH=src python benchmarks/run_scale.py --sizes 324 3000 10000 --keep /tmp/scale

tests/test_scale_benchmark.py runs it small (30 runs, one repeat) in CI, so the benchmark keeps working.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scale_campaign import build

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
COMMANDS = {"audit": ["audit"], "audit --full": ["audit", "--full"], "status": ["status"], "report": ["report"]}


def timed_command(arguments: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, peak resident MB) of `ebd2n <arguments>` as a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "ebd2n", *arguments]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"ebd2n {' '.join(arguments)} failed:\n{result.stderr[-3000:]}")
    return elapsed, int(result.stderr.strip().splitlines()[-1]) / 1024


def first_paint(page: Path) -> float:
    """Seconds from navigation to the first contentful paint of `page` in Chromium, offline."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        context = browser.new_context()
        context.route("http*://**", lambda route: route.abort())
        tab = context.new_page()
        tab.goto(page.as_uri(), wait_until="load", timeout=120_000)
        paint = tab.evaluate(
            "performance.getEntriesByName('first-contentful-paint').map(entry => entry.startTime)[0] ?? null"
        )
        browser.close()
    if paint is None:
        raise SystemExit(f"{page}: no first-contentful-paint recorded")
    return paint / 1000


def measure(directory: Path, campaign: Path, repeats: int) -> dict[str, dict[str, list[float]]]:
    found: dict[str, dict[str, list[float]]] = {}
    relative = str(campaign.relative_to(directory))
    timed_command(["audit", relative], directory)  # the hash memory of this host, after the build
    for name, arguments in COMMANDS.items():
        samples = [timed_command([*arguments[:1], relative, *arguments[1:]], directory) for _ in range(repeats)]
        found[name] = {"seconds": [s for s, _ in samples], "peak_mb": [m for _, m in samples]}
    found["first paint"] = {"seconds": [first_paint(campaign / "report" / "index.html") for _ in range(repeats)]}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[324, 3000, 10000])
    parser.add_argument(
        "--keep", type=Path, required=True, help="build the campaigns here, kept (and reused: <keep>/<size>/)"
    )
    parser.add_argument("--repeats", type=int, default=REPEATS, help="samples of each command (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "run_scale.json", help="the figures, as JSON")
    args = parser.parse_args()
    record: dict[str, dict] = {}
    out = args.out.resolve()
    keep = args.keep.resolve()  # before each size's chdir
    for size in args.sizes:
        directory = keep / str(size)
        directory.mkdir(parents=True, exist_ok=True)
        os.chdir(directory)
        campaign = directory / "results" / f"scale-{size}"
        if not (campaign / "report" / "index.html").is_file():  # built by an earlier invocation: measured again
            started = time.perf_counter()
            campaign = directory / build(directory, size)  # (its path relative to the directory)
            print(f"{size:,} runs built in {time.perf_counter() - started:.0f} s", flush=True)
        runs = len(os.listdir(campaign / "runs"))
        record[str(runs)] = measure(directory, campaign, args.repeats)
        out.write_text(json.dumps(record, indent=1) + "\n")
        table(record)


def table(record: dict[str, dict]) -> None:
    sizes = list(record)
    print("| command | " + " | ".join(f"{int(s):,} runs" for s in sizes) + " | growth |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for name in record[sizes[0]]:
        medians = [statistics.median(record[s][name]["seconds"]) for s in sizes]
        peaks = [max(record[s][name].get("peak_mb", [0])) for s in sizes]
        cells = [f"{m:.2f} s" + (f", {p:.0f} MB" if p else "") for m, p in zip(medians, peaks, strict=True)]
        growth = [
            f"{(medians[i + 1] / medians[i]) / (int(sizes[i + 1]) / int(sizes[i])):.2f}" for i in range(len(sizes) - 1)
        ]
        print(f"| {name} | {' | '.join(cells)} | {', '.join(growth) or '-'} |")


if __name__ == "__main__":
    main()
