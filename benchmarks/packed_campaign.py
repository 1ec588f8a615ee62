"""Wall time of one campaign trained packed (`execution.pack: K`) against the same campaign solo.

    python benchmarks/packed_campaign.py --model demo --ks 2 4 8 --repeats 3
    python benchmarks/packed_campaign.py --model 20m-body --ks 2 4 8 --repeats 2

The campaign: --runs synchronous runs (learning rates 1e-3 .. 8e-3 at beta2 0.95, then 0.99; one
seed), two epochs in two slices, checkpoint policy `final`, full validation and report, on a
synthetic corpus. `demo` is the demo model; `20m-body` the 20M preset's transformer (8 layers, width
320, FFN 896, context 1,024) over the synthetic corpus's vocabulary, one 1,024-token sequence per run
and step. Each repeat copies the tracked files of this checkout into a new directory, prepares the
data cache there untimed, then runs `snakemake --cores all` for the solo campaign and for each K,
starting the order one further each repeat. Prints each wall time, the medians and solo / packed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from demo_campaign import copy_checkout

MODELS = {
    "demo": {"training.max_tokens": 16384, "training.epoch_tokens": 8192},
    "20m-body": {
        "model.layers": 8,
        "model.width": 320,
        "model.heads": 5,
        "model.ffn_width": 896,
        "model.context_length": 1024,
        "training.batch_tokens": 1024,
        "training.micro_batch_size": 1,
        "training.max_tokens": 4096,
        "training.epoch_tokens": 2048,
        "evaluation.subset_blocks": 2,
        "evaluation.batch_size": 2,
    },
}
LEARNING_RATES = [0.001, 0.002, 0.004, 0.008]


def campaign(name: str, model: str, runs: int, pack: int | None) -> dict:
    """The benchmark's campaign file: `runs` synchronous runs, packed `pack` at a time (None: solo)."""
    beta2 = [0.95, 0.99][: max(1, runs // len(LEARNING_RATES))]
    raw = {
        "campaign": name,
        "recipe": "demo",
        "data": {
            "source": "synthetic",
            "cache_dir": "results/caches/bench",
            "synthetic_train_bytes": 400000,
            "synthetic_validation_bytes": 40000,
        },
        "overrides": MODELS[model],
        "grid": {
            "modes": ["synchronous"],
            "learning_rates": {"synchronous": LEARNING_RATES[: min(runs, len(LEARNING_RATES))]},
            "beta2": beta2,
        },
        "seeds": [42],
        "epochs_per_slice": 1,
        "checkpoint_policy": "final",
        "resources": {"default": {"gpus": 0, "minutes": 60, "mem_mb": 4000, "cpus": 1}},
    }
    return raw | ({"execution": {"pack": pack}} if pack else {})


def snakemake(copy: Path, env: dict[str, str], *args: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=copy, env=env, capture_output=True, text=True
    )
    if result.returncode:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="demo")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8], help="runs per pack")
    parser.add_argument("--runs", type=int, default=8, help="runs of the campaign")
    parser.add_argument("--repeats", type=int, default=3, help="campaigns per side (median reported)")
    args = parser.parse_args()
    sides = [None, *args.ks]
    times: dict[int | None, list[float]] = {side: [] for side in sides}
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="ebd2n-pack-") as scratch:
            copy = Path(scratch) / "repo"
            env = copy_checkout(copy)
            files = {}
            for side in sides:
                name = f"pack{side}" if side else "solo"
                files[side] = f"config/campaigns/{name}.yaml"
                (copy / files[side]).write_text(yaml.safe_dump(campaign(name, args.model, args.runs, side)))
            prepare = [sys.executable, "-m", "ebd2n", "campaign", "prepare", files[None]]
            subprocess.run(prepare, cwd=copy, env=env, check=True, capture_output=True)
            order = sides[repeat % len(sides) :] + sides[: repeat % len(sides)]
            for side in order:
                times[side].append(snakemake(copy, env, "--cores", "all", "--configfile", files[side]))
                print(f"repeat {repeat + 1}: {'solo' if side is None else f'pack {side}'}: {times[side][-1]:.1f} s")
    solo = statistics.median(times[None])
    print(f"\n{args.model}, {args.runs} runs: solo median {solo:.1f} s")
    for k in args.ks:
        packed = statistics.median(times[k])
        print(f"pack {k}: median {packed:.1f} s, solo / packed {solo / packed:.2f}x")


if __name__ == "__main__":
    main()
