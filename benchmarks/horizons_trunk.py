"""A horizons campaign against training every horizon from scratch: tokens trained and wall time.

    python benchmarks/horizons_trunk.py [--repeats 3]

The demo model (133,440 parameters) on the synthetic corpus, tiny-llm's WSD (sqrt decay over the
last 10 %, a fixed warm-up), horizons of 0.5, 1, 2 and 4 tokens per parameter (the ratios of
tiny-llm's 20 ... 160), 2 learning rates x 1 seed. Each repeat, in fresh copies of the tracked files:
one campaign with `grid.horizons` (each longer horizon continues the next shorter one's trunk), and
the reference: the same 8 runs as 4 campaigns, one per horizon, each run trained from the start.
Trained tokens are counted from the runs (a branched run's own: its budget minus its lineage.json's
tokens); time is each side's snakemake invocations and the sum of its training jobs' recorded
seconds (jobs.jsonl). Reference and horizons alternate; prints the medians and the ratios,
writes benchmarks/horizons_trunk.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from demo_campaign import ROOT, copy_checkout

HORIZONS = [0.5, 1.0, 2.0, 4.0]
CAMPAIGN = {
    "recipe": "demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/horizons"},
    "overrides": {
        "training.epoch_tokens": 16384,
        "evaluation.subset_blocks": 16,
        "optimizer.schedule": "wsd",
        "optimizer.decay_fraction": 0.1,
        "optimizer.warmup_tokens": 4096,
    },
    "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.003, 0.006]}, "beta2": [0.95]},
    "seeds": [1],
    "epochs_per_slice": 4,
    "resources": {"default": {"gpus": 0, "cpus": 1}},
}


def campaigns() -> dict[str, list[dict]]:
    """The horizons campaign, and the reference's one campaign per horizon."""
    trunk = CAMPAIGN | {"campaign": "horizons", "grid": CAMPAIGN["grid"] | {"horizons": HORIZONS}}
    scratch = [
        CAMPAIGN
        | {"campaign": f"scratch-{h:g}"}
        | {"overrides": CAMPAIGN["overrides"] | {"training.tokens_per_parameter": h, "training.max_tokens": None}}
        for h in HORIZONS
    ]
    return {"horizons": [trunk], "scratch": scratch}


def run_side(files: list[dict]) -> dict[str, float]:
    """Train a side's campaigns in a fresh copy: wall seconds, training jobs' seconds, tokens trained."""
    with tempfile.TemporaryDirectory(prefix="ebd2n-horizons-") as scratch:
        copy = Path(scratch) / "repo"
        env = copy_checkout(copy)
        subprocess.run(  # the shared data cache, outside the timing
            [sys.executable, "-m", "ebd2n", "prepare", "demo", "--quiet", "--set", "data.source=synthetic"]
            + ["--set", "data.cache_dir=results/caches/horizons"],
            cwd=copy,
            env=env,
            check=True,
            capture_output=True,
        )
        wall = 0.0
        for raw in files:
            path = copy / "config" / "campaigns" / f"{raw['campaign']}.yaml"
            path.write_text(yaml.safe_dump(raw, sort_keys=False))
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", str(path)],
                cwd=copy,
                env=env,
                capture_output=True,
                text=True,
            )
            wall += time.perf_counter() - started
            if done.returncode:
                raise SystemExit(f"campaign {raw['campaign']} failed:\n{done.stderr[-3000:]}")
        return {"wall_s": wall, **_trained(copy / "results")}


def _trained(results: Path) -> dict[str, float]:
    """Training jobs' recorded seconds and the tokens the runs trained themselves."""
    seconds = tokens = 0.0
    for run in results.glob("*/runs/*"):
        jobs = [json.loads(line) for line in (run / "jobs.jsonl").read_text().splitlines()]
        seconds += sum(job["seconds"] for job in jobs if job["kind"] == "train")
        total = json.loads((run / "results.json").read_text())["tokens"]
        lineage = run / "lineage.json"
        tokens += total - (json.loads(lineage.read_text())["tokens"] if lineage.is_file() else 0)
    return {"train_job_s": seconds, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sides = campaigns()
    measured: dict[str, list[dict[str, float]]] = {"scratch": [], "horizons": []}
    for repeat in range(args.repeats):
        for side in ("scratch", "horizons"):
            measured[side].append(run_side(sides[side]))
            print(f"repeat {repeat + 1} {side}: {measured[side][-1]}", flush=True)
    record = {
        side: {key: statistics.median(m[key] for m in runs) for key in runs[0]} for side, runs in measured.items()
    }
    record["ratios"] = {key: record["horizons"][key] / record["scratch"][key] for key in record["horizons"]}
    record["repeats"] = args.repeats
    print(json.dumps(record, indent=2))
    (ROOT / "benchmarks" / "horizons_trunk.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
