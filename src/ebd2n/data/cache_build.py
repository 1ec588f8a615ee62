"""Building a cache's files: the tokenizer and every split tokenized into hashed shards (`build_cache`).

Everything a cache costs once the tokenizer exists, apart from obtaining it, so the throughput
benchmark times exactly this; data.cache_prepare decides what to build and where.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from ebd2n.atomic import atomic_write_text, sha256_file
from ebd2n.config.schema import DataConfig
from ebd2n.data import supervised
from ebd2n.data.cache import TOKENIZER
from ebd2n.data.sources import Item
from ebd2n.data.tokenizer import eos_id


def build_cache(
    directory: Path,
    documents: Mapping[str, Iterable[Item]],
    tokenizer: Tokenizer,
    data: DataConfig,
    progress: bool = False,
    records: Callable[[], supervised.RecordEncoder] | None = None,
) -> dict[str, Any]:
    """Write the tokenizer and every split's shards into `directory`; return their manifest parts.

    Everything a cache costs once the tokenizer exists (tokenization, sharding, hashing, fsync),
    apart from obtaining the tokenizer, so the throughput benchmark measures exactly this.
    `records` makes the encoder of each split of supervised records (None: documents).
    """
    vocab = tokenizer.get_vocab_size()
    eos = eos_id(tokenizer)
    dtype = supervised.DTYPE if records else np.dtype("<u2" if vocab <= 1 << 16 else "<u4")
    tokenizer_file = directory / TOKENIZER
    atomic_write_text(tokenizer_file, tokenizer.to_str())
    limits = {"train": data.prepare_train_tokens, "validation": data.prepare_validation_tokens}
    splits, encoder = {}, None
    for split in documents:
        encoder = records() if records else functools.partial(_encode, tokenizer, eos=eos, dtype=dtype)
        block_len = encoder.block_len if records else None
        splits[split] = _write_split(
            directory, split, documents[split], encoder, dtype, data, limits[split], progress, block_len
        )
        if records:
            splits[split] |= encoder.cut_counts(splits[split]["documents"])
    parts = {
        "tokenizer": {
            "file": TOKENIZER,
            "sha256": sha256_file(tokenizer_file),
            "vocab_size": vocab,
            "eos_id": eos,
            "eos_token": tokenizer.id_to_token(eos),
        },
        "dtype": dtype.name,
        "splits": splits,
    }
    if records:
        parts["supervised"] = encoder.provenance()
        splits["validation"]["targets"] = _counted_targets(directory, splits["validation"], encoder.block_len)
    else:
        splits["validation"]["targets"] = splits["validation"]["tokens"] - 1
    return parts


def _counted_targets(directory: Path, split: dict[str, Any], block_len: int | None) -> int:
    """Targets that carry loss in full validation: after the first token of the stream, or of each
    whole block of a padded cache."""
    stream = np.concatenate(
        [np.fromfile(directory / shard["file"], dtype=supervised.DTYPE) for shard in split["shards"]]
    )
    if block_len is None:
        return int((stream[1:] >= 0).sum())
    blocks = stream[: len(stream) // block_len * block_len].reshape(-1, block_len)
    return int((blocks[:, 1:] >= 0).sum())


def _write_split(
    directory: Path,
    split: str,
    documents: Iterable[Item],
    encode: Callable[[list], tuple[np.ndarray, np.ndarray]],
    dtype: np.dtype,
    data: DataConfig,
    limit: int | None,
    progress: bool,
    block_len: int | None = None,
) -> dict[str, Any]:
    """Tokenize documents (or records) in batches into shards, stopping at `limit` tokens; `encode`
    gives a batch's tokens and where each item ends. With `block_len` (padded records, one per
    block) the stop falls on a whole block: a cut record would be counted but never read."""
    writer = _ShardWriter(directory, split, dtype, data.shard_tokens)
    count = 0
    with tqdm(total=limit, desc=f"tokenize {split}", unit="tok", unit_scale=True, disable=not progress) as bar:
        for batch in _batches(documents, data.tokenize_batch_size):
            tokens, ends = encode(batch)
            if limit is not None and writer.tokens + len(tokens) >= limit:
                keep = limit - writer.tokens
                if block_len is not None:
                    keep -= keep % block_len
                    count += keep // block_len
                else:
                    count += int(np.searchsorted(ends, keep)) + 1
                writer.write(tokens[:keep])
                bar.update(keep)
                break
            writer.write(tokens)
            count += len(batch)
            bar.update(len(tokens))
    return {"documents": count, "tokens": writer.tokens, "shards": writer.close()}


def _encode(tokenizer: Tokenizer, batch: list[str], eos: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The batch's tokens with EOS after each document, and where each document ends."""
    flat: list[int] = []
    ends: list[int] = []
    for encoding in tokenizer.encode_batch_fast(batch, add_special_tokens=False):  # offsets not needed
        flat += encoding.ids
        flat.append(eos)
        ends.append(len(flat))
    return np.array(flat, dtype=dtype), np.array(ends)


class _ShardWriter:
    """Cuts one token stream into `<split>-NNNNN.bin` files of at most shard_tokens tokens, hashing as it writes."""

    def __init__(self, directory: Path, split: str, dtype: np.dtype, shard_tokens: int) -> None:
        self._directory, self._split, self._shard_tokens = directory, split, shard_tokens
        self.tokens = 0
        self._shards: list[dict[str, Any]] = []
        self._file: BinaryIO | None = None
        self._digest = hashlib.sha256()
        self._count = 0

    def write(self, tokens: np.ndarray) -> None:
        while len(tokens):
            if self._file is None:
                self._file = open(self._directory / self._name(), "wb")
            piece = tokens[: self._shard_tokens - self._count]
            self._file.write(memoryview(piece))
            self._digest.update(memoryview(piece))
            self._count += len(piece)
            self.tokens += len(piece)
            tokens = tokens[len(piece) :]
            if self._count == self._shard_tokens:
                self._close_shard()

    def close(self) -> list[dict[str, Any]]:
        """Finish the last shard; return the shards' manifest entries."""
        if self._file is not None:
            self._close_shard()
        return self._shards

    def _name(self) -> str:
        return f"{self._split}-{len(self._shards):05d}.bin"

    def _close_shard(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._shards.append({"file": self._name(), "tokens": self._count, "sha256": self._digest.hexdigest()})
        self._file, self._digest, self._count = None, hashlib.sha256(), 0


def _batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
