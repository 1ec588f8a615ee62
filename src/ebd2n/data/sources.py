"""Where a cache's text comes from: one iterator of document strings per split, whatever the source.

- synthetic: the embedded corpus (its own train and validation splits), shuffled fully.
- sql-synthetic: the embedded text-to-SQL records (ebd2n.data.sql_synthetic), the same way.
- huggingface: a Hub data set streamed through `datasets` at a pinned revision; shuffled with
  `datasets`' buffer shuffle (SHUFFLE_BUFFER documents), since a streamed split cannot be held whole.
- local: text, JSONL or Parquet files through the same `datasets` loaders, read whole and shuffled
  fully. A text file holds one document per blank-line-separated paragraph.

With data.supervised, a source yields (prompt, completion) records instead of documents: the
columns data.supervised.prompt_field and completion_field of JSONL, Parquet or Hub rows.

A source without a validation split (local files, or a Hub set with data.validation_split null)
holds out validation_fraction of its shuffled documents: document i goes to validation when
floor((i + 1) * fraction) > floor(i * fraction), an even, deterministic spread over the stream.
"""

from __future__ import annotations

import codecs
import functools
import glob
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ebd2n.atomic import sha256_file
from ebd2n.config.schema import DataConfig
from ebd2n.data import sql_synthetic, synthetic
from ebd2n.errors import UserError

SPLITS = ("train", "validation")
"""The splits of every cache, in build order."""

SHUFFLE_BUFFER = 10_000
"""Documents held by the buffer shuffle of streamed Hub splits."""

_LOCAL_BUILDERS = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
}
"""`datasets` loader for each local file suffix."""

_T = TypeVar("_T")
Item = str | tuple[str, str]
"""A document, or a supervised (prompt, completion) record."""


@dataclass(frozen=True)
class Source:
    """A resolved text source: what the manifest records about it, and its shuffled documents."""

    label: str
    """How error messages name it: the recipe key and value."""
    provenance: dict[str, Any]
    """Kind, data set, configuration, resolved revision, text field, validation rule."""
    _documents: Callable[[str], Iterator[Item]]

    def documents(self, split: str) -> Iterator[Item]:
        """A fresh iterator over the split's shuffled documents (or records); UserError once it proves empty."""
        return _non_empty(self._documents(split), self.label, split)


def open_source(data: DataConfig) -> Source:
    """Resolve `data` into a Source (pinning the Hub revision now, so the manifest records it)."""
    if data.source == "synthetic":
        return _synthetic(data)
    if data.source == "sql-synthetic":
        return _sql_synthetic(data)
    if data.dataset is None:
        raise UserError(f"data.dataset: required for data.source {data.source} (a Hub name or a local file pattern)")
    if data.source == "local":
        return _local(data)
    return _huggingface(data)


def hub_file(repo: str, filename: str, revision: str | None, key: str, copy: str | None = None) -> tuple[str, str]:
    """Download one file of a Hub model repository (or take it from a local snapshot); returns
    (local path, resolved commit)."""
    import huggingface_hub

    label = f"{key} {repo}"
    snapshot = hub_snapshot(repo, "model", revision, copy, key)
    if snapshot is not None:
        path = snapshot[0] / filename
        if not path.is_file():
            raise UserError(f"{label}: no {filename} in the local snapshot {snapshot[0]}")
        return str(path), snapshot[1]
    resolved = revision or _hub_call(label, lambda: huggingface_hub.HfApi().model_info(repo).sha)
    return _hub_call(label, lambda: huggingface_hub.hf_hub_download(repo, filename, revision=resolved)), resolved


def hub_snapshot(repo: str, kind: str, revision: str | None, copy: str | None, key: str) -> tuple[Path, str] | None:
    """A local snapshot of a Hub repository and its commit, for nodes without internet; None: use the Hub.

    `copy` (data.dataset_copy / data.tokenizer_copy) is a directory in the hub's layout; its commit
    is read from disk and must equal a pinned revision. Without a copy, HF_HUB_OFFLINE=1 takes
    the pinned revision from the Hugging Face cache (HF_HOME / HF_HUB_CACHE).
    """
    import huggingface_hub
    from huggingface_hub import constants

    copy_key, revision_key = f"{key}_copy", f"{key}_revision" if key != "data.dataset" else "data.revision"
    if copy is not None:
        path = Path(copy)
        if not path.is_dir():
            raise UserError(f"{copy_key} {copy}: no such directory")
        recorded = _recorded_commit(path, copy_key)
        if revision is not None and revision != recorded:
            raise UserError(f"{revision_key} {revision}: {copy_key} {copy} holds revision {recorded}")
        return path, recorded
    if not constants.HF_HUB_OFFLINE:
        return None
    if revision is None:
        raise UserError(
            f"{revision_key}: HF_HUB_OFFLINE=1 needs a pinned commit to find {repo} in the Hugging Face cache"
        )
    try:
        path = huggingface_hub.snapshot_download(repo, repo_type=kind, revision=revision, local_files_only=True)
    except Exception:  # the library's not-found errors vary by version; all mean the same here
        raise UserError(
            f"{key} {repo}: revision {revision} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}); "
            f"download it where there is internet "
            f"(hf download {repo}{' --repo-type dataset' if kind == 'dataset' else ''} "
            f"--revision {revision})"
        ) from None
    return Path(path), revision


def _recorded_commit(path: Path, key: str) -> str:
    """The commit a local snapshot holds: its directory name in the cache (snapshots/<commit>), else
    the one commit of the `.cache/huggingface/download/*.metadata` files a --local-dir download writes."""
    if path.resolve().parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", path.resolve().name):
        return path.resolve().name
    commits = {
        metadata.read_text(encoding="utf-8").splitlines()[0].strip()
        for metadata in (path / ".cache" / "huggingface" / "download").rglob("*.metadata")
    }
    if len(commits) != 1:
        found = "no revision" if not commits else f"several revisions ({', '.join(sorted(commits))})"
        raise UserError(
            f"{key} {path}: records {found}; give a snapshots/<commit> directory of the Hugging Face cache "
            "or a directory written by one hf download --local-dir"
        )
    return commits.pop()


def _synthetic(data: DataConfig) -> Source:
    sizes = {"train": data.synthetic_train_bytes, "validation": data.synthetic_validation_bytes}

    @functools.cache
    def split_documents(split: str) -> list[str]:
        generated = synthetic.generate_documents(synthetic.split_seed(data.synthetic_seed, split), sizes[split])
        return _shuffled(generated, data.shuffle_seed)

    provenance = {
        "kind": "synthetic",
        "dataset": None,
        "config": None,
        "revision": None,
        "text_field": None,
        "validation": {"split": "validation"},
    }
    return Source("data.source synthetic", provenance, lambda split: iter(split_documents(split)))


def _sql_synthetic(data: DataConfig) -> Source:
    sizes = {"train": data.synthetic_train_bytes, "validation": data.synthetic_validation_bytes}

    @functools.cache
    def split_records(split: str) -> list[tuple[str, str]]:
        records = sql_synthetic.iter_records(sql_synthetic.split_seed(data.synthetic_seed, split), sizes[split])
        return _shuffled([(record.prompt, record.completion) for record in records], data.shuffle_seed)

    provenance = {
        "kind": "sql-synthetic",
        "dataset": None,
        "config": None,
        "revision": None,
        "text_field": None,
        "validation": {"split": "validation"},
    }
    return Source("data.source sql-synthetic", provenance, lambda split: iter(split_records(split)))


def _local(data: DataConfig) -> Source:
    if data.validation_split is not None:
        raise UserError(
            "data.validation_split: local files have one split; set it to null to hold out data.validation_fraction"
        )
    files = sorted(glob.glob(data.dataset)) if glob.has_magic(data.dataset) else [data.dataset]
    label = f"data.dataset {data.dataset}"
    if not files or not all(Path(file).is_file() for file in files):
        raise UserError(f"{label}: no such file")
    files = [file for file in files if Path(file).stat().st_size]  # empty files hold no documents
    if not files:
        raise _no_documents(label, "train")
    builder = _local_builder(files, label)
    text_field = "text" if builder == "text" else data.text_field
    options = {"sample_by": "paragraph"} if builder == "text" else {}

    @functools.cache
    def all_documents() -> list[str]:
        rows = _load(builder, label, data_files=files, split="train", **options)
        try:
            documents = list(_items(rows, data, text_field, label))
        except UnicodeDecodeError:
            raise UserError(f"data.dataset {_first_non_utf8(files)}: not UTF-8 text; convert it to UTF-8") from None
        return _shuffled(documents, data.shuffle_seed)

    provenance = {
        "kind": "local",
        "dataset": data.dataset,
        "config": None,
        "revision": None,
        "text_field": text_field,
        "validation": {"holdout": data.validation_fraction},
        "files": {file: sha256_file(file) for file in files},
    }
    return Source(label, provenance, lambda split: _held_out(iter(all_documents()), data.validation_fraction, split))


def _huggingface(data: DataConfig) -> Source:
    import huggingface_hub

    label = f"data.dataset {data.dataset}"
    snapshot = hub_snapshot(data.dataset, "dataset", data.revision, data.dataset_copy, "data.dataset")
    if snapshot is not None:  # offline: the same files, read from disk
        location, revision, pinned = str(snapshot[0]), snapshot[1], None
    else:
        revision = data.revision or _hub_call(label, lambda: huggingface_hub.HfApi().dataset_info(data.dataset).sha)
        location, pinned = data.dataset, revision

    def stream(split: str) -> Iterator[str]:
        rows = _load(location, label, name=data.dataset_config, revision=pinned, split=split)
        return _items(rows.shuffle(seed=data.shuffle_seed, buffer_size=SHUFFLE_BUFFER), data, data.text_field, label)

    def documents(split: str) -> Iterator[str]:
        if data.validation_split is None:
            return _held_out(stream("train"), data.validation_fraction, split)
        return stream({"train": "train", "validation": data.validation_split}[split])

    provenance = {
        "kind": "huggingface",
        "dataset": data.dataset,
        "config": data.dataset_config,
        "revision": revision,
        "text_field": data.text_field,
        "validation": (
            {"split": data.validation_split} if data.validation_split else {"holdout": data.validation_fraction}
        ),
        "shuffle_buffer": SHUFFLE_BUFFER,
    }
    return Source(label, provenance, documents)


def _local_builder(files: list[str], label: str) -> str:
    """One `datasets` loader for all files, chosen by suffix."""
    builders = {_LOCAL_BUILDERS.get(Path(file).suffix.lower()) for file in files}
    if None in builders or len(builders) > 1:
        known = ", ".join(sorted(_LOCAL_BUILDERS))
        raise UserError(f"{label}: files must share one of the suffixes {known}")
    return builders.pop()


def _load(path: str, label: str, **options: Any) -> Iterable[dict[str, Any]]:
    """`datasets.load_dataset`, streamed (no Arrow cache written), its failures as UserError."""
    import datasets

    options.setdefault("streaming", True)
    try:
        return datasets.load_dataset(path, **options)
    except (OSError, ValueError) as error:
        raise UserError(f"{label}: cannot load ({_reason(error)})") from None


def _first_non_utf8(files: list[str]) -> str:
    """The first file that does not decode as UTF-8 (the loaders do not say which one failed)."""
    for file in files:
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            with open(file, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return file
    return ", ".join(files)


def _items(rows: Iterable[dict[str, Any]], data: DataConfig, text_field: str, label: str) -> Iterator[Item]:
    """Documents, or (prompt, completion) records with data.supervised."""
    if data.supervised is None:
        return _texts(rows, text_field, label)
    return _records(rows, data.supervised.prompt_field, data.supervised.completion_field, label)


def _records(
    rows: Iterable[dict[str, Any]], prompt_field: str, completion_field: str, label: str
) -> Iterator[tuple[str, str]]:
    """(prompt, completion) of each row; rows with an empty completion are skipped (nothing to learn)."""
    keys = (("prompt_field", prompt_field), ("completion_field", completion_field))
    for row in rows:
        for key, field in keys:
            if field not in row:
                raise UserError(f"data.supervised.{key} {field}: no such column in {label} (columns: {', '.join(row)})")
            if row[field] is not None and not isinstance(row[field], str):
                raise UserError(
                    f"data.supervised.{key} {field}: column of {label} holds {type(row[field]).__name__}, not text"
                )
        if row[completion_field] and not row[completion_field].isspace():
            yield row[prompt_field] or "", row[completion_field]


def _texts(rows: Iterable[dict[str, Any]], text_field: str, label: str) -> Iterator[str]:
    """The text column of each row; empty and whitespace-only documents are skipped."""
    for row in rows:
        if text_field not in row:
            raise UserError(f"data.text_field {text_field}: no such column in {label} (columns: {', '.join(row)})")
        text = row[text_field]
        if text is not None and not isinstance(text, str):
            raise UserError(f"data.text_field {text_field}: column of {label} holds {type(text).__name__}, not text")
        if text and not text.isspace():
            yield text


def _shuffled(documents: list[_T], seed: int) -> list[_T]:
    return [documents[i] for i in np.random.default_rng(seed).permutation(len(documents))]


def _held_out(documents: Iterator[_T], fraction: float, split: str) -> Iterator[_T]:
    """The documents of `split` under the deterministic hold-out rule of the module docstring."""
    want_validation = split == "validation"
    for i, document in enumerate(documents):
        if (math.floor((i + 1) * fraction) > math.floor(i * fraction)) == want_validation:
            yield document


def _non_empty(documents: Iterator[_T], label: str, split: str) -> Iterator[_T]:
    empty = True
    for document in documents:
        empty = False
        yield document
    if empty:
        raise _no_documents(label, split)


def _no_documents(label: str, split: str) -> UserError:
    hint = "give a larger data.validation_fraction or more documents" if split == "validation" else "check its content"
    return UserError(f"{label}: the {split} split has no documents; {hint}")


def _hub_call(label: str, call: Callable[[], _T]) -> _T:
    """Run one Hub request; a network, name or revision failure becomes a one-line UserError."""
    from huggingface_hub.errors import HTTPError

    try:
        return call()
    except (OSError, ValueError, HTTPError) as error:
        raise UserError(f"{label}: Hub request failed ({_reason(error)})") from None


def _reason(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
