"""Trainer overhead: ebd2n's trainer vs a minimal hand-written PyTorch loop, same model and batch.

Both run in this process on the CPU with one thread, on the demo model shape scaled up a little
(`--width`), for the same number of optimizer steps. The trainer's figure is the tokens/s of its
epoch records (training steps only, subset validation excluded), so both figures measure the
same work: read a batch, forward, backward, clip, AdamW step. Also reports full-validation
tokens/s against training tokens/s.

    python benchmarks/train_throughput.py [--repeats 5] [--width 128]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ebd2n.config import load_recipe
from ebd2n.data import BlockReader, open_cache, prepare_cache, train_block_indices
from ebd2n.evaluate import validate_run
from ebd2n.model import GPT
from ebd2n.train import train
from ebd2n.train.budget import budget_of
from ebd2n.train.records import read_metrics
from ebd2n.train.schedule import learning_rate


def bare_loop(recipe, cache_dir: Path, steps: int) -> float:
    """Tokens/s of the simplest correct loop: random-order blocks, forward, backward, clip, AdamW."""
    torch.manual_seed(recipe.runtime.seed)
    budget = budget_of(recipe)
    model = GPT(recipe.model)
    opt = recipe.optimizer
    optimizer = torch.optim.AdamW(
        model.param_groups(opt.weight_decay), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, foreach=True
    )
    blocks = BlockReader(open_cache(cache_dir), "train", recipe.model.context_length + 1)
    count = budget.sequences_per_step
    started = time.perf_counter()
    for step in range(steps):
        batch = blocks.read(train_block_indices(blocks.num_blocks, 0, step * count, count))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate((step + 1) * budget.tokens_per_step, steps * budget.tokens_per_step, opt)
        _, loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opt.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return steps * budget.tokens_per_step / (time.perf_counter() - started)


def trainer_run(recipe, out: Path) -> tuple[float, float]:
    """(training tokens/s from the epoch records, full-validation tokens/s)."""
    train(
        recipe.model_copy(update={"runtime": recipe.runtime.model_copy(update={"output_dir": str(out)})}),
        progress=False,
    )
    epochs = [r for r in read_metrics(out) if r["type"] == "epoch"]
    train_tps = epochs[-1]["tokens"] / sum(r["wall_s"] for r in epochs)
    results = validate_run(out)
    return train_tps, results["targets"] / results["wall_seconds"]


def bench_recipe(work: Path, width: int):
    """The demo recipe at `width`, 32 steps of 4,096 tokens in two epochs, its cache under `work`."""
    return load_recipe(
        "demo",
        [
            f"data.cache_dir={work / 'cache'}",
            f"model.width={width}",
            f"model.ffn_width={width * 11 // 4}",
            "model.heads=4",
            "training.batch_tokens=4096",
            "training.micro_batch_size=64",
            "training.epoch_tokens=65536",
            "training.max_tokens=131072",
            "runtime.deterministic=false",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="ebd2n-bench-"))
    recipe = bench_recipe(work, args.width)
    prepare_cache(recipe.data, recipe.model.vocab_size, progress=False)
    steps = budget_of(recipe).total_steps
    rows = []
    for repeat in range(args.repeats):
        bare = bare_loop(recipe, Path(recipe.data.cache_dir), steps)
        ours, validation = trainer_run(recipe, work / f"run{repeat}")
        rows.append((bare, ours, validation))
        print(
            f"repeat {repeat}: bare {bare:,.0f} tok/s | trainer {ours:,.0f} tok/s | "
            f"full validation {validation:,.0f} tok/s"
        )
    bare, ours, validation = (statistics.median(col) for col in zip(*rows, strict=True))
    print()
    print("| measure | tokens/s (median) | ratio |")
    print("|---|---|---|")
    print(f"| bare PyTorch loop | {bare:,.0f} | 1.00 |")
    print(f"| ebd2n trainer | {ours:,.0f} | {ours / bare:.3f} of bare |")
    print(f"| full validation | {validation:,.0f} | {validation / ours:.2f}x training |")


if __name__ == "__main__":
    main()
