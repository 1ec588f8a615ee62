"""Blocks of a cache's token streams, and the orders in which training and validation visit them.

Everything here is a pure function of its arguments: the training order depends only on
(runtime seed, position in the stream of blocks), so a run resumes at any epoch boundary by
asking for the next positions; the validation subset depends only on its seed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ebd2n.data.cache import Cache
from ebd2n.errors import UserError
from ebd2n.targets import split_block


class TokenStream:
    """One split's shards seen as a single token array, memory-mapped (never loaded whole)."""

    def __init__(self, cache: Cache, split: str) -> None:
        shards = cache.shards(split)
        self._maps = [np.memmap(path, dtype=cache.dtype, mode="r", shape=(tokens,)) for path, tokens in shards]
        self._starts = np.cumsum([0] + [tokens for _, tokens in shards])
        self.split = split

    def __len__(self) -> int:
        return int(self._starts[-1])

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) as int64, across shard boundaries."""
        out = np.empty(stop - start, dtype=np.int64)
        shard = int(np.searchsorted(self._starts, start, side="right")) - 1
        position = start
        while position < stop:
            offset = position - self._starts[shard]
            piece = self._maps[shard][offset : offset + stop - position]
            out[position - start : position - start + len(piece)] = piece
            position += len(piece)
            shard += 1
        return out


class BlockReader:
    """Non-overlapping blocks of block_len = context_length + 1 tokens of one split's stream."""

    def __init__(self, cache: Cache, split: str, block_len: int) -> None:
        padded = cache.padded_block_len
        if padded is not None and padded != block_len:
            raise UserError(
                f"model.context_length {block_len - 1}: the supervised cache {cache.directory} pads each record to "
                f"{padded} tokens (model.context_length {padded - 1}); prepare a cache for this context length "
                "in a new data.cache_dir"
            )
        self._stream = TokenStream(cache, split)
        self.block_len = block_len
        self.num_blocks = len(self._stream) // block_len
        if self.num_blocks == 0:
            raise UserError(
                f"model.context_length {block_len - 1}: the {split} split of cache {cache.directory} has only "
                f"{len(self._stream)} tokens, fewer than one block of context_length + 1; lower model.context_length"
            )

    def read(self, indices: np.ndarray) -> torch.Tensor:
        """Blocks `indices` as a LongTensor (n, block_len)."""
        n = self.block_len
        return torch.from_numpy(np.stack([self._stream.read(int(i) * n, int(i) * n + n) for i in indices]))


def train_block_indices(num_blocks: int, seed: int, start: int, count: int) -> np.ndarray:
    """Positions start .. start+count-1 of the endless training order.

    The order concatenates passes over the blocks; pass p is the permutation drawn by
    np.random.default_rng([seed, p]), so any position is computable without the ones before it.
    """
    out = np.empty(count, dtype=np.int64)
    filled = 0
    while filled < count:
        epoch, offset = divmod(start + filled, num_blocks)
        take = min(num_blocks - offset, count - filled)
        permutation = np.random.default_rng([seed, epoch]).permutation(num_blocks)
        out[filled : filled + take] = permutation[offset : offset + take]
        filled += take
    return out


def eval_subset_indices(num_blocks: int, count: int, seed: int = 12345) -> np.ndarray:
    """The fixed validation subset: min(count, num_blocks) distinct blocks chosen by `seed`, sorted."""
    chosen = np.random.default_rng(seed).choice(num_blocks, size=min(count, num_blocks), replace=False)
    return np.sort(chosen).astype(np.int64)


def iter_full_validation(
    cache: Cache, context_length: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) LongTensors (B, context_length) covering every validation target exactly once.

    Window i holds inputs tokens[i*c : i*c+c] and targets tokens[i*c+1 : i*c+c+1], decoded by
    split_block (masked tokens of supervised caches are IGNORE_INDEX targets); positions past
    the end of the stream (only in the last window) carry the EOS id as input and IGNORE_INDEX as
    target, so the non-ignored targets number cache.validation_targets. A padded supervised cache
    is read block by block instead (one record each, never a window across two).
    """
    if cache.padded_block_len is not None:
        reader = BlockReader(cache, "validation", context_length + 1)
        for first in range(0, reader.num_blocks, batch_size):
            yield split_block(reader.read(np.arange(first, min(first + batch_size, reader.num_blocks))))
        return
    stream = TokenStream(cache, "validation")
    c = context_length
    windows = -(-(len(stream) - 1) // c)
    for first in range(0, windows, batch_size):
        rows = min(batch_size, windows - first)
        start = first * c
        real = stream.read(start, min(start + rows * c + 1, len(stream)))
        buffer = np.full(rows * c + 1, ~cache.eos_id, dtype=np.int64)  # masked EOS past the end
        buffer[: len(real)] = real
        yield split_block(torch.from_numpy(buffer).unfold(0, c + 1, c))
