"""Cache building versus bare `tokenizers` encoding, on the default embedded corpus (CPU).

The corpus is the default synthetic one (4 MB train, 0.4 MB validation, shuffled as prepare
shuffles it) and the tokenizer is trained on it once, at the demo recipe's vocabulary. Timed:
`build_cache` (tokenization with EOS, uint16 sharding, SHA-256, fsync: everything after the
tokenizer exists) against `Tokenizer.encode_batch` (and `encode_batch_fast`) over the same
documents in the same batches, each discarding its output. After one warm-up build, runs
alternate; medians are reported.

    PYTHONPATH=src python benchmarks/cache_throughput.py [--repeats 3] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ebd2n.config import DataConfig, load_recipe
from ebd2n.data import SPLITS, build_cache, open_source, train_bpe

GOAL = 0.8
"""Cache-building throughput wanted, as a share of bare encode_batch throughput."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=DataConfig().tokenize_batch_size)
    args = parser.parse_args()

    data = DataConfig(tokenize_batch_size=args.batch_size)
    source = open_source(data)
    documents = {split: list(source.documents(split)) for split in SPLITS}
    everything = [document for split in SPLITS for document in documents[split]]
    megabytes = sum(len(document.encode("utf-8")) for document in everything) / 1e6
    tokenizer = train_bpe(documents["train"], load_recipe("demo").model.vocab_size)
    batches = [everything[i : i + args.batch_size] for i in range(0, len(everything), args.batch_size)]

    def bare(method: str) -> Callable[[], Any]:
        encode = getattr(tokenizer, method)

        def step() -> None:
            for batch in batches:
                encode(batch, add_special_tokens=False)

        return step

    def cache() -> int:
        with tempfile.TemporaryDirectory() as directory:
            splits = build_cache(Path(directory), documents, tokenizer, data)["splits"]
        return sum(entry["tokens"] for entry in splits.values())

    tokens = cache()  # warm-up, and the token count
    timings: dict[str, list[float]] = {"encode_batch": [], "encode_batch_fast": [], "build_cache": []}
    steps = {"encode_batch": bare("encode_batch"), "encode_batch_fast": bare("encode_batch_fast"), "build_cache": cache}
    for _ in range(args.repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            timings[name].append(time.perf_counter() - start)

    print(
        f"{megabytes:.2f} MB of text, {len(everything)} documents, {tokens:,} tokens (EOS included), "
        f"batches of {args.batch_size}"
    )
    print(f"{'path':<20}{'median s':>10}{'MB/s':>10}{'Mtok/s':>10}")
    medians = {name: statistics.median(values) for name, values in timings.items()}
    for name, seconds in medians.items():
        print(f"{name:<20}{seconds:>10.3f}{megabytes / seconds:>10.2f}{tokens / seconds / 1e6:>10.3f}")
    for baseline in ("encode_batch", "encode_batch_fast"):
        ratio = medians[baseline] / medians["build_cache"]
        print(f"build_cache / {baseline} throughput: {ratio:.2f} (goal >= {GOAL})")


if __name__ == "__main__":
    main()
