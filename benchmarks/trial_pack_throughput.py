"""Packed trials against solo runs: K runs of a sweep (own learning rate, beta2 and seed each) as one
TrialPack step versus K steps of K SynchronousEngines, the engines ebd2n trains with.

Both sides take the same K batches per step (random tokens, the recipe's batch_tokens and
micro-batching), each member its own learning rate. Steps are timed alternately (pack, then the K
solo steps), after --warmup steps; the speedup is the median over --repeats of solo / pack time of
adjacent steps, so a machine that slows down for a while slows both sides of a pair. tokens/s counts
every member's tokens.

    PYTHONPATH=src python benchmarks/trial_pack_throughput.py --recipe demo --ks 2 4 8
    PYTHONPATH=src python benchmarks/trial_pack_throughput.py --recipe 20m --batch-tokens 2048 --micro-batch 4
    PYTHONPATH=src python benchmarks/trial_pack_throughput.py --recipe 20m --device cuda --compile --amp
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ebd2n.config import load_recipe
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import SynchronousEngine
from ebd2n.train.trial_engine import TrialPack

LEARNING_RATES = (1e-3, 2e-3, 3e-3, 5e-3)
BETA2 = (0.95, 0.99)


def member_recipes(args: argparse.Namespace, k: int) -> list:
    settings = [
        f"training.batch_tokens={args.batch_tokens}" if args.batch_tokens else None,
        f"training.micro_batch_size={args.micro_batch}" if args.micro_batch else None,
        f"runtime.device={args.device}",
        f"runtime.amp={str(args.amp).lower()}",
        f"runtime.compile={str(args.compile).lower()}",
    ]
    return [
        load_recipe(
            args.recipe,
            [
                *filter(None, settings),
                f"optimizer.lr={LEARNING_RATES[i % len(LEARNING_RATES)]}",
                f"optimizer.beta2={BETA2[i % len(BETA2)]}",
                f"runtime.seed={i}",
                f"runtime.output_dir=runs/bench-{i}",
            ],
        )
        for i in range(k)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="demo", help="recipe preset or file giving the model shape")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8], help="members per pack")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per side (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    parser.add_argument(
        "--batch-tokens", type=int, default=None, help="tokens per step and run (default: the recipe's)"
    )
    parser.add_argument(
        "--micro-batch", type=int, default=None, help="sequences per micro-batch (default: the recipe's)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true", help="BF16 autocast (the CUDA path)")
    parser.add_argument("--compile", action="store_true", help="torch.compile both sides")
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    first = member_recipes(args, 1)[0]
    budget = budget_of(first)
    rows, width = budget.sequences_per_step, first.model.context_length + 1
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(
        f"{args.recipe}: {first.model.layers} layers, width {first.model.width}; {rows} x {first.model.context_length} "
        f"tokens per run and step, micro-batch {budget.micro_batch_size}; {where}; torch {torch.__version__}\n"
    )
    print("| K | K solo steps (ms) | one pack step (ms) | solo tokens/s | pack tokens/s | speedup (median of pairs) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for k in args.ks:
        packed, solo, speedup = measure(args, k, rows, width, device, sync)
        tokens = k * rows * first.model.context_length
        print(
            f"| {k} | {solo * 1e3:,.1f} | {packed * 1e3:,.1f} | {tokens / solo:,.0f} | {tokens / packed:,.0f} "
            f"| **{speedup:.2f}×** |"
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()


def measure(args: argparse.Namespace, k: int, rows: int, width: int, device: torch.device, sync) -> tuple:
    """Median seconds of one pack step and of the K solo steps, and the median speedup of pairs."""
    recipes = member_recipes(args, k)
    budget = budget_of(recipes[0])
    solos = []
    for recipe in recipes:
        torch.manual_seed(recipe.runtime.seed)
        solos.append(SynchronousEngine(recipe, budget, device))
    pack = TrialPack(recipes, budget, device)
    generator = torch.Generator().manual_seed(k)
    lrs = [recipe.optimizer.lr for recipe in recipes]
    vocab = recipes[0].model.vocab_size

    def timed(step) -> float:
        data = [torch.randint(0, vocab, (rows, width), generator=generator).to(device) for _ in range(k)]
        sync()
        start = time.perf_counter()
        step(data)
        sync()
        return time.perf_counter() - start

    def solo_step(data) -> None:
        for engine, batch, lr in zip(solos, data, lrs, strict=True):
            engine.train_step(batch, lr)

    def pack_step(data) -> None:
        pack.train_step(data, lrs)

    for _ in range(args.warmup):
        timed(pack_step), timed(solo_step)
    pairs = [(timed(pack_step), timed(solo_step)) for _ in range(args.repeats)]
    packed, solo = statistics.median(p for p, _ in pairs), statistics.median(s for _, s in pairs)
    return packed, solo, statistics.median(s / p for p, s in pairs)


if __name__ == "__main__":
    main()
