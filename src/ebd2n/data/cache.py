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

A cache is built in a temporary directory beside cache_dir and renamed into place under a file
lock (`<cache_dir>.lock`, removed again when the build ends): a cache_dir is missing, empty, or
holds a complete cache, and an existing cache is never modified (a changed request is an error,
not a rebuild).

Training and validation open a cache through `open_verified_cache`: every file is checked against
the SHA-256 the manifest records, once per file version. `.verified.json` in the cache directory
remembers what was checked, keyed by each file's size, inode and modification time, so the next
job hashes nothing unless a file changed; it also holds the cache identity at build time, so an
edited manifest.json is refused. `verify_cache` (the audit) always re-hashes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from ebd2n.atomic import atomic_write_text, fsync_dir, rename_new, sha256_bytes, sha256_file
from ebd2n.config.schema import DataConfig
from ebd2n.data import supervised
from ebd2n.data.sources import SPLITS, Item, open_source
from ebd2n.data.tokenizer import eos_id, obtain_tokenizer
from ebd2n.errors import UserError

FORMAT_VERSION = 1
"""Version of the cache layout; caches of another version are refused, never reinterpreted."""
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
STAMP = ".verified.json"
"""Files already hashed against the manifest, by (size, inode, mtime), and the identity they were checked for."""

_CHUNK = 1 << 20
_CONTENT_NEUTRAL = ("cache_dir", "tokenize_batch_size", "dataset_copy", "tokenizer_copy")
"""DataConfig fields that do not change a cache's bytes (batching only changes speed; a local copy
holds the same pinned revision as the Hub)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cache:
    """A complete cache on disk, as read from its manifest."""

    directory: Path
    manifest: dict[str, Any]

    @cached_property
    def identity(self) -> str:
        """SHA-256 of the canonical manifest."""
        return cache_identity(self.manifest)

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

    def split_tokens(self, split: str) -> int:
        """Tokens in the split's stream."""
        return self.manifest["splits"][split]["tokens"]

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
                lines.append(f"{split}: {counts['documents']:,} records, {counts['truncated']:,} truncated to "
                             f"{self.padded_block_len} tokens, {counts['without_completion']:,} without a completion token")
        return lines

    @property
    def padded_block_len(self) -> int | None:
        """Tokens of every block of a padded supervised cache (one record each); None for a stream."""
        return (self.manifest.get("supervised") or {}).get("block_len")


def cache_identity(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the manifest as canonical JSON (sorted keys, compact separators)."""
    return sha256_bytes(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def prepare_cache(data: DataConfig, vocab_size: int, progress: bool = True, context_length: int | None = None) -> Cache:
    """Build the cache `data` asks for at data.cache_dir, or return the one already there.

    vocab_size is the recipe's model.vocab_size: the size a trained tokenizer gets, and a bound
    on a given one; context_length (model.context_length) sizes the blocks of padded supervised
    records. Concurrent callers wait for one builder and reuse its cache.
    """
    block_len = _padded_block_len(data, context_length)
    directory = Path(data.cache_dir)
    if _absent(directory):
        made = [parent for parent in directory.parents if not parent.exists()]  # deepest first
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            with _build_lock(directory):
                if _absent(directory):
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


def find_cache_identity(cache_dir: str | os.PathLike) -> str | None:
    """Identity of the cache at cache_dir, or None where none is prepared yet."""
    return None if _absent(Path(cache_dir)) else open_cache(cache_dir).identity


def open_cache(cache_dir: str | os.PathLike) -> Cache:
    """A complete cache as its manifest describes it, every file of the recorded size; UserError otherwise."""
    directory = Path(cache_dir)
    if _absent(directory):
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
        files = _recorded_files(cache)
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"{manifest_path}: damaged, lacks {error}; the cache cannot be used") from None
    for path, size, _ in files:
        if not path.is_file() or (size is not None and path.stat().st_size != size):
            raise UserError(
                f"{path}: missing or not the size {MANIFEST} records; the cache changed after it was built: "
                "prepare a new one (set data.cache_dir to a new directory)"
            )
    return cache


def open_verified_cache(cache_dir: str | os.PathLike, vocab_size: int) -> Cache:
    """The cache training and validation read: complete, unchanged since it was built, and within vocab_size.

    Hashes only the files that changed (size, inode or mtime) since they were last verified, so an
    unchanged cache costs nothing here.
    """
    cache = open_cache(cache_dir)
    _check_vocab_size(cache, vocab_size)
    _verify(cache, trust_stamp=True)
    return cache


def verify_cache(cache_dir: str | os.PathLike) -> Cache:
    """Re-hash every file of the cache against its manifest now, whatever the stamp says (the audit)."""
    cache = open_cache(cache_dir)
    _verify(cache, trust_stamp=False)
    return cache


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
        splits[split] = _write_split(directory, split, documents[split], encoder, dtype, data, limits[split], progress,
                                     block_len)
        if records:
            splits[split] |= encoder.cut_counts(splits[split]["documents"])
    parts = {
        "tokenizer": {"file": TOKENIZER, "sha256": sha256_file(tokenizer_file), "vocab_size": vocab,
                      "eos_id": eos, "eos_token": tokenizer.id_to_token(eos)},
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
    stream = np.concatenate([np.fromfile(directory / shard["file"], dtype=supervised.DTYPE) for shard in split["shards"]])
    if block_len is None:
        return int((stream[1:] >= 0).sum())
    blocks = stream[: len(stream) // block_len * block_len].reshape(-1, block_len)
    return int((blocks[:, 1:] >= 0).sum())


def _absent(directory: Path) -> bool:
    """No cache and nothing else there: a missing or empty directory (Snakemake creates output folders)."""
    return not directory.exists() or (directory.is_dir() and not any(directory.iterdir()))


def _recorded_files(cache: Cache) -> list[tuple[Path, int | None, str]]:
    """(path, size in bytes or None, SHA-256) of every file the manifest records."""
    files: list[tuple[Path, int | None, str]] = [(cache.tokenizer_path, None, cache.manifest["tokenizer"]["sha256"])]
    for split in SPLITS:
        recorded = cache.manifest["splits"][split]["shards"]
        files += [(path, tokens * cache.dtype.itemsize, shard["sha256"])
                  for (path, tokens), shard in zip(cache.shards(split), recorded, strict=True)]
    return files


def _verify(cache: Cache, trust_stamp: bool) -> None:
    """Hash the cache's files against the manifest (all, or those the stamp does not vouch for); record them."""
    stamp_path = cache.directory / STAMP
    stamp = _read_stamp(stamp_path)
    if stamp.get("identity", cache.identity) != cache.identity:
        raise UserError(
            f"{cache.directory / MANIFEST}: edited after the cache was built (its identity is no longer the one "
            f"{STAMP} recorded); a cache is never changed in place: prepare a new one"
        )
    verified = stamp.get("files", {}) if trust_stamp else {}
    now = {}
    for path, _, digest in _recorded_files(cache):
        key = _file_key(path)
        if verified.get(path.name) != key:
            _check_file(cache, path, digest)
        now[path.name] = key
    if now != stamp.get("files") or "identity" not in stamp:
        _write_stamp(cache, now)


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
    info = path.stat()
    return [info.st_size, info.st_ino, info.st_mtime_ns]


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


def _check_vocab_size(cache: Cache, vocab_size: int) -> None:
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
            f"{prepared} tokens; set model.vocab_size to {prepared}, or prepare a cache for this size in a new data.cache_dir"
        )


def _build(directory: Path, data: DataConfig, vocab_size: int, progress: bool, block_len: int | None) -> None:
    """Read the source, obtain the tokenizer, build in a staging directory, rename into place."""
    source = open_source(data)
    tokenizer, tokenizer_provenance = obtain_tokenizer(
        data.tokenizer, data.tokenizer_revision, lambda: map(_text, source.documents("train")), vocab_size, progress,
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
        built = Cache(staging, manifest)  # every file was hashed as it was written
        _write_stamp(built, {path.name: _file_key(path) for path, _, _ in _recorded_files(built)})
        fsync_dir(staging)
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()  # an empty folder made for it (Snakemake makes an output's parents)
        rename_new(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(directory.parent)


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


def _text(item: Item) -> str:
    """What a trained tokenizer learns from: a document, or a record in the plain format."""
    return item if isinstance(item, str) else f"{item[0]}\n{item[1]}"


def _batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


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
    _check_vocab_size(cache, vocab_size)
    recorded = cache.manifest["request"]
    for key, value in _request(data, vocab_size, block_len).items():
        if recorded.get(key) != value:
            raise UserError(
                f"{key}: the cache at data.cache_dir {cache.directory} was prepared with {recorded.get(key)!r}, "
                f"the recipe asks for {value!r}; set data.cache_dir to a new directory "
                "(caches are never rebuilt in place)"
            )


def _incomplete(directory: Path, why: str) -> UserError:
    return UserError(
        f"data.cache_dir {directory}: not a complete cache ({why}); "
        "point data.cache_dir elsewhere, or remove the directory if you know it is stale"
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
