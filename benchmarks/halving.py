"""Successive halving against the full grid: the same demo-recipe grid trained both ways, in one run.

    PYTHONPATH=src python benchmarks/halving.py [--repeats 3] [--lrs 9] [--seeds 3] [--slices 4] [--keep 1/3]
                                                [--cores all] [--resources mem_mb=4000]

Each repeat (the two campaigns' order alternating between repeats, as the machine's load drifts)
copies the tracked files of this checkout into two new temporary directories and runs the real
workflow (`snakemake --cores CORES --configfile ...`) in each: one campaign trains the whole grid
(one mode, `--lrs` learning rates spread geometrically over --lr-range, `--seeds` seeds, `--slices`
one-epoch slices of the demo recipe's model on a tiny synthetic corpus), the other the same grid
under `search: {method: successive-halving, keep: --keep}` with a rung at every slice end before
the last. Measured in the same repeat:

  training slice-seconds  the sum of every run's epoch `wall_s` (metrics.jsonl; stopped runs included)
  job seconds             the sum of the campaign's Snakemake job benchmarks (benchmarks/*.tsv, column s)
  workflow seconds        the wall time of the whole `snakemake` call (cache, audit and report included)
  winner                  each campaign's report/selection.json; halving passes when it picks the full
                          grid's point, or one whose mean final full-validation loss (over the seeds, in
                          the full grid's runs) is within the full grid winner's seed SD of it

Goal (issue #28): halving's winner passes, using at most 40 % of the full grid's training
slice-seconds. Prints one line per campaign and the medians; writes benchmarks/halving.json
(--out to put it elsewhere).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from importlib.metadata import version
from pathlib import Path

import yaml
from demo_campaign import ROOT, copy_checkout

EPOCH_TOKENS = 32768  # 32 steps of 1,024 tokens: the workflow tests' tiny epoch
GOAL = 0.40


def grid_lrs(count: int, low: float, high: float) -> list[float]:
    """`count` learning rates spread geometrically from `low` to `high`, rounded to 4 significant digits."""
    return [float(f"{low * (high / low) ** (i / max(count - 1, 1)):.4g}") for i in range(count)]


def campaign(name: str, lrs: list[float], seeds: int, slices: int, keep: float | None) -> dict:
    """The campaign file: the demo recipe, `slices` one-epoch slices, the full grid or halving."""
    raw = {
        "campaign": name,
        "recipe": "demo",
        "data": {
            "source": "synthetic",
            "cache_dir": f"results/caches/{name}",
            "synthetic_train_bytes": 300000,
            "synthetic_validation_bytes": 30000,
        },
        "overrides": {"training.max_tokens": EPOCH_TOKENS * slices, "training.epoch_tokens": EPOCH_TOKENS},
        "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": lrs}, "beta2": [0.99]},
        "seeds": [42 + i for i in range(seeds)],
        "epochs_per_slice": 1,
        "resources": {"default": {"gpus": 0, "minutes": 10, "mem_mb": 2000, "cpus": 1}},
    }
    if keep is not None:
        raw["search"] = {"method": "successive-halving", "keep": keep}
    return raw


def run_campaign(raw: dict, cores: str, resources: list[str]) -> dict:
    """Run `raw` with the real workflow in a fresh copy of the checkout; its measured figures."""
    with tempfile.TemporaryDirectory(prefix=f"ebd2n-{raw['campaign']}-") as scratch:
        copy = Path(scratch) / "repo"
        env = copy_checkout(copy)
        config = copy / "config" / "campaigns" / f"{raw['campaign']}.yaml"
        config.write_text(yaml.safe_dump(raw, sort_keys=False))
        started = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            cores,
            "--configfile",
            config.relative_to(copy).as_posix(),
        ]
        command += ["--resources", *resources] if resources else []
        result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True)
        workflow_s = time.perf_counter() - started
        directory = copy / "results" / raw["campaign"]
        if result.returncode or not (directory / "audit.passed").is_file():
            raise SystemExit(f"campaign {raw['campaign']} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        return measure(directory, workflow_s)


def measure(directory: Path, workflow_s: float) -> dict:
    """Training slice-seconds and epochs over every run, job seconds, the selection, the rungs,
    the mean `wall_s` of each epoch over the runs that trained it, each point's final losses and
    its mean subset-validation loss at each epoch it reached."""
    epochs, curves = [], {}
    for run in sorted((directory / "runs").iterdir()):
        lr = yaml.safe_load((run / "recipe.yaml").read_text())["optimizer"]["lr"]
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        records = [record for record in records if record.get("type") == "epoch"]
        epochs += records
        for record in records:
            curves.setdefault(lr, {}).setdefault(record["epoch"], []).append(record["val_loss"])
    jobs = 0.0
    for table in (directory / "benchmarks").rglob("*.tsv"):
        with table.open() as handle:
            jobs += sum(float(row["s"]) for row in csv.DictReader(handle, delimiter="\t"))
    (winner,) = json.loads((directory / "report" / "selection.json").read_text()).values()
    losses: dict[float, list[float]] = {}
    with (directory / "report" / "runs.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row["loss"]:
                losses.setdefault(float(row["lr"]), []).append(float(row["loss"]))
    rungs = (
        [
            {
                "epoch": d["epoch"],
                "candidates": d["candidates"],
                "continuing": [decision_lr(d, p) for p in d["continuing"]],
            }
            for d in sorted(
                (json.loads(p.read_text()) for p in (directory / "search").rglob("rung-*.json")),
                key=lambda d: d["epoch"],
            )
        ]
        if (directory / "search").is_dir()
        else []
    )
    return {
        "slice_s": sum(record["wall_s"] for record in epochs),
        "epochs": len(epochs),
        "job_s": jobs,
        "workflow_s": workflow_s,
        "winner": {key: winner[key] for key in ("lr", "beta2", "mean_loss", "std_loss")},
        "losses": {str(lr): values for lr, values in sorted(losses.items())},
        "rungs": rungs,
        "epoch_wall_s": {
            epoch: statistics.mean(r["wall_s"] for r in epochs if r["epoch"] == epoch)
            for epoch in sorted({r["epoch"] for r in epochs})
        },
        "subset_curves": {
            str(lr): {epoch: statistics.mean(values) for epoch, values in sorted(by_epoch.items())}
            for lr, by_epoch in sorted(curves.items())
        },
    }


def decision_lr(decision: dict, point: str) -> float:
    """A decision's point id as its learning rate."""
    return next(entry["lr"] for entry in decision["ranking"] if entry["point"] == point)


def compare(grid: dict, halving: dict) -> dict:
    """Halving's winner against the full grid's, in the full grid's own final losses."""
    best, picked = grid["winner"], halving["winner"]
    picked_mean = statistics.mean(grid["losses"][str(picked["lr"])])
    return {
        "same_point": picked["lr"] == best["lr"],
        "difference": picked_mean - best["mean_loss"],
        "seed_sd": best["std_loss"],
        "within_sd": abs(picked_mean - best["mean_loss"]) <= best["std_loss"],
        "slice_ratio": halving["slice_s"] / grid["slice_s"],
        "epoch_ratio": halving["epochs"] / grid["epochs"],
        "job_ratio": halving["job_s"] / grid["job_s"],
        "workflow_ratio": halving["workflow_s"] / grid["workflow_s"],
    }


def line(kind: str, figures: dict) -> str:
    winner = figures["winner"]
    rungs = " -> ".join(str(r["candidates"]) for r in figures["rungs"])
    return (
        f"{kind:8} slice {figures['slice_s']:7.1f} s ({figures['epochs']:3} epochs)  jobs {figures['job_s']:7.1f} s  "
        f"workflow {figures['workflow_s']:6.1f} s  winner lr {winner['lr']:g} loss {winner['mean_loss']:.4f} "
        f"+- {winner['std_loss']:.4f}"
        + (f"  rungs {rungs} -> {len(figures['rungs'][-1]['continuing'])}" if rungs else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="pairs of campaigns (medians reported)")
    parser.add_argument("--lrs", type=int, default=9, help="learning rates in the grid")
    parser.add_argument("--lr-range", type=float, nargs=2, default=(0.0005, 0.016), metavar=("LOW", "HIGH"))
    parser.add_argument("--seeds", type=int, default=3, help="seeds per learning rate")
    parser.add_argument(
        "--slices", type=int, default=4, help="one-epoch slices per run (rungs at every slice end but the last)"
    )
    parser.add_argument(
        "--keep",
        type=lambda text: float(Fraction(text)),
        default=1 / 3,
        help="share of a rung's candidates that train on (a fraction such as 1/3 is fine)",
    )
    parser.add_argument("--cores", default="all", help="snakemake --cores (1: one job at a time, no job slows another)")
    parser.add_argument(
        "--resources",
        nargs="*",
        default=[],
        metavar="NAME=N",
        help="snakemake --resources, e.g. mem_mb=4000 (the training jobs ask 2000 MB each)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "halving.json")
    args = parser.parse_args()
    lrs = grid_lrs(args.lrs, *args.lr_range)
    print(
        f"grid: lr {', '.join(f'{lr:g}' for lr in lrs)}; {args.seeds} seeds; {args.slices} slices; "
        f"keep {args.keep:.4g}",
        flush=True,
    )
    repeats = []
    for index in range(args.repeats):
        figures = {}
        for kind in ("grid", "halving") if index % 2 == 0 else ("halving", "grid"):  # alternating: load drifts
            raw = campaign(kind, lrs, args.seeds, args.slices, args.keep if kind == "halving" else None)
            figures[kind] = run_campaign(raw, args.cores, args.resources)
            print(line(kind, figures[kind]), flush=True)
        grid, halving = figures["grid"], figures["halving"]
        verdict = compare(grid, halving)
        print(
            f"repeat {index + 1}: halving / grid slice {verdict['slice_ratio']:.3f} "
            f"(epochs {verdict['epoch_ratio']:.3f}), "
            f"jobs {verdict['job_ratio']:.3f}, workflow {verdict['workflow_ratio']:.3f}; winner "
            f"{'the same point' if verdict['same_point'] else 'another point'}, {verdict['difference']:+.4f} "
            f"(seed SD {verdict['seed_sd']:.4f})",
            flush=True,
        )
        repeats.append({"grid": grid, "halving": halving, **verdict})
        record = summary(args, lrs, repeats)
        args.out.write_text(json.dumps(record, indent=1) + "\n")  # after every repeat: a cut run keeps what it measured
    median = record["median"]
    print(
        f"median halving / grid: slice {median['slice_ratio']:.3f}, jobs {median['job_ratio']:.3f}, "
        f"workflow {median['workflow_ratio']:.3f}; goal (winner within one SD, slice <= {GOAL:.0%}) met in "
        f"{sum(record['goal_met'])} of {len(repeats)} repeats"
    )


def summary(args: argparse.Namespace, lrs: list[float], repeats: list[dict]) -> dict:
    """The JSON record: the configuration, the medians over the repeats so far, and every repeat."""
    median = {
        key: statistics.median(r[key] for r in repeats)
        for key in ("slice_ratio", "epoch_ratio", "job_ratio", "workflow_ratio")
    }
    median.update(
        {
            f"{kind}_{key}": statistics.median(r[kind][key] for r in repeats)
            for kind in ("grid", "halving")
            for key in ("slice_s", "job_s", "workflow_s")
        }
    )
    return {
        "command": " ".join(["python", "benchmarks/halving.py", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}, "
        f"torch {version('torch')}, Snakemake {version('snakemake')}",
        "lrs": lrs,
        "seeds": args.seeds,
        "slices": args.slices,
        "keep": args.keep,
        "cores": args.cores,
        "resources": args.resources,
        "median": median,
        "goal_met": [(r["same_point"] or r["within_sd"]) and r["slice_ratio"] <= GOAL for r in repeats],
        "repeats": repeats,
    }


if __name__ == "__main__":
    main()
