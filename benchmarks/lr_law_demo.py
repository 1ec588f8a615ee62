"""The learning-rate law fitted from real training: 3 demo-scale sizes x 2 horizons x 5 LRs x 2 seeds.

    python benchmarks/lr_law_demo.py [--cores 2]

Three models of the demo's shape at widths 32, 64 and 128 (41,632, 133,440 and 467,584 parameters;
recipe files beside the campaign, named as its presets), trained on the synthetic corpus with
tiny-llm's WSD (sqrt decay over the last 10 %, a fixed warm-up) to horizons of 1 and 2 tokens per
parameter (the 2 branching from the 1's trunk), learning rates 0.002 ... 0.032 (x2 apart), seeds
1 and 2: 60 runs, one campaign, in a fresh copy of the tracked files. Prints the report's
learning-rate law (results.json `lr_law`): the exponents with their intervals, the leave-largest-out
prediction and its regret, the next size; the wall time; writes benchmarks/lr_law_demo.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from demo_campaign import ROOT, copy_checkout

WIDTHS = {"w32.yaml": (32, 88), "w64.yaml": (64, 176), "w128.yaml": (128, 352)}
"""Preset file -> (width, FFN width): the demo's 2 layers and 2 heads, 11/4 the width in the FFN."""
CAMPAIGN = {
    "campaign": "lr-law-demo",
    "data": {"source": "synthetic", "cache_dir": "results/caches/lr-law-demo"},
    "overrides": {
        "training.epoch_tokens": 16384,
        "training.epoch_tokens_per_parameter": None,
        "evaluation.subset_blocks": 16,
        "optimizer.schedule": "wsd",
        "optimizer.decay_fraction": 0.1,
        "optimizer.warmup_tokens": 4096,
    },
    "grid": {
        "presets": list(WIDTHS),
        "modes": ["synchronous"],
        "learning_rates": {"synchronous": [0.002, 0.004, 0.008, 0.016, 0.032]},
        "beta2": [0.95],
        "horizons": [1, 2],
    },
    "seeds": [1, 2],
    "epochs_per_slice": 8,
    "resources": {"default": {"gpus": 0, "cpus": 1}},
}


def write_presets(repo: Path) -> None:
    """The three sizes as recipe files at the repository root (the campaign names them as presets)."""
    demo = yaml.safe_load((ROOT / "src/ebd2n/config/recipes/demo.yaml").read_text())
    for name, (width, ffn) in WIDTHS.items():
        recipe = json.loads(json.dumps(demo))
        recipe["model"] |= {"width": width, "ffn_width": ffn}
        (repo / name).write_text(yaml.safe_dump(recipe, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ebd2n-lr-law-") as scratch:
        repo = Path(scratch) / "repo"
        env = copy_checkout(repo)
        write_presets(repo)
        path = repo / "config" / "campaigns" / "lr-law-demo.yaml"
        path.write_text(yaml.safe_dump(CAMPAIGN, sort_keys=False))
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", args.cores, "--configfile", str(path)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"the campaign failed:\n{done.stderr[-3000:]}")
        results = json.loads((repo / "results/lr-law-demo/report/results.json").read_text())
        jobs = [
            json.loads(line)
            for run in (repo / "results/lr-law-demo/runs").iterdir()
            for line in (run / "jobs.jsonl").read_text().splitlines()
        ]
    record = {
        "runs": len(results["runs"]),
        "wall_s": wall,
        "train_job_s": sum(job["seconds"] for job in jobs if job["kind"] == "train"),
        "lr_law": results.get("lr_law"),
    }
    print(json.dumps(record, indent=2))
    (ROOT / "benchmarks" / "lr_law_demo.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
