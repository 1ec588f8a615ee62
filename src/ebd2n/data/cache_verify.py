"""Verifying a cache before use: its files against the SHA-256 its manifest records, its vocabulary against the model.

Training and validation open a cache through `open_verified_cache`. `.verified.json` in the cache
directory remembers what was checked, keyed by each file's whole identity (`ebd2n.fileidentity`),
so the next job hashes nothing unless a file changed; it also holds the cache identity at build
time, so an edited manifest.json is refused. `verify_cache` (the audit) hashes again whatever the
audit's own signed memory does not vouch for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ebd2n.atomic import atomic_write_text
from ebd2n.data.cache import MANIFEST, Cache, open_cache
from ebd2n.errors import UserError
from ebd2n.fileidentity import FileIdentity, HashMemory

STAMP = ".verified.json"
"""Files already hashed against the manifest, by their whole identity, and the cache identity they were checked for."""

_CHUNK = 1 << 20

log = logging.getLogger(__name__)


def open_verified_cache(cache_dir: str | os.PathLike, vocab_size: int) -> Cache:
    """The cache training and validation read: complete, unchanged since it was built, and within vocab_size.

    Hashes only the files that changed (size, inode or mtime) since they were last verified, so an
    unchanged cache costs nothing here.
    """
    cache = open_cache(cache_dir)
    check_vocab_size(cache, vocab_size)
    _verify(cache)
    return cache


def verify_cache(cache_dir: str | os.PathLike, memory: HashMemory | None = None, prefix: str = "") -> Cache:
    """Check every file of the cache against its manifest (the audit): the stamp is not believed,
    only the audit's `memory` (None: every file is hashed), which names each file `prefix` + its
    name; what is hashed now is remembered there."""
    cache = open_cache(cache_dir)
    _check_stamp_identity(cache, _read_stamp(cache.directory / STAMP))
    for path, _, digest in cache.recorded_files():
        key = prefix + path.name
        if memory is None or memory.recall(path, key) != digest:
            started, identity = time.time_ns(), FileIdentity.of(path)
            _check_file(cache, path, digest)
            if memory is not None:
                memory.remember(path, key, identity, digest, started)
    return cache


def check_vocab_size(cache: Cache, vocab_size: int) -> None:
    """The model must embed every token id, and a tokenizer trained for the recipe must be trained to its size."""
    if cache.vocab_size > vocab_size:
        raise UserError(
            f"model.vocab_size {vocab_size} is smaller than the vocabulary of the cache {cache.directory} "
            f"({cache.vocab_size}); raise model.vocab_size"
        )
    prepared = cache.manifest["request"].get("model.vocab_size")
    if prepared is not None and prepared != vocab_size:
        raise UserError(
            f"model.vocab_size {vocab_size}: the cache at data.cache_dir {cache.directory} trained its tokenizer to "
            f"{prepared} tokens; set model.vocab_size to {prepared}, or prepare a cache for this size in a new "
            "data.cache_dir"
        )


def record_verified(cache: Cache) -> None:
    """Stamp a cache just built as verified: every file was hashed as it was written."""
    _write_stamp(cache, {path.name: _file_key(path) for path, _, _ in cache.recorded_files()})


def _verify(cache: Cache) -> None:
    """Hash the cache's files against the manifest (those the stamp does not vouch for); record them."""
    stamp = _read_stamp(cache.directory / STAMP)
    _check_stamp_identity(cache, stamp)
    verified = stamp.get("files", {})
    now = {}
    for path, _, digest in cache.recorded_files():
        key = _file_key(path)
        if verified.get(path.name) != key:
            _check_file(cache, path, digest)
        now[path.name] = key
    if now != stamp.get("files") or "identity" not in stamp:
        _write_stamp(cache, now)


def _check_stamp_identity(cache: Cache, stamp: dict[str, Any]) -> None:
    """The manifest still describes the cache its stamp was made for (a cache never changes in place)."""
    if stamp.get("identity", cache.identity) != cache.identity:
        raise UserError(
            f"{cache.directory / MANIFEST}: edited after the cache was built (its identity is no longer the one "
            f"{STAMP} recorded); a cache is never changed in place: prepare a new one"
        )


def _check_file(cache: Cache, path: Path, digest: str) -> None:
    """One file against its recorded SHA-256; a shard's ids must also lie below the vocabulary."""
    hasher = hashlib.sha256()
    largest = -1
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
            if path != cache.tokenizer_path:
                ids = np.frombuffer(chunk, dtype=cache.dtype)
                if ids.dtype.kind == "i":  # supervised: ~id for a token without loss
                    ids = np.where(ids < 0, ~ids, ids)
                largest = max(largest, int(ids.max()))
    if hasher.hexdigest() != digest:
        raise UserError(
            f"{path}: does not match its recorded SHA-256 in {MANIFEST} (changed after the cache was built); "
            "prepare a new cache (set data.cache_dir to a new directory)"
        )
    if largest >= cache.vocab_size:
        raise UserError(f"{path}: holds token id {largest}, not below the cache's vocabulary of {cache.vocab_size}")


def _file_key(path: Path) -> list[int]:
    return FileIdentity.of(path).record()


def _read_stamp(path: Path) -> dict[str, Any]:
    try:
        stamp = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def _write_stamp(cache: Cache, files: dict[str, list[int]]) -> None:
    """Best effort: a read-only cache is verified again by the next job instead."""
    try:
        atomic_write_text(cache.directory / STAMP, json.dumps({"identity": cache.identity, "files": files}) + "\n")
    except OSError as error:
        log.info("cache %s: cannot record its verification (%s)", cache.directory, error)
