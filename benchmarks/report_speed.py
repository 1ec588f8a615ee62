"""Time `build_report` on a campaign the size of the reference 20M sweep (goal: under 15 s).

Writes a 324-run tree (3 modes x 12 LRs x 3 beta2 x 3 seeds, 40 epoch records per run, final
losses from the published reference results.json), then builds the full report three times,
PNG and PDF figures included, and prints the median and the sizes of what it wrote.

    PYTHONPATH=src python benchmarks/report_speed.py [--keep DIR]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the tree here and keep it (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        repo = args.keep or Path(scratch)
        started = time.perf_counter()
        campaign = write_campaign(repo, "recipe-sweep-20m", reference_runs(), epochs=EPOCHS, audit=True)
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
        if median >= GOAL_S:
            sys.exit(f"median {median:.2f} s is over the {GOAL_S:.0f} s goal")


if __name__ == "__main__":
    main()
