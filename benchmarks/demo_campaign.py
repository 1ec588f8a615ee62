"""Wall time of the whole embedded demo campaign (36 runs, 151 jobs): warm start against cold.

    python benchmarks/demo_campaign.py [--repeats 3] [--cold-repeats 1]

Each repeat copies the tracked files of this checkout into a new temporary directory and runs
`snakemake --cores all` there (what `./run.sh demo` runs once its .venv is set up): with
EBD2N_WARM=1, the local default (jobs fork from a server that has imported torch), or with
EBD2N_WARM=0 (every job imports torch itself, as cluster jobs do). Cold and warm repeats
alternate. Goal (issue #24): the demo within 90 s on a 2-core laptop. Prints one line per repeat, the
medians and cold median / warm median; writes benchmarks/demo_campaign.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_checkout(copy: Path) -> dict[str, str]:
    """Copy the tracked files of this checkout to `copy`; the environment a workflow runs in there."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(copy / "src")  # the copy's package, whatever the interpreter's editable install points at
    return env


def run_demo(warm: bool) -> float:
    """Seconds of `snakemake --cores all` over a fresh copy of the tracked files."""
    with tempfile.TemporaryDirectory(prefix="ebd2n-demo-") as scratch:
        copy = Path(scratch) / "repo"
        env = {**copy_checkout(copy), "EBD2N_WARM": "1" if warm else "0"}
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "all"], cwd=copy, env=env, capture_output=True, text=True
        )
        elapsed = time.perf_counter() - started
        if result.returncode or not (copy / "results/demo/report/index.html").is_file():
            raise SystemExit(f"the demo campaign failed ({'warm' if warm else 'cold'}):\n{result.stderr[-3000:]}")
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm-start campaigns (median reported)")
    parser.add_argument("--cold-repeats", type=int, default=1, help="cold-start campaigns (the reference)")
    args = parser.parse_args()
    order = [
        kind
        for i in range(max(args.repeats, args.cold_repeats))
        for kind, count in (("cold", args.cold_repeats), ("warm", args.repeats))
        if i < count
    ]  # alternating while both remain
    times: dict[str, list[float]] = {"warm": [], "cold": []}
    for kind in order:
        elapsed = run_demo(warm=kind == "warm")
        times[kind].append(elapsed)
        print(f"{kind}: {elapsed:6.1f} s", flush=True)
    record = {kind: {"seconds": runs, "median_s": statistics.median(runs)} for kind, runs in times.items() if runs}
    for kind, entry in record.items():
        median = entry["median_s"]
        print(f"{kind} median {median:6.1f} s ({median / 60:.2f} min) over {len(entry['seconds'])}")
    if len(record) == 2:
        record["cold_over_warm"] = record["cold"]["median_s"] / record["warm"]["median_s"]
        print(f"cold / warm: {record['cold_over_warm']:.2f}x")
    (ROOT / "benchmarks" / "demo_campaign.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
