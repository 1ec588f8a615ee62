"""GPU throughput of the training engines: tokens/s and MFU, synchronous and packed-K.

Runs ebd2n's own engines (the code campaigns run) on random tokens, so no data cache is
needed. Synchronous: the 20M preset, compiled, BF16 autocast, fused AdamW; reference figure:
1.64 M tokens/s on one GH200 (compiled, micro-batch 32). Packed: one packed-K step versus K
sequential single-model steps on the same tokens (eager, like the published 2.2x at K=4 and
3.9x at K=8 on one GH200), optimizer step and gossip included.

    python benchmarks/gpu_train.py                      # on a GPU machine
    python benchmarks/gpu_train.py --preset demo --device cpu --steps 3 --no-compile   # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ebd2n.config import load_recipe
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import build_engine

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "GH200": 989e12, "A100": 312e12}


def flops_per_token(recipe) -> float:
    """Training FLOPs per token: 6 N plus attention's 12 L d T (PaLM appendix B)."""
    from ebd2n.config import count_parameters

    m = recipe.model
    return 6 * count_parameters(m) + 12 * m.layers * m.width * m.context_length


def time_steps(engine, sequences: torch.Tensor, steps: int, warmup: int, device: torch.device) -> float:
    """Median seconds of one train_step after warm-up (compilation happens in the warm-up)."""
    for _ in range(warmup):
        engine.train_step(sequences, lr=1e-4)
    times = []
    for _ in range(steps):
        _sync(device)
        started = time.perf_counter()
        engine.train_step(sequences, lr=1e-4)
        _sync(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_engine(preset: str, device: torch.device, overrides: list[str]):
    recipe = load_recipe(preset, [f"runtime.device={device}", *overrides])
    budget = budget_of(recipe)
    torch.manual_seed(0)
    engine = build_engine(recipe, budget, device)
    sequences = torch.randint(0, recipe.model.vocab_size, (budget.sequences_per_step, recipe.model.context_length + 1),
                              device=device)
    return recipe, budget, engine, sequences


def synchronous(args, device: torch.device) -> None:
    overrides = [f"runtime.compile={str(not args.no_compile).lower()}", "runtime.amp=true",
                 f"training.micro_batch_size={args.micro_batch}"]
    recipe, budget, engine, sequences = make_engine(args.preset, device, overrides)
    seconds = time_steps(engine, sequences, args.steps, args.warmup, device)
    tps = budget.tokens_per_step / seconds
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
    mfu = f"{tps * flops_per_token(recipe) / peak:.1%}" if peak else "-"
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    print(f"| synchronous {args.preset} | {name} | compile {not args.no_compile} | micro-batch {args.micro_batch} "
          f"| {tps:,.0f} tok/s | MFU {mfu} | peak {memory:.1f} GiB |")


def packed(args, device: torch.device, k: int) -> None:
    common = ["runtime.compile=false", "runtime.amp=true"]
    recipe, budget, engine, sequences = make_engine(args.preset, device, [*common, f"decentralized.num_models={k}"])
    packed_s = time_steps(engine, sequences, args.steps, args.warmup, device)
    del engine
    single_tokens = budget.tokens_per_step // k
    _, _, single, share = make_engine(args.preset, device, [*common, f"training.batch_tokens={single_tokens}"])
    single_s = time_steps(single, share, args.steps, args.warmup, device)
    print(f"| packed-{k} {args.preset} eager | {k} sequential steps {k * single_s * 1e3:.1f} ms | packed step "
          f"{packed_s * 1e3:.1f} ms | speedup {k * single_s / packed_s:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="20m")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--packed", type=int, nargs="*", default=[4, 8], help="K values of the packed comparison")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"torch {torch.__version__}, device {device}")
    synchronous(args, device)
    for k in args.packed:
        packed(args, device, k)


if __name__ == "__main__":
    main()
