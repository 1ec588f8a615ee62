"""A run trained in one job and the same run in two slices: what the GPU tests and their CPU
counterparts (tests/test_gpu.py, tests/test_gpu_paths_on_cpu.py) compare."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ebd2n.config import Recipe, load_recipe
from ebd2n.train import train
from ebd2n.train.checkpoint import load_checkpoint
from ebd2n.train.records import read_metrics


def short_demo(cache_dir: Path, run_dir: Path, *overrides: str) -> Recipe:
    """The demo model in 4 epochs x 4 steps of 1,024 tokens, in `run_dir`, reading `cache_dir`."""
    settings = [f"data.cache_dir={cache_dir}", f"runtime.output_dir={run_dir}", "training.max_tokens=16384"]
    return load_recipe("demo", [*settings, "training.epoch_tokens=4096", *overrides])


def whole_and_sliced(recipe_of: Callable[[Path], Recipe], directory: Path) -> tuple[Path, Path]:
    """One job to the end, and the same run as two slices (epochs 0-2, then resumed to the end);
    `recipe_of(run_dir)` is the run's recipe there."""
    whole, sliced = directory / "whole", directory / "sliced"
    train(recipe_of(whole), progress=False)
    recipe = recipe_of(sliced)
    train(recipe, until_epoch=2, progress=False)
    train(recipe, resume=sliced / "checkpoints/epoch-2.pt", progress=False)
    return whole, sliced


def final_weights(run_dir: Path) -> dict:
    return load_checkpoint(run_dir / "final.pt")["engine"]


def step_losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir) if r["type"] == "step"]
