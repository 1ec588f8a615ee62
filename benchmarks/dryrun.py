"""How long Snakemake takes to plan: the 324-run campaign, and a re-run of a finished demo.

    python benchmarks/dryrun.py            # from the repository root, after ./run.sh demo

Times, median of 3 (goal: each under 10 s):
  sweep-324   `snakemake --profile slurm -n --configfile config/campaigns/recipe-sweep-20m.yaml`
  demo-noop   `snakemake -n` over the finished demo campaign (results/demo/runs.csv exists)
Writes benchmarks/dryrun.json and prints one line per case.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
CASES = {
    "sweep-324": ["--profile", "slurm", "-n", "--configfile", "config/campaigns/recipe-sweep-20m.yaml"],
    "demo-noop": ["-n"],
}


def time_dry_run(args: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return elapsed, result.stdout + result.stderr


def main() -> None:
    if not (ROOT / "results/demo/runs.csv").exists():
        raise SystemExit("no finished demo campaign: run ./run.sh demo (or snakemake --cores all) first")
    record = {}
    for name, args in CASES.items():
        times = []
        for _ in range(REPEATS):
            elapsed, output = time_dry_run(args)
            times.append(elapsed)
        if name == "demo-noop" and "Nothing to be done" not in output:
            raise SystemExit("the finished demo campaign is not up to date: snakemake -n plans jobs")
        record[name] = {
            "command": "snakemake " + " ".join(args),
            "seconds": times,
            "median_s": statistics.median(times),
        }
        print(f"{name:10s} median {statistics.median(times):6.2f} s  ({', '.join(f'{t:.2f}' for t in times)})")
    (ROOT / "benchmarks" / "dryrun.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
