"""Structurally real campaigns of thousands of runs, made without training each one.

One run is trained and validated for real (a micro model, two one-step epochs); every other run of
the grid is that run's directory as the trainer and validation would have written it for its own
grid point: its recipe resolved from the frozen base, its id and recipe identity inside final.pt,
run.json, train.log and the dashboard, its subset and full-validation losses moved by a small
deterministic amount (so selection has something to choose), and every hash record (checkpoints.json,
results.json's artifacts) recomputed. The campaign is then collected, audited (runs stage) and
reported like a real one, and its audit passes.

    PYTHONPATH=src python benchmarks/scale_campaign.py --runs 3000 --keep /tmp/scale-3000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import yaml
from audit_speed import finish_campaign, start_campaign, train_run

MICRO = {
    "model.layers": 1,
    "model.width": 16,
    "model.heads": 1,
    "model.ffn_width": 32,
    "model.context_length": 32,
    "training.max_tokens": 256,
    "training.epoch_tokens": 128,
    "training.batch_tokens": 128,
    "training.micro_batch_size": 4,
    "evaluation.subset_blocks": 4,
}
SEEDS = 10
BETA2 = (0.95, 0.99, 0.999)


def campaign_file(directory: Path, runs: int) -> Path:
    """A one-mode grid of about `runs` runs: learning rates x 3 beta2 x 10 seeds."""
    rates = max(1, math.ceil(runs / (len(BETA2) * SEEDS)))
    raw = {
        "campaign": f"scale-{runs}",
        "recipe": "demo",
        "data": {
            "source": "synthetic",
            "cache_dir": "results/caches/scale",
            "synthetic_train_bytes": 200000,
            "synthetic_validation_bytes": 20000,
        },
        "overrides": MICRO,
        "grid": {
            "modes": ["synchronous"],
            "learning_rates": {"synchronous": [round(1e-4 * (i + 1), 6) for i in range(rates)]},
            "beta2": list(BETA2),
        },
        "seeds": list(range(SEEDS)),
        "epochs_per_slice": 2,
        "resources": {"default": {"gpus": 0, "minutes": 5, "mem_mb": 2000, "cpus": 1}},
    }
    path = directory / f"scale-{runs}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def build(directory: Path, runs: int) -> Path:
    """The campaign of `campaign_file`, every run present, collected, audited (runs stage) and reported."""
    campaign = start_campaign(campaign_file(directory, runs))
    grid = campaign.grid.runs()
    template = campaign.paths.run(grid[0].id).directory
    train_run(template)
    started = time.perf_counter()
    for index, run in enumerate(grid[1:], start=1):
        clone(template, campaign.paths.run(run.id).directory, index)
        if index % 1000 == 0:
            print(f"  {index:,}/{len(grid):,} runs made ({time.perf_counter() - started:.0f} s)", flush=True)
    return finish_campaign(campaign)


def clone(template: Path, target: Path, index: int) -> None:
    """`template`'s files as its trainer and validation would have written them for `target`'s run."""
    import torch

    from ebd2n.atomic import sha256_file
    from ebd2n.campaign.resolve import resolve_run
    from ebd2n.config import load_recipe, recipe_identity

    results = json.loads((template / "results.json").read_text())
    target.mkdir(parents=True)
    recipe = load_recipe(resolve_run(target))
    identity = recipe_identity(recipe, results["cache_identity"])
    names = {template.name: target.name, results["recipe_identity"]: identity}
    shift = 1e-4 * ((index * 7919) % 1000)  # a deterministic spread of losses across the grid
    for path in sorted(template.rglob("*")):
        relative = path.relative_to(template)
        destination = target / relative
        if path.is_dir():
            destination.mkdir(exist_ok=True)
        elif path.name == "final.pt":
            state = torch.load(path, map_location="cpu", weights_only=True)
            state["run_id"], state["recipe_identity"] = target.name, identity
            torch.save(state, destination)
        elif path.name not in ("recipe.yaml", "results.json"):
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:  # TensorBoard's event records, binary: copied as they are
                shutil.copyfile(path, destination)
                continue
            for old, new in names.items():
                text = text.replace(old, new)
            destination.write_text(text, encoding="utf-8")
    (target / "checkpoints.json").write_text(
        json.dumps({"final.pt": sha256_file(target / "final.pt")}, indent=2) + "\n"
    )
    results.update(
        run=target.name,
        lr=recipe.optimizer.lr,
        beta2=recipe.optimizer.beta2,
        seed=recipe.runtime.seed,
        recipe_identity=identity,
        loss=results["loss"] + shift,
        perplexity=math.exp(results["loss"] + shift),
    )
    results["artifacts"] = {name: sha256_file(target / name) for name in results["artifacts"]}
    (target / "results.json").write_text(json.dumps(results, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=324)
    parser.add_argument("--keep", type=Path, required=True, help="build the campaign here")
    args = parser.parse_args()
    directory = args.keep.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    os.chdir(directory)
    started = time.perf_counter()
    campaign = build(directory, args.runs)
    print(f"{campaign}: {len(os.listdir(campaign / 'runs')):,} runs in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
