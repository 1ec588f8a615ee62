"""Preparing a cache: build the one a recipe asks for, once, or check that the one there serves it.

A cache is built in a temporary directory beside cache_dir and renamed into place under a file
lock (`<cache_dir>.lock`, removed again when the build ends): a cache_dir is missing, empty, or
holds a complete cache, and an existing cache is never modified (a changed request is an error,
not a rebuild).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text, fsync_dir, rename_new
from ebd2n.config.schema import DataConfig
from ebd2n.data import supervised
from ebd2n.data.cache import FORMAT_VERSION, MANIFEST, Cache, cache_absent, open_cache
from ebd2n.data.cache_build import build_cache
from ebd2n.data.cache_verify import check_vocab_size, record_verified
from ebd2n.data.sources import SPLITS, Item, open_source
from ebd2n.data.tokenizer import eos_id, obtain_tokenizer
from ebd2n.errors import UserError

_CONTENT_NEUTRAL = ("cache_dir", "tokenize_batch_size", "dataset_copy", "tokenizer_copy")
"""DataConfig fields that do not change a cache's bytes (batching only changes speed; a local copy
holds the same pinned revision as the Hub)."""

log = logging.getLogger(__name__)


def prepare_cache(data: DataConfig, vocab_size: int, progress: bool = True, context_length: int | None = None) -> Cache:
    """Build the cache `data` asks for at data.cache_dir, or return the one already there.

    vocab_size is the recipe's model.vocab_size: the size a trained tokenizer gets, and a bound
    on a given one; context_length (model.context_length) sizes the blocks of padded supervised
    records. Concurrent callers wait for one builder and reuse its cache.
    """
    block_len = _padded_block_len(data, context_length)
    directory = Path(data.cache_dir)
    if cache_absent(directory):
        made = [parent for parent in directory.parents if not parent.exists()]  # deepest first
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            with _build_lock(directory):
                if cache_absent(directory):
                    _build(directory, data, vocab_size, progress, block_len)
                    log.info("built cache %s", directory)
        except BaseException:
            for parent in made:  # a failed build leaves no folders behind either (only empty ones go)
                with contextlib.suppress(OSError):
                    parent.rmdir()
            raise
    cache = open_cache(directory)
    _check_request(cache, data, vocab_size, block_len)
    log.info("cache %s identity %s", directory, cache.identity)
    return cache


def _build(directory: Path, data: DataConfig, vocab_size: int, progress: bool, block_len: int | None) -> None:
    """Read the source, obtain the tokenizer, build in a staging directory, rename into place."""
    source = open_source(data)
    tokenizer, tokenizer_provenance = obtain_tokenizer(
        data.tokenizer,
        data.tokenizer_revision,
        lambda: map(_text, source.documents("train")),
        vocab_size,
        progress,
        copy=data.tokenizer_copy,
    )
    records = None
    if data.supervised is not None:
        config = supervised.tokenizer_config(data.tokenizer, data.tokenizer_revision, data.tokenizer_copy)
        records = functools.partial(
            supervised.RecordEncoder, tokenizer, data.supervised, config, eos_id(tokenizer), block_len
        )
        records()  # a missing chat template is an error before any work
    if tokenizer.get_vocab_size() > vocab_size:
        raise UserError(
            f"model.vocab_size {vocab_size} is smaller than the vocabulary of data.tokenizer {data.tokenizer} "
            f"({tokenizer.get_vocab_size()}); raise model.vocab_size"
        )
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=_staging_prefix(directory)))
    try:
        documents = {split: source.documents(split) for split in SPLITS}
        parts = build_cache(staging, documents, tokenizer, data, progress, records)
        parts["tokenizer"] |= tokenizer_provenance
        manifest = {
            "format": FORMAT_VERSION,
            "request": _request(data, vocab_size, block_len),
            "source": source.provenance,
            "seeds": {
                "shuffle": data.shuffle_seed,
                "synthetic": data.synthetic_seed if data.source == "synthetic" else None,
            },
            **parts,
        }
        atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        record_verified(Cache(staging, manifest))
        fsync_dir(staging)
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()  # an empty folder made for it (Snakemake makes an output's parents)
        rename_new(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(directory.parent)


def _text(item: Item) -> str:
    """What a trained tokenizer learns from: a document, or a record in the plain format."""
    return item if isinstance(item, str) else f"{item[0]}\n{item[1]}"


def _padded_block_len(data: DataConfig, context_length: int | None) -> int | None:
    """Tokens per block of padded supervised records (model.context_length + 1); None otherwise."""
    if data.supervised is None or data.supervised.packing:
        return None
    if context_length is None:
        raise ValueError("padded supervised records need the model's context_length")
    return context_length + 1


def _request(data: DataConfig, vocab_size: int, block_len: int | None) -> dict[str, Any]:
    """The settings that decide a cache's bytes, by recipe key (model.vocab_size only when trained,
    data.supervised only when set, model.context_length only for padded records)."""
    settings = data.model_dump(mode="json")
    request = {f"data.{key}": value for key, value in settings.items() if key not in _CONTENT_NEUTRAL}
    if data.supervised is None:
        del request["data.supervised"]  # a key added later: earlier caches keep their identity
    if data.tokenizer is None:
        request["model.vocab_size"] = vocab_size
    if block_len is not None:
        request["model.context_length"] = block_len - 1
    return request


def _check_request(cache: Cache, data: DataConfig, vocab_size: int, block_len: int | None) -> None:
    """An existing cache serves a recipe only if it was prepared from the same settings."""
    check_vocab_size(cache, vocab_size)
    recorded = cache.manifest["request"]
    for key, value in _request(data, vocab_size, block_len).items():
        if recorded.get(key) != value:
            raise UserError(
                f"{key}: the cache at data.cache_dir {cache.directory} was prepared with {recorded.get(key)!r}, "
                f"the recipe asks for {value!r}; set data.cache_dir to a new directory "
                "(caches are never rebuilt in place)"
            )


@contextlib.contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    """Hold `<cache_dir>.lock` so one process builds while the others wait; leftovers of killed builds go.

    The holder removes the lock file when done (built or failed). A waiter that then gets the lock
    of the removed file tries again on the path's current file, so two builders never overlap.
    """
    lock = directory.with_name(directory.name + ".lock")
    while True:
        handle = open(lock, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    try:
        for stale in directory.parent.glob(_staging_prefix(directory) + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        yield
    finally:
        lock.unlink(missing_ok=True)
        handle.close()


def _staging_prefix(directory: Path) -> str:
    return f".{directory.name}.building-"
