"""What confirmation costs against its campaign, and the optimism it measures, on demo campaigns.

Each grid is the demo campaign (config/config.yaml: synchronous and packed-4, two beta2 values,
seeds 42/43/44) with its own learning rates and `confirm: {top: 2, seeds: [101, 102, 103]}`,
trained end to end by Snakemake in a fresh copy of the checkout. Printed per grid: the runs and
training + validation CPU-hours of the grid and of its confirmation (the jobs' recorded seconds,
as the report counts them) and their ratio; then per mode the winner, its selected and confirmed
loss, the optimism (selected - confirmed, its 95 % Welch interval) and the verdict.

    PYTHONPATH=src python benchmarks/confirmation_cost.py [--grids 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("workflow", "config", "profiles", "slurm", "src", "environment.yml")
FRESH = [101, 102, 103]
GRIDS = [
    {"synchronous": [0.001, 0.003, 0.009], "packed-4": [0.001, 0.003, 0.009]},
    {"synchronous": [0.002, 0.004, 0.008], "packed-4": [0.002, 0.004, 0.008]},
    {"synchronous": [0.0015, 0.003, 0.006, 0.012], "packed-4": [0.0015, 0.003, 0.006, 0.012]},
]


def run_grid(index: int, learning_rates: dict[str, list[float]], work: Path) -> dict:
    repo = work / f"grid-{index}"
    repo.mkdir()
    for name in COPIED:
        source = ROOT / name
        (shutil.copy2 if source.is_file() else shutil.copytree)(source, repo / name)
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw |= {"campaign": f"confirm-{index}", "confirm": {"top": 2, "seeds": FRESH}}
    raw["grid"]["learning_rates"] = learning_rates
    (repo / "config/campaigns/confirm.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    started = time.perf_counter()
    command = [sys.executable, "-m", "snakemake", "--configfile", "config/campaigns/confirm.yaml"]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"PYTHONPATH": str(repo / "src")}
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    report = json.loads((repo / f"results/confirm-{index}/report/results.json").read_text())
    seconds = {"grid": [0.0, 0], "confirmation": [0.0, 0]}
    for run in report["cost"]["runs"]:
        kind = "confirmation" if int(run["run"].rsplit("-seed", 1)[1]) in FRESH else "grid"
        seconds[kind][0] += run["seconds"]
        seconds[kind][1] += 1
    return {"wall_s": time.perf_counter() - started, "seconds": seconds, "confirmation": report["confirmation"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", type=int, default=len(GRIDS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for index, learning_rates in enumerate(GRIDS[: args.grids]):
            result = run_grid(index, learning_rates, Path(work))
            (grid_s, grid_n), (more_s, more_n) = result["seconds"]["grid"], result["seconds"]["confirmation"]
            print(
                f"grid {index} (LRs {learning_rates['synchronous']}): {grid_n} runs, {grid_s / 3600:.4f} CPU-h; "
                f"confirmation {more_n} runs, {more_s / 3600:.4f} CPU-h ({more_s / grid_s:.2f}x the grid's hours, "
                f"{more_n / grid_n:.2f}x its runs); wall {result['wall_s']:.0f} s"
            )
            for group in result["confirmation"]["groups"]:
                optimism = group["optimism"]
                shown = (
                    f"{optimism['difference']:+.4f} ({optimism['low']:+.4f} to {optimism['high']:+.4f})"
                    if optimism
                    else "-"
                )
                print(
                    f"  {group['mode']}: {group['winner']}: selected {group['selected']['mean']:.4f}, confirmed "
                    f"{group['confirmed']['mean']:.4f}, optimism {shown}; {group['verdict']}"
                )


if __name__ == "__main__":
    main()
