"""GPU throughput of the training engines: synchronous variants, packed-K and full validation.

Runs ebd2n's own engines (the code campaigns run) on generated tokens, so no data cache is
needed. Every engine is built as the trainer builds it (`configure_torch`, `build_engine`, BF16
autocast, fused AdamW on CUDA) with runtime.compile=false; the variant then compiles the model
that `train_step` calls (`engine.forward`) itself, since the recipe has no compile mode:
`default` is exactly what runtime.compile=true runs. Sections (--sections, in the order given):

- sync: one row per variant MODE/MICRO-BATCH (--variants). MODE is eager or a torch.compile mode
  (default, reduce-overhead: CUDA graphs, max-autotune, max-autotune-no-cudagraphs). Each variant
  first trains --loss-steps steps from one initialisation on a learnable token stream with the
  recipe's LR schedule, and its losses are compared with the reference variant's (the first one,
  or the first sync record of --loss-reference): within BF16 tolerance when the largest relative
  difference is at most LOSS_RTOL. Then tokens/s is the median of --steps timed steps on random
  tokens after --warmup more. Reference: 1.64 M tokens/s on one GH200 (compiled, micro-batch 32).
- packed: one packed-K step against K sequential single-model steps on the same tokens (the K
  sequential models share one shape, so one model timed K times), optimizer step and gossip
  included, per --packed-modes: eager against eager, compiled against compiled. Published on one
  GH200: eager 2.2x (K=4) and 3.9x (K=8), compiled 1.51x and 2.51x.
- validation: `evaluate_sequences`, the loop `ebd2n validate` runs (eager model, BF16), over
  --validation-batches batches of evaluation.batch_size random blocks held in host memory as the
  cache reader yields them, against the training tokens/s of the first sync variant of this run.

Prints one markdown row per measurement, with the previous figure, the published reference and
the goal of issue #19 beside it (benchmarks/gpu_table.py); --json FILE also appends one JSON
record per row. benchmarks/gpu_check.sh runs the GPU tests and these sections on a GPU machine.

    python benchmarks/gpu_train.py                      # on a GPU machine: compiled sync, packed eager
    python benchmarks/gpu_train.py --variants default/32 reduce-overhead/32 max-autotune/32 default/16 \\
        --sections sync packed validation --packed-modes eager compiled --loss-steps 50
    python benchmarks/gpu_train.py --preset demo --device cpu --variants eager/16 default/16 \\
        --compile-backend aot_eager --steps 2 --warmup 1 --loss-steps 3 --packed 2   # smoke test
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
import time

import torch
from gpu_table import HEADER, record_row  # benchmarks/, the script's own directory

from ebd2n.config import count_parameters, load_recipe
from ebd2n.model import GPT
from ebd2n.train.budget import budget_of
from ebd2n.train.engine import build_engine, configure_torch
from ebd2n.train.schedule import learning_rate
from ebd2n.train.step import bf16_autocast
from ebd2n.train.validation import block_batches, evaluate_sequences

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "GH200": 989e12, "A100": 312e12}
MODES = ("eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
LOSS_RTOL = 0.02
"""Largest relative loss difference to the reference over the loss steps that counts as the same
training under BF16 (about five BF16 rounding units, 2^-8 each)."""
STREAM_VOCAB = 1024
"""The learnable stream uses the first STREAM_VOCAB token ids (or the whole vocabulary if smaller)."""


def flops_per_token(recipe) -> float:
    """Training FLOPs per token: 6 N plus attention's 12 L d T (PaLM appendix B)."""
    m = recipe.model
    return 6 * count_parameters(m) + 12 * m.layers * m.width * m.context_length


def learnable_stream(vocab: int, steps: int, shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """(steps, S, L) token ids: each sequence a random start plus running sums of steps drawn
    from {1, 2, 3, 5}, modulo min(vocab, STREAM_VOCAB). A model learns it (the best loss is
    ln 4 = 1.39 nats), so a variant that trains differently shows in its first losses."""
    generator = torch.Generator().manual_seed(seed)
    sequences, length = shape
    start = torch.randint(0, vocab, (steps, sequences, 1), generator=generator)
    increments = torch.tensor([1, 2, 3, 5])[torch.randint(0, 4, (steps, sequences, length - 1), generator=generator)]
    return torch.cat((start, start + increments.cumsum(-1)), dim=-1) % min(vocab, STREAM_VOCAB)


def random_tokens(recipe, budget, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    shape = (budget.sequences_per_step, recipe.model.context_length + 1)
    return torch.randint(0, recipe.model.vocab_size, shape, generator=generator).to(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _compiler():
    """torch._dynamo, imported only when something is compiled (the import takes seconds)."""
    import torch._dynamo

    return torch._dynamo


def make_engine(preset: str, device: torch.device, overrides: list[str], mode: str, backend: str):
    """(recipe, budget, engine): built as the trainer builds it, its forward compiled as `mode` says."""
    recipe = load_recipe(preset, [f"runtime.device={device}", "runtime.amp=true", *overrides, "runtime.compile=false"])
    configure_torch(recipe)
    budget = budget_of(recipe)
    torch.manual_seed(recipe.runtime.seed)
    engine = build_engine(recipe, budget, device)
    if mode != "eager":
        dynamo = _compiler()
        dynamo.reset()  # no compiled code or automatic-dynamic shapes carried over from another engine
        dynamo.utils.counters.clear()
        engine.forward = torch.compile(engine.model, backend=backend, mode=None if mode == "default" else mode)
    return recipe, budget, engine


def graph_breaks(mode: str) -> int | None:
    return None if mode == "eager" else sum(_compiler().utils.counters["graph_break"].values())


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


def loss_curve(engine, recipe, budget, steps: int, device: torch.device) -> tuple[list[float], float]:
    """(losses of `steps` train steps on the learnable stream with the recipe's LR schedule,
    seconds of the first step, compilation included)."""
    stream = learnable_stream(
        recipe.model.vocab_size, steps, (budget.sequences_per_step, recipe.model.context_length + 1)
    )
    losses, first = [], 0.0
    for step in range(steps):
        started = time.perf_counter()
        result = engine.train_step(
            stream[step].to(device, non_blocking=True), learning_rate(step, steps, recipe.optimizer)
        )
        losses.append(result.loss)
        if step == 0:
            first = time.perf_counter() - started
    return losses, first


def compare_losses(losses: list[float], reference: list[float] | None) -> dict:
    """Largest relative difference to the reference losses, and whether it is within LOSS_RTOL."""
    if not reference or not losses:
        return {"max_rel_dloss": None, "loss_ok": None}
    if len(reference) != len(losses):
        raise SystemExit(
            f"--loss-reference has {len(reference)} losses, this run {len(losses)}: use the same --loss-steps"
        )
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))
    return {"max_rel_dloss": worst, "loss_ok": worst <= LOSS_RTOL}


def sync_variant(args, device: torch.device, variant: str, reference: list[float] | None) -> dict:
    mode, micro = variant.split("/")
    _reset_memory(device)
    recipe, budget, engine = make_engine(
        args.preset, device, [f"training.micro_batch_size={micro}"], mode, args.compile_backend
    )
    losses, first_step = loss_curve(engine, recipe, budget, args.loss_steps, device)
    seconds = time_steps(engine, random_tokens(recipe, budget, device), args.steps, args.warmup, device)
    tokens_per_s = budget.tokens_per_step / seconds
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in _device_name(device)), None)
    return {
        "section": "sync",
        "preset": args.preset,
        "variant": variant,
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * flops_per_token(recipe) / peak if peak else None,
        "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "first_step_s": first_step,
        "graph_breaks": graph_breaks(mode),
        "loss_steps": len(losses),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        **compare_losses(losses, reference),
        "losses": losses,
    }


def packed_pair(args, device: torch.device, k: int, mode: str) -> dict:
    """One packed-K step against K sequential single-model steps, both eager or both compiled."""
    compile_mode = "default" if mode == "compiled" else "eager"
    recipe, budget, engine = make_engine(
        args.preset, device, [f"decentralized.num_models={k}"], compile_mode, args.compile_backend
    )
    packed_s = time_steps(engine, random_tokens(recipe, budget, device), args.steps, args.warmup, device)
    breaks = graph_breaks(compile_mode)
    del engine
    _free(device)
    single_tokens = budget.tokens_per_step // k
    recipe, budget, single = make_engine(
        args.preset, device, [f"training.batch_tokens={single_tokens}"], compile_mode, args.compile_backend
    )
    single_s = time_steps(single, random_tokens(recipe, budget, device), args.steps, args.warmup, device)
    return {
        "section": "packed",
        "preset": args.preset,
        "k": k,
        "mode": mode,
        "sequential_ms": k * single_s * 1e3,
        "packed_ms": packed_s * 1e3,
        "speedup": k * single_s / packed_s,
        "graph_breaks": breaks,
    }


def validation(args, device: torch.device, train_tokens_per_s: float | None) -> dict:
    recipe = load_recipe(args.preset, [f"runtime.device={device}", "runtime.amp=true"])
    configure_torch(recipe)
    torch.manual_seed(recipe.runtime.seed)
    model = GPT(recipe.model).to(device)
    size = recipe.evaluation.batch_size
    generator = torch.Generator().manual_seed(2)
    blocks = torch.randint(
        0,
        recipe.model.vocab_size,
        (args.validation_batches * size, recipe.model.context_length + 1),
        generator=generator,
    )
    evaluate_sequences(model, block_batches(blocks[:size], size), device, bf16_autocast(recipe, device))  # warm-up
    _sync(device)
    started = time.perf_counter()
    _, _, targets = evaluate_sequences(model, block_batches(blocks, size), device, bf16_autocast(recipe, device))
    _sync(device)
    tokens_per_s = targets / (time.perf_counter() - started)
    return {
        "section": "validation",
        "preset": args.preset,
        "batch_size": size,
        "tokens_per_s": tokens_per_s,
        "train_tokens_per_s": train_tokens_per_s,
        "ratio": tokens_per_s / train_tokens_per_s if train_tokens_per_s else None,
    }


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _reset_memory(device: torch.device) -> None:
    _free(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Recorder:
    """Prints each record as a markdown row and appends it to --json (flushed: a killed run keeps its rows)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def add(self, record: dict) -> dict:
        if record["section"] != "setup":
            print(record_row(record), flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        return record

    def attempt(self, section: str, what: dict, device: torch.device, measure) -> dict:
        """Run one measurement; a failure (out of memory, a compiler error) becomes a failed row, not the end."""
        try:
            return self.add(measure())
        except Exception as error:  # every failure is reported in the table and the run goes on
            message = (str(error).strip().splitlines() or [""])[0][:300]
            return self.add({"section": section, **what, "error": f"{type(error).__name__}: {message}"})
        finally:
            _free(device)


def reference_losses(path: str, preset: str) -> list[float]:
    """Losses of the first sync record for `preset` in an earlier run's --json file."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("section") == "sync" and record.get("preset") == preset and record.get("losses"):
                return record["losses"]
    raise SystemExit(f"--loss-reference {path}: no sync record with losses for preset {preset}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="20m", help="recipe preset or file")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sections", nargs="+", choices=("sync", "packed", "validation"), default=["sync", "packed"])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["default/32"],
        metavar="MODE/MICRO-BATCH",
        help=f"synchronous variants; MODE one of {', '.join(MODES)}; the first is the loss reference",
    )
    parser.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend (aot_eager: CPU smoke tests)"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--loss-steps", type=int, default=0, help="training steps of the loss comparison (0: none)")
    parser.add_argument(
        "--loss-reference", help="--json file of an earlier run: its first sync variant is the reference"
    )
    parser.add_argument("--packed", type=int, nargs="*", default=[4, 8], help="K values of the packed comparison")
    parser.add_argument("--packed-modes", nargs="+", choices=("eager", "compiled"), default=["eager"])
    parser.add_argument("--validation-batches", type=int, default=8)
    parser.add_argument("--json", help="append one JSON record per row to this file")
    args = parser.parse_args()
    for variant in args.variants:
        mode, _, micro = variant.partition("/")
        if mode not in MODES or not micro.isdigit():
            parser.error(f"--variants {variant}: want MODE/MICRO-BATCH with MODE one of {', '.join(MODES)}")
        if args.compile_backend != "inductor" and mode not in ("eager", "default"):
            parser.error(f"--variants {variant}: compile modes need --compile-backend inductor")
    return args


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    recorder = Recorder(args.json)
    setup = recorder.add(
        {
            "section": "setup",
            "torch": torch.__version__,
            "device": _device_name(device),
            "argv": sys.argv[1:],
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
    )
    print(f"torch {setup['torch']}, device {setup['device']}, {setup['date']}\n\n{HEADER}", flush=True)
    reference = reference_losses(args.loss_reference, args.preset) if args.loss_reference else None
    train_tokens_per_s = None
    for section in args.sections:
        if section == "sync":
            for variant in args.variants:
                record = recorder.attempt(
                    "sync",
                    {"preset": args.preset, "variant": variant},
                    device,
                    lambda v=variant, r=reference: sync_variant(args, device, v, r),
                )
                if "error" not in record:
                    reference = reference or record["losses"]
                    train_tokens_per_s = train_tokens_per_s or record["tokens_per_s"]
        elif section == "packed":
            for mode in args.packed_modes:
                for k in args.packed:
                    recorder.attempt(
                        "packed",
                        {"preset": args.preset, "k": k, "mode": mode},
                        device,
                        lambda k=k, m=mode: packed_pair(args, device, k, m),
                    )
        else:
            recorder.attempt(
                "validation", {"preset": args.preset}, device, lambda t=train_tokens_per_s: validation(args, device, t)
            )


if __name__ == "__main__":
    main()
