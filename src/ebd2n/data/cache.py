"""Token caches: one token stream per split in shards, the tokenizer, and a manifest naming it all.

A cache directory holds
    manifest.json           request, provenance, seeds, per-split counts and shard hashes
    tokenizer.json          the tokenizer that produced the tokens
    <split>-00000.bin ...   raw little-endian uint16 (vocabulary <= 65,536) or uint32 token ids
Every document is followed by EOS; a split's shards are consecutive pieces of one stream.
Supervised caches (data.supervised) hold prompt/completion records instead, as int32 ids where a
token that carries no loss is stored as ~id (see ebd2n.data.supervised); their manifest says how
(its `supervised` section) and how many records were truncated. The
cache identity is the SHA-256 of the canonical manifest, so equal inputs give equal identities
in any directory and any process.

This module reads a cache; data.cache_prepare builds one, data.cache_verify checks its hashes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ebd2n.atomic import sha256_bytes
from ebd2n.data.sources import SPLITS
from ebd2n.errors import UserError

FORMAT_VERSION = 1
"""Version of the cache layout; caches of another version are refused, never reinterpreted."""
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class Cache:
    """A complete cache on disk, as read from its manifest."""

    directory: Path
    manifest: dict[str, Any]

    @cached_property
    def identity(self) -> str:
        """SHA-256 of the manifest as canonical JSON (sorted keys, compact separators)."""
        return sha256_bytes(json.dumps(self.manifest, sort_keys=True, separators=(",", ":")).encode("utf-8"))

    @property
    def dtype(self) -> np.dtype:
        """Token dtype of the shards (little-endian)."""
        return np.dtype(self.manifest["dtype"]).newbyteorder("<")

    @property
    def eos_id(self) -> int:
        """Id of the token that ends every document."""
        return self.manifest["tokenizer"]["eos_id"]

    @property
    def vocab_size(self) -> int:
        """Size of the tokenizer's vocabulary (every token id is below it)."""
        return self.manifest["tokenizer"]["vocab_size"]

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / TOKENIZER

    def shards(self, split: str) -> list[tuple[Path, int]]:
        """(path, tokens) of the split's shards, in stream order."""
        return [(self.directory / shard["file"], shard["tokens"]) for shard in self.manifest["splits"][split]["shards"]]

    @property
    def validation_targets(self) -> int:
        """Prediction targets of full validation: every validation token after the first (supervised
        caches: those that carry loss)."""
        return self.manifest["splits"]["validation"]["targets"]

    def record_counts(self) -> list[str]:
        """One line per split of a supervised cache: its records, and how many were cut to a block."""
        lines = []
        for split, counts in self.manifest["splits"].items() if self.manifest.get("supervised") else ():
            if self.padded_block_len is None:
                lines.append(f"{split}: {counts['documents']:,} records, packed")
            else:
                lines.append(
                    f"{split}: {counts['documents']:,} records, {counts['truncated']:,} truncated to "
                    f"{self.padded_block_len} tokens, {counts['without_completion']:,} without a completion token"
                )
        return lines

    @property
    def padded_block_len(self) -> int | None:
        """Tokens of every block of a padded supervised cache (one record each); None for a stream."""
        return (self.manifest.get("supervised") or {}).get("block_len")

    def recorded_files(self) -> list[tuple[Path, int | None, str]]:
        """(path, size in bytes or None, SHA-256) of every file the manifest records."""
        files: list[tuple[Path, int | None, str]] = [(self.tokenizer_path, None, self.manifest["tokenizer"]["sha256"])]
        for split in SPLITS:
            recorded = self.manifest["splits"][split]["shards"]
            files += [
                (path, tokens * self.dtype.itemsize, shard["sha256"])
                for (path, tokens), shard in zip(self.shards(split), recorded, strict=True)
            ]
        return files


def find_cache_identity(cache_dir: str | os.PathLike) -> str | None:
    """Identity of the cache at cache_dir, or None where none is prepared yet."""
    return None if cache_absent(Path(cache_dir)) else open_cache(cache_dir).identity


def open_cache(cache_dir: str | os.PathLike) -> Cache:
    """A complete cache as its manifest describes it, every file of the recorded size; UserError otherwise."""
    directory = Path(cache_dir)
    if cache_absent(directory):
        raise UserError(f"data.cache_dir {directory}: no cache there; prepare it first (ebd2n prepare)")
    manifest_path = directory / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise _incomplete(directory, f"unreadable {MANIFEST}: {type(error).__name__}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        raise _incomplete(directory, f"{MANIFEST} is not format {FORMAT_VERSION}")
    cache = Cache(directory, manifest)
    try:
        files = cache.recorded_files()
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"{manifest_path}: damaged, lacks {error}; the cache cannot be used") from None
    for path, size, _ in files:
        if not path.is_file() or (size is not None and path.stat().st_size != size):
            raise UserError(
                f"{path}: missing or not the size {MANIFEST} records; the cache changed after it was built: "
                "prepare a new one (set data.cache_dir to a new directory)"
            )
    return cache


def cache_absent(directory: Path) -> bool:
    """No cache and nothing else there: a missing or empty directory (Snakemake creates output folders)."""
    return not directory.exists() or (directory.is_dir() and not any(directory.iterdir()))


def _incomplete(directory: Path, why: str) -> UserError:
    return UserError(
        f"data.cache_dir {directory}: not a complete cache ({why}); "
        "point data.cache_dir elsewhere, or remove the directory if you know it is stale"
    )
