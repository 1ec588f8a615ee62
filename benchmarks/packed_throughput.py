"""Packed-K training step versus K sequential single-model steps (demo model shape, CPU by default).

One packed step: forward and backward of PackedGPT on (K, B, T) tokens, per-replica gradient
clipping, one AdamW (foreach) step over the stacked parameters, and one-peer-ring gossip.
The sequential baseline: K GPTs, each doing forward, backward, clip_grad_norm_ and its own AdamW
(foreach) step on the same tokens. Both start from one initialisation; the first step's losses of
the two paths are compared (max |Δloss| column). B is training.micro_batch_size and T is
model.context_length of the recipe. Steps of the two paths are timed alternately (median of
--repeats, after --warmup steps); on the CPU with one thread and with PyTorch's default count.
The speedup is the median over the repeats of sequential / packed time of adjacent steps, so a
machine that slows down for a while (other jobs, a shared cache) slows both sides of a pair.

    PYTHONPATH=src python benchmarks/packed_throughput.py [--repeats 31] [--warmup 3] [--ks 4 8]
    PYTHONPATH=src python benchmarks/packed_throughput.py --device cuda --recipe 20m --micro-batch 8 --amp
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext

import torch

from ebd2n.config import load_recipe
from ebd2n.model import GPT, PackedGPT, clip_per_replica_, mix_

GOALS = {4: 1.25, 8: 1.5}
"""Speedup targets of the packed path over the sequential one."""

Step = Callable[[], torch.Tensor]


def packed_stepper(base: GPT, num_models, idx, targets, hyper, autocast) -> Step:
    lr, weight_decay, grad_clip = hyper
    model = PackedGPT.from_model(base, num_models)
    optimizer = torch.optim.AdamW(model.replica_param_groups(weight_decay), lr=lr, foreach=True)
    params = list(model.parameters())
    counter = iter(range(1 << 30))

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            _, losses = model(idx, targets)
        losses.sum().backward()
        clip_per_replica_([p.grad for p in params], grad_clip)
        optimizer.step()
        mix_(params, "one_peer_ring", next(counter))
        return losses.detach()

    return step


def sequential_stepper(base: GPT, num_models, idx, targets, hyper, autocast) -> Step:
    lr, weight_decay, grad_clip = hyper
    models = [copy.deepcopy(base) for _ in range(num_models)]
    optimizers = [torch.optim.AdamW(m.param_groups(weight_decay), lr=lr, foreach=True) for m in models]

    def step() -> torch.Tensor:
        losses = []
        for k, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                _, loss = model(idx[k], targets[k])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)
            optimizer.step()
            losses.append(loss.detach())
        return torch.stack(losses)

    return step


def time_alternately(steps: list[Step], warmup: int, repeats: int, sync: Callable[[], None]) -> list[list[float]]:
    """Seconds of each call of each step function, timed alternately to share machine noise."""
    for _ in range(warmup):
        for step in steps:
            step()
    samples: list[list[float]] = [[] for _ in steps]
    for _ in range(repeats):
        for step, times in zip(steps, samples, strict=True):
            sync()
            start = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31, help="timed steps per path (median reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per path first")
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8], help="numbers of replicas K")
    parser.add_argument("--recipe", default="demo", help="recipe preset or file giving the model shape")
    parser.add_argument("--micro-batch", type=int, default=None, help="sequences per replica (default: the recipe's)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--amp", action="store_true", help="BF16 autocast (CUDA)")
    args = parser.parse_args()

    recipe = load_recipe(args.recipe)
    cfg = recipe.model
    B, T = args.micro_batch or recipe.training.micro_batch_size, cfg.context_length
    opt = recipe.optimizer
    hyper = (opt.lr, opt.weight_decay, opt.grad_clip)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if args.amp else nullcontext()

    default_threads = torch.get_num_threads()
    thread_counts = [None] if cuda else ([1] if default_threads == 1 else [1, default_threads])
    where = torch.cuda.get_device_name(device) if cuda else "CPU"
    print(
        f"{args.recipe} model: {cfg.layers} layers, width {cfg.width}, vocab {cfg.vocab_size}; per replica {B} x {T}"
        f" tokens; {where}{', bf16 autocast' if args.amp else ''}; torch {torch.__version__}\n"
    )
    print(
        "| threads | K | sequential step (ms) | packed step (ms) | speedup (median of pairs) | goal "
        "| max abs Δloss, step 1 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for threads in thread_counts:
        if threads is not None:
            torch.set_num_threads(threads)
        for k in args.ks:
            generator = torch.Generator().manual_seed(k)
            tokens = torch.randint(0, cfg.vocab_size, (k, B, T + 1), generator=generator).to(device)
            idx, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
            torch.manual_seed(0)
            with device:
                base = GPT(cfg)
            sequential = sequential_stepper(base, k, idx, targets, hyper, autocast)
            packed = packed_stepper(base, k, idx, targets, hyper, autocast)
            difference = (sequential() - packed()).abs().max().item()
            seq_times, packed_times = time_alternately([sequential, packed], args.warmup, args.repeats, sync)
            speedup = statistics.median(a / b for a, b in zip(seq_times, packed_times, strict=True))
            t_seq, t_packed = statistics.median(seq_times), statistics.median(packed_times)
            goal = f"{GOALS[k]:.2f}x" if k in GOALS else "-"
            print(
                f"| {threads or '-'} | {k} | {t_seq * 1e3:.1f} | {t_packed * 1e3:.1f} | {speedup:.2f}x"
                f" | {goal} | {difference:.1e} |"
            )
            del sequential, packed, base
            if cuda:
                torch.cuda.empty_cache()
    torch.set_num_threads(default_threads)


if __name__ == "__main__":
    main()
