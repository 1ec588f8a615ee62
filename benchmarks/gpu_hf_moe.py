"""Qwen1.5-MoE-A2.7B fine-tune stages on one GPU: the seed dashboard's run, stage by stage.

The real model's shape (resources/models/qwen1.5-moe-a2.7b/config.json, or --config), random
weights: the model is built on the meta device and only one pipeline stage's units are
materialised on the device at a time (as each GPU of a pipeline holds them), with the seed's
recipe (first --freeze layers frozen, rank --rank LoRA on the others' attention and shared expert,
norms full rank, bf16 autocast, micro-batches of --micro-batch records of --context tokens).
For every stage: median time of a forward and backward of one micro-batch plus an AdamW step of
its trainable parameters, and the peak memory. From the stage times: the GPipe step of
--depth micro-batches over the stages, (depth + stages - 1) x the slowest stage, and its
batches/s, against the seed's 1.87 batches/s and 47.8 GB on the most loaded GPU.

    python benchmarks/gpu_hf_moe.py                       # on a GPU (needs transformers, safetensors)
    python benchmarks/gpu_hf_moe.py --shrink --steps 2    # a shrunken shape on the CPU: the script runs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ebd2n.config import LoraConfig  # noqa: E402
from ebd2n.config.hf import architecture  # noqa: E402
from ebd2n.model.hf import HFStageModule, skeleton  # noqa: E402
from ebd2n.model.hf_units import hf_units  # noqa: E402
from ebd2n.model.lora import apply_lora_  # noqa: E402
from ebd2n.parallel.placement import plan_placement  # noqa: E402

REFERENCE = ROOT / "resources/models/qwen1.5-moe-a2.7b/config.json"
SEED = {"batches_per_s": 1.87, "peak_gb": 47.8}
SHRUNK = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REFERENCE)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--freeze", type=int, default=12)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--shrink", action="store_true", help="a tiny shape on the CPU (checks the script)")
    args = parser.parse_args()
    config = json.loads(args.config.read_text())
    if args.shrink:
        config.update(SHRUNK, bos_token_id=0, eos_token_id=0)
        args.freeze, args.context, args.micro_batch = 2, 64, 2
    device = torch.device("cuda" if torch.cuda.is_available() and not args.shrink else "cpu")
    arch = architecture(config)
    units = hf_units(arch, args.context)
    placement = plan_placement(units, args.stages, tied_head=arch.tied)
    print(
        f"{config.get('model_type')} {sum(u.parameters for u in units):,} parameters, {len(units)} units "
        f"({sum(u.block is not None for u in units)} in decoder layers) over {args.stages} stages on {device}; "
        f"freeze {args.freeze}, LoRA rank {args.rank}, micro-batch {args.micro_batch} x {args.context} tokens"
    )
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "config.json").write_text(json.dumps(config))
        rows = [
            measure(Path(directory), units, names, stage, args, device) for stage, names in enumerate(placement.stages)
        ]
    print(f"{'stage':>5} {'units':>24} {'parameters':>15} {'trainable':>11} {'ms/micro-batch':>15} {'peak GB':>8}")
    for stage, row in enumerate(rows):
        print(
            f"{stage:>5} {row['span']:>24} {row['parameters']:>15,} {row['trainable']:>11,} "
            f"{1000 * row['seconds']:>15.1f} {row['peak_gb']:>8.1f}"
        )
    step = (args.depth + args.stages - 1) * max(row["seconds"] for row in rows)
    peak = max(row["peak_gb"] for row in rows)
    print(
        f"GPipe step of {args.depth} micro-batches over {args.stages} stages: {step:.3f} s -> {1 / step:.2f} batches/s "
        f"({1 / step / SEED['batches_per_s']:.2f} x the seed's {SEED['batches_per_s']}); most loaded stage "
        f"{peak:.1f} GB ({peak / SEED['peak_gb']:.2f} x the seed's {SEED['peak_gb']} GB)"
    )


def measure(directory: Path, units: list, names: list[str], stage: int, args, device: torch.device) -> dict:
    """One stage's units materialised with random weights on `device`; its step time and peak memory."""
    chosen = [u for u in units if u.name in set(names)]
    prefixes = tuple(p for u in chosen for p in u.param_prefixes)
    whole = skeleton(directory)
    for name, parameter in list(whole.named_parameters()):
        if name.startswith(prefixes):
            owner, _, leaf = name.rpartition(".")
            value = torch.ones if parameter.dim() == 1 and "norm" in name else torch.empty
            tensor = value(parameter.shape, device=device)
            if value is torch.empty:
                tensor.normal_(0.0, 0.02)
            whole.get_submodule(owner)._parameters[leaf] = torch.nn.Parameter(tensor)
    whole.reset_rotary()
    apply_lora_(whole, LoraConfig(rank=args.rank, alpha=2.0 * args.rank, train_norms=True), first_block=args.freeze)
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    )
    module = HFStageModule(whole, chosen, autocast).to(device)
    del whole
    trainable = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=device.type == "cuda") if trainable else None
    first, last = names[0] == "embedding", names[-1] == "head"
    generator = torch.Generator(device=device).manual_seed(stage)
    shape = (args.micro_batch, args.context)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for step in range(args.warmup + args.steps):
        if first:
            x = torch.randint(0, module.model.embed_tokens.num_embeddings, shape, device=device, generator=generator)
        else:
            x = torch.randn(*shape, module.model.rotary_emb.config.hidden_size, device=device, requires_grad=True)
        started = _now(device)
        out = module(x)
        if last:
            targets = torch.randint(0, out.shape[-1], shape, device=device, generator=generator)
            F.cross_entropy(out.float().flatten(0, 1), targets.flatten()).backward()
        else:
            out.backward(torch.randn_like(out))
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if step >= args.warmup:
            times.append(_now(device) - started)
    peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else float("nan")
    row = {
        "span": f"{names[0]}..{names[-1]}",
        "parameters": sum(p.numel() for p in module.parameters()),
        "trainable": sum(p.numel() for p in trainable),
        "seconds": statistics.median(times),
        "peak_gb": peak,
    }
    del module, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


if __name__ == "__main__":
    main()
