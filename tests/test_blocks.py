"""Blocks of a cache: reading across shards, training order, validation subset and full validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ebd2n.data import BlockReader, Cache, eval_subset_indices, iter_full_validation, train_block_indices
from ebd2n.errors import UserError
from ebd2n.targets import IGNORE_INDEX


def _stream(cache: Cache, split: str) -> np.ndarray:
    """The split's whole token stream, read straight from the shard files."""
    return np.concatenate([np.fromfile(path, dtype=cache.dtype) for path, _ in cache.shards(split)]).astype(np.int64)


def _validation_pairs(cache: Cache, context_length: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets of full validation at the non-ignored positions, in order."""
    batches = list(iter_full_validation(cache, context_length, batch_size))
    inputs = torch.cat([x.reshape(-1) for x, _ in batches])
    targets = torch.cat([y.reshape(-1) for _, y in batches])
    kept = targets != IGNORE_INDEX
    return inputs[kept].numpy(), targets[kept].numpy()


def test_block_reader_blocks_are_consecutive_pieces_of_the_stream(tiny_cache: Cache) -> None:
    reader = BlockReader(tiny_cache, "train", 65)  # 65 does not divide the 10,000-token shards
    result = reader.read(np.arange(reader.num_blocks)).numpy()
    expected = _stream(tiny_cache, "train")[: reader.num_blocks * 65].reshape(-1, 65)
    np.testing.assert_array_equal(result, expected)


def test_block_reader_num_blocks_drops_the_partial_tail(tiny_cache: Cache) -> None:
    result = BlockReader(tiny_cache, "validation", 65).num_blocks
    assert result == tiny_cache.manifest["splits"]["validation"]["tokens"] // 65


def test_block_reader_read_follows_indices(tiny_cache: Cache) -> None:
    reader = BlockReader(tiny_cache, "train", 65)
    result = reader.read(np.array([5, 2, 5]))
    expected = torch.stack([reader.read(np.array([i]))[0] for i in (5, 2, 5)])
    assert torch.equal(result, expected)


def test_block_reader_returns_long_tensors(tiny_cache: Cache) -> None:
    assert BlockReader(tiny_cache, "train", 65).read(np.array([0])).dtype == torch.int64


def test_block_reader_context_larger_than_split_raises(tiny_cache: Cache) -> None:
    block_len = tiny_cache.manifest["splits"]["validation"]["tokens"] + 1
    with pytest.raises(UserError, match=rf"model\.context_length {block_len - 1}: the validation split .* has only"):
        BlockReader(tiny_cache, "validation", block_len)


@pytest.mark.parametrize("cut", [0, 1, 9, 10, 11, 25, 49])
def test_train_block_indices_resume_at_any_position(cut: int) -> None:
    result = np.concatenate([train_block_indices(10, 42, 0, cut), train_block_indices(10, 42, cut, 50 - cut)])
    np.testing.assert_array_equal(result, train_block_indices(10, 42, 0, 50))


def test_train_block_indices_each_pass_is_a_permutation() -> None:
    result = np.sort(train_block_indices(10, 42, 0, 30).reshape(3, 10), axis=1)
    np.testing.assert_array_equal(result, np.tile(np.arange(10), (3, 1)))


def test_train_block_indices_passes_differ() -> None:
    first, second = train_block_indices(100, 42, 0, 200).reshape(2, 100)
    assert not np.array_equal(first, second)


def test_train_block_indices_depend_on_seed() -> None:
    assert not np.array_equal(train_block_indices(100, 42, 0, 100), train_block_indices(100, 43, 0, 100))


def test_train_block_indices_pass_is_drawn_from_seed_and_pass_number() -> None:
    result = train_block_indices(10, 42, 20, 10)
    np.testing.assert_array_equal(result, np.random.default_rng([42, 2]).permutation(10))


def test_eval_subset_indices_deterministic() -> None:
    np.testing.assert_array_equal(eval_subset_indices(1000, 64), eval_subset_indices(1000, 64))


def test_eval_subset_indices_sorted_and_distinct() -> None:
    result = eval_subset_indices(1000, 64)
    np.testing.assert_array_equal(result, np.unique(result))


def test_eval_subset_indices_capped_at_num_blocks() -> None:
    np.testing.assert_array_equal(eval_subset_indices(10, 1024), np.arange(10))


def test_eval_subset_indices_depend_on_seed() -> None:
    assert not np.array_equal(eval_subset_indices(1000, 64, seed=1), eval_subset_indices(1000, 64))


@pytest.mark.parametrize(("context_length", "batch_size"), [(64, 8), (100, 3), (7, 1000)])
def test_iter_full_validation_counts_every_target_once(tiny_cache: Cache, context_length: int, batch_size: int) -> None:
    result = len(_validation_pairs(tiny_cache, context_length, batch_size)[1])
    assert result == tiny_cache.validation_targets


@pytest.mark.parametrize(("context_length", "batch_size"), [(64, 8), (100, 3)])
def test_iter_full_validation_targets_are_the_stream_after_its_first_token(
    tiny_cache: Cache, context_length: int, batch_size: int
) -> None:
    result = _validation_pairs(tiny_cache, context_length, batch_size)[1]
    np.testing.assert_array_equal(result, _stream(tiny_cache, "validation")[1:])


def test_iter_full_validation_inputs_precede_their_targets(tiny_cache: Cache) -> None:
    result = _validation_pairs(tiny_cache, 64, 8)[0]
    np.testing.assert_array_equal(result, _stream(tiny_cache, "validation")[:-1])


def test_iter_full_validation_batch_shapes(tiny_cache: Cache) -> None:
    shapes = {tuple(inputs.shape) for inputs, _ in iter_full_validation(tiny_cache, 64, 8)}
    windows = -(-tiny_cache.validation_targets // 64)
    assert shapes == {(8, 64), (windows % 8 or 8, 64)}
