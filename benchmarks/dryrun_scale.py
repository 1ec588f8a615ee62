"""How long Snakemake takes to plan the 20M sweep at 324 runs and more, this checkout against another,
or against a bare Snakefile of the same shape (benchmarks/bare.smk: Snakemake alone, no ebd2n).

    git worktree add --detach /tmp/before <commit>       # the checkout to compare with
    python benchmarks/dryrun_scale.py --compare /tmp/before --seeds 3 31 93 --repeats 3
    PYTHONPATH=src python benchmarks/dryrun_scale.py --compare bare --seeds 31 93 --repeats 3

For each seed count the 20M sweep's campaign file (config/campaigns/recipe-sweep-20m.yaml, 108 grid
points) gets that many seeds (3: the published 324 runs; 31: 3,348; 93: 10,044) and both checkouts
dry-run it with the slurm profile, once each untimed, then alternately `--repeats` times each (each
side first in every other pair). Prints the median wall
seconds and CPU seconds (user + system of the snakemake process: what the planning costs, whatever
else loads the machine) of each, their ratio and the median ratio of adjacent pairs; writes
benchmarks/dryrun_scale.json after every measurement.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "config/campaigns/recipe-sweep-20m.yaml"


def dry_run(checkout: Path, seeds: int) -> tuple[float, float]:
    """Wall and CPU seconds of one dry run of the sweep with `seeds` seeds, from `checkout`."""
    raw = yaml.safe_load((checkout / SWEEP).read_text())
    raw["seeds"] = list(range(42, 42 + seeds))
    raw["campaign"] = f"dryrun-scale-{seeds}"
    campaign = checkout / "config" / "campaigns" / f"dryrun-scale-{seeds}.yaml"
    campaign.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {"PYTHONPATH": str(checkout / "src"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    command = [sys.executable, "-m", "snakemake", "--profile", "slurm", "-n", "--configfile", str(campaign)]
    before = _children_cpu()
    started = time.perf_counter()
    result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    campaign.unlink()
    if result.returncode:
        raise SystemExit(f"{checkout}: dry run of {seeds} seeds failed:\n{result.stderr[-3000:]}")
    return elapsed, _children_cpu() - before


def bare_dry_run(seeds: int) -> tuple[float, float]:
    """Wall and CPU seconds of one dry run of benchmarks/bare.smk over the same runs (ids from ebd2n,
    computed outside the timed process), with the profiles the workflow's dry run loads."""
    from ebd2n.campaign.check import load_campaign

    raw = yaml.safe_load((ROOT / SWEEP).read_text())
    raw["seeds"] = list(range(42, 42 + seeds))
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        (directory / "sweep.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        runs = [run.id for run in load_campaign(directory / "sweep.yaml").grid.runs()]
        (directory / "runs.json").write_text(json.dumps({"runs": runs}))
        command = [
            *[sys.executable, "-m", "snakemake", "--profile", str(ROOT / "slurm"), "-n"],
            *["--workflow-profile", str(ROOT / "profiles" / "default")],  # what the workflow's runs load
            *["--snakefile", str(ROOT / "benchmarks" / "bare.smk"), "-d", scratch, "--configfile", "runs.json"],
        ]
        before = _children_cpu()
        started = time.perf_counter()
        result = subprocess.run(command, cwd=directory, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"bare dry run of {seeds} seeds failed:\n{result.stderr[-3000:]}")
    return elapsed, _children_cpu() - before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compare", required=True, help="another checkout (e.g. a worktree of the last release), or `bare`"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 31])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    checkouts = {"this": ROOT, "compared": args.compare if args.compare == "bare" else Path(args.compare).resolve()}
    record: dict = {"compared": str(checkouts["compared"]), "cases": {}}
    for seeds in args.seeds:
        times: dict[str, list[float]] = {name: [] for name in checkouts}
        cpu: dict[str, list[float]] = {name: [] for name in checkouts}
        for checkout in checkouts.values():  # untimed, once each: file caches warm for both
            bare_dry_run(seeds) if checkout == "bare" else dry_run(checkout, seeds)
        for repeat in range(args.repeats):
            order = list(checkouts.items())  # alternately, each first in every other pair: no side gains by its place
            for name, checkout in order if repeat % 2 == 0 else order[::-1]:
                wall, used = bare_dry_run(seeds) if checkout == "bare" else dry_run(checkout, seeds)
                times[name].append(wall)
                cpu[name].append(used)
                record["cases"][str(seeds)] = {"runs": 108 * seeds, "wall_s": times, "cpu_s": cpu}
                (ROOT / "benchmarks" / "dryrun_scale.json").write_text(json.dumps(record, indent=2) + "\n")
        for label, values in (("wall", times), ("cpu", cpu)):
            this, compared = statistics.median(values["this"]), statistics.median(values["compared"])
            paired = statistics.median(t / c for t, c in zip(values["this"], values["compared"], strict=True))
            print(
                f"{108 * seeds:6d} runs, {label}: this {this:7.2f} s, compared {compared:7.2f} s, "
                f"ratio {this / compared:.3f}, median of adjacent pairs {paired:.3f} "
                f"({', '.join(f'{t:.1f}' for t in values['this'])} / "
                f"{', '.join(f'{t:.1f}' for t in values['compared'])})"
            )


if __name__ == "__main__":
    main()
