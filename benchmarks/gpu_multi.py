"""Multi-GPU training of the 254M preset: tokens/s, peak memory per GPU and the pipeline bubble.

Runs every layout S x D (pipeline stages x data-parallel replicas) whose product is the process
count, through ebd2n's own engines on random tokens (no data cache needed): one process runs the
single-device engine in place; several run under torchrun (`python -m torch.distributed.run
--standalone --nproc-per-node S*D benchmarks/gpu_multi.py --worker ...`), exactly the code a
`torchrun -m ebd2n train` job runs. The bubble column is the schedule's theoretical idle share
(S - 1) / (M + S - 1) for M micro-batches in flight; M defaults to all micro-batches of a
replica's step in one schedule run. Prints a markdown table.

    PYTHONPATH=src python benchmarks/gpu_multi.py                       # every GPU of the machine
    PYTHONPATH=src python benchmarks/gpu_multi.py --set runtime.compile=false --steps 3
    PYTHONPATH=src python benchmarks/gpu_multi.py --recipe demo --processes 2 --device cpu   # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ebd2n.config import load_recipe
from ebd2n.parallel import distributed
from ebd2n.parallel.pipeline import bubble_fraction
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import build_engine


def layouts(processes: int) -> list[tuple[int, int]]:
    """Every (S, D) with S x D = processes, data parallel first."""
    return [(processes // d, d) for d in range(processes, 0, -1) if processes % d == 0]


def layout_overrides(recipe_name: str, stages: int, replicas: int, depth: int | None, device: str) -> list[str]:
    """Recipe overrides of one layout; depth None: a replica's whole step in one schedule run."""
    recipe = load_recipe(recipe_name)
    if depth is None:
        sequences = recipe.training.batch_tokens // recipe.model.context_length // replicas
        depth = max(stages, sequences // min(recipe.training.micro_batch_size, sequences))
    return [
        f"parallel.pipeline_stages={stages}",
        f"parallel.data_parallel={replicas}",
        f"parallel.pipeline_depth={depth}",
        f"runtime.device={device}",
    ]


def worker(args: argparse.Namespace) -> None:
    """One rank (or the only process): warm up, time `steps` steps, rank 0 appends a JSON record to --out."""
    recipe = load_recipe(args.recipe, [*args.overrides, *args.layout_overrides])
    budget = budget_of(recipe)
    if recipe.runtime.cpu_threads:  # as the trainer does
        torch.set_num_threads(recipe.runtime.cpu_threads)
    context = distributed.init(recipe)
    torch.manual_seed(0)
    engine = build_engine(recipe, budget, context.device, context)
    generator = torch.Generator().manual_seed(1)
    shape = (budget.sequences_per_step, recipe.model.context_length + 1)
    sequences = torch.randint(0, recipe.model.vocab_size, shape, generator=generator).to(context.device)
    for _ in range(args.warmup):
        engine.train_step(sequences, lr=1e-4)
    _sync(context)
    if context.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(context.device)
    started = time.perf_counter()
    for _ in range(args.steps):
        result = engine.train_step(sequences, lr=1e-4)  # ends in a job-wide all-reduce: ranks stay in step
    _sync(context)
    elapsed = time.perf_counter() - started
    memory = distributed.gather_memory(context)
    if context.is_main:
        stages, depth = recipe.parallel.pipeline_stages, recipe.parallel.pipeline_depth
        record = {
            "layout": f"{stages} x {recipe.parallel.data_parallel}",
            "schedule": recipe.parallel.schedule if stages > 1 else "-",
            "depth": depth if stages > 1 else "-",
            "bubble": bubble_fraction(stages, depth),
            "tokens_per_s": args.steps * budget.tokens_per_step / elapsed,
            "step_s": elapsed / args.steps,
            "loss": result.loss,
            "peak_gb": {name: m["peak"] / 1e9 for name, m in memory.items()},
            "max_stage_over_mean": context.placement.max_over_mean(),
        }
        with open(args.out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    if context.world_size > 1:
        context.close()


def _sync(context: distributed.Context) -> None:
    if context.device.type == "cuda":
        torch.cuda.synchronize(context.device)
    if context.world_size > 1:
        dist.barrier()


def launch(args: argparse.Namespace, stages: int, replicas: int, out: Path) -> None:
    """Run one layout: in place on one process, else under torchrun."""
    extra = layout_overrides(args.recipe, stages, replicas, args.depth, args.device)
    if stages * replicas == 1:
        args.layout_overrides, args.out = extra, out
        worker(args)
        return
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(stages * replicas),
        str(Path(__file__).resolve()),
        "--worker",
        "--recipe",
        args.recipe,
        "--out",
        str(out),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        *[f"--set={o}" for o in args.overrides],
        *[f"--layout-set={o}" for o in extra],
    ]
    finished = subprocess.run(
        command, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True
    )
    if finished.returncode:
        print(f"layout {stages} x {replicas} failed:\n{finished.stderr[-3000:]}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="254m", help="recipe preset or file")
    parser.add_argument(
        "--processes",
        type=int,
        default=max(1, torch.cuda.device_count()),
        help="devices to use (default: every GPU; one CPU process without a GPU)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda or cpu")
    parser.add_argument("--steps", type=int, default=5, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (torch.compile happens here)")
    parser.add_argument("--depth", type=int, default=None, help="pipeline_depth M (default: one schedule run per step)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recipe override for every layout (repeatable)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout-set", dest="layout_overrides", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    recipe = load_recipe(args.recipe, args.overrides)
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    print(
        f"{args.recipe}: {recipe.model.layers} layers, width {recipe.model.width}, "
        f"batch {recipe.training.batch_tokens:,} tokens, micro-batch {recipe.training.micro_batch_size}; "
        f"{args.processes} x {where}; torch {torch.__version__}\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "records.jsonl"
        for stages, replicas in layouts(args.processes):
            launch(args, stages, replicas, out)
        records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    print(
        "| S x D | schedule | M | bubble (theory) | stage max/mean | tokens/s | step (s) | peak GB per device | loss |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    for r in records:
        peaks = ", ".join(f"{name} {gb:.1f}" for name, gb in r["peak_gb"].items())
        print(
            f"| {r['layout']} | {r['schedule']} | {r['depth']} | {r['bubble']:.3f} | {r['max_stage_over_mean']:.3f} "
            f"| {r['tokens_per_s']:,.0f} | {r['step_s']:.3f} | {peaks} | {r['loss']:.4f} |"
        )


if __name__ == "__main__":
    main()
