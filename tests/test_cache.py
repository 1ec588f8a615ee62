"""Token caches: identity, sources, shards and hashes, reuse, concurrency and bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

import ebd2n
from ebd2n.atomic import sha256_file
from ebd2n.data import (
    EOS_TOKEN,
    Cache,
    find_cache_identity,
    open_cache,
    open_verified_cache,
    prepare_cache,
    synthetic,
    verify_cache,
)
from ebd2n.data.cache import MANIFEST
from ebd2n.data.cache_verify import STAMP
from ebd2n.errors import UserError

_PREPARE_SCRIPT = """
import json, sys
from ebd2n.config import DataConfig
from ebd2n.data import prepare_cache
print(prepare_cache(DataConfig(**json.loads(sys.argv[1])), int(sys.argv[2]), progress=False).identity)
"""


def _documents() -> list[str]:
    """About forty short stories of the embedded corpus, each made of several paragraphs."""
    return synthetic.generate_documents(1, 40_000)


def _write_corpus(directory: Path, kind: str) -> Path:
    """The stories as a JSONL file, a Parquet file, or a text file of blank-line-separated paragraphs."""
    documents = _documents()
    if kind == "jsonl":
        path = directory / "corpus.jsonl"
        path.write_text("".join(json.dumps({"text": document}) + "\n" for document in documents), encoding="utf-8")
    elif kind == "parquet":
        path = directory / "corpus.parquet"
        pq.write_table(pa.table({"text": documents}), path)
    else:
        path = directory / "corpus.txt"
        path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return path


def _local_data(tiny_data, tmp_path: Path, kind: str, **overrides):
    return tiny_data(source="local", dataset=_write_corpus(tmp_path, kind), validation_fraction=0.2, **overrides)


def _prepare_in_subprocess(settings: dict, vocab_size: int) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(Path(ebd2n.__file__).parents[1])}
    return subprocess.Popen(
        [sys.executable, "-c", _PREPARE_SCRIPT, json.dumps(settings), str(vocab_size)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _shard_sizes(cache: Cache) -> dict[str, list[int]]:
    """Tokens per shard as found on disk, split by split."""
    return {
        split: [(cache.directory / shard["file"]).stat().st_size // cache.dtype.itemsize for shard in entry["shards"]]
        for split, entry in cache.manifest["splits"].items()
    }


def _snapshot(root: Path) -> dict[str, str]:
    """SHA-256 of every file under root except lock files (which a failed build may create)."""
    files = [path for path in sorted(root.rglob("*")) if path.is_file() and path.suffix != ".lock"]
    return {str(path.relative_to(root)): sha256_file(path) for path in files}


@pytest.fixture(scope="module")
def large_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer.json of 70,000 entries (EOS included): too many ids for uint16."""
    words = sorted({word for document in _documents() for word in document.split()})
    vocab = {token: i for i, token in enumerate([EOS_TOKEN, "[UNK]", *words])}
    vocab |= {f"filler{i}": i for i in range(len(vocab), 70_000)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path_factory.mktemp("tokenizers") / "large.json"
    tokenizer.save(str(path))
    return path


def test_prepare_cache_identity_equal_in_two_directories(tiny_data, prepare_tiny, tmp_path: Path) -> None:
    first = prepare_tiny(tiny_data(cache_dir=tmp_path / "first"))
    result = prepare_tiny(tiny_data(cache_dir=tmp_path / "second")).identity
    assert result == first.identity


def test_prepare_cache_identity_equal_across_processes(tiny_cache: Cache, tmp_path: Path) -> None:
    request = tiny_cache.manifest["request"]
    data = {key.removeprefix("data."): value for key, value in request.items() if key.startswith("data.")}
    process = _prepare_in_subprocess(data | {"cache_dir": str(tmp_path / "other")}, tiny_cache.vocab_size)
    result = process.communicate()[0].strip()
    assert result == tiny_cache.identity


def test_prepare_cache_identity_depends_on_shuffle_seed(tiny_data, prepare_tiny, tiny_cache: Cache) -> None:
    result = prepare_tiny(tiny_data(shuffle_seed=7)).identity
    assert result != tiny_cache.identity


@pytest.mark.parametrize("kind", ["synthetic", "jsonl", "parquet", "text"])
def test_prepare_cache_shard_sizes_match_manifest(kind: str, tiny_data, prepare_tiny, tmp_path: Path) -> None:
    data = tiny_data() if kind == "synthetic" else _local_data(tiny_data, tmp_path, kind, shard_tokens=4_000)
    cache = prepare_tiny(data)
    result = _shard_sizes(cache), {split: counts["tokens"] for split, counts in cache.manifest["splits"].items()}
    expected = (
        {split: [shard["tokens"] for shard in entry["shards"]] for split, entry in cache.manifest["splits"].items()},
        {split: sum(sizes) for split, sizes in _shard_sizes(cache).items()},
    )
    assert result == expected


@pytest.mark.parametrize("kind", ["synthetic", "jsonl", "parquet", "text"])
def test_prepare_cache_shard_hashes_match_manifest(kind: str, tiny_data, prepare_tiny, tmp_path: Path) -> None:
    data = tiny_data() if kind == "synthetic" else _local_data(tiny_data, tmp_path, kind)
    cache = prepare_tiny(data)
    shards = [shard for entry in cache.manifest["splits"].values() for shard in entry["shards"]]
    result = [sha256_file(cache.directory / shard["file"]) for shard in shards]
    assert result == [shard["sha256"] for shard in shards]


def test_prepare_cache_local_text_has_one_document_per_paragraph(tiny_data, prepare_tiny, tmp_path: Path) -> None:
    cache = prepare_tiny(_local_data(tiny_data, tmp_path, "text"))
    result = sum(entry["documents"] for entry in cache.manifest["splits"].values())
    expected = sum(len(document.split("\n\n")) for document in _documents())
    assert result == expected


def test_prepare_cache_local_holds_out_validation_fraction(tiny_data, prepare_tiny, tmp_path: Path) -> None:
    cache = prepare_tiny(_local_data(tiny_data, tmp_path, "jsonl"))
    result = cache.manifest["splits"]["validation"]["documents"]
    assert result == int(len(_documents()) * 0.2)


def test_prepare_cache_local_jsonl_and_parquet_give_equal_tokens(tiny_data, prepare_tiny, tmp_path: Path) -> None:
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "parquet").mkdir()
    jsonl = prepare_tiny(_local_data(tiny_data, tmp_path / "jsonl", "jsonl", cache_dir=tmp_path / "a"))
    parquet = prepare_tiny(_local_data(tiny_data, tmp_path / "parquet", "parquet", cache_dir=tmp_path / "b"))
    result = [shard["sha256"] for shard in parquet.manifest["splits"]["train"]["shards"]]
    assert result == [shard["sha256"] for shard in jsonl.manifest["splits"]["train"]["shards"]]


def test_prepare_cache_huggingface_pins_the_resolved_revision(
    tiny_data, prepare_tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import huggingface_hub

    corpus, load_dataset, revisions = _write_corpus(tmp_path, "jsonl"), datasets.load_dataset, set()

    def load_locally(path: str, name: str | None, revision: str, split: str, streaming: bool):
        revisions.add(revision)
        return load_dataset("json", data_files=str(corpus), split="train", streaming=streaming)

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda self, name: SimpleNamespace(sha="0123abcd"))
    monkeypatch.setattr(datasets, "load_dataset", load_locally)
    cache = prepare_tiny(tiny_data(source="huggingface", dataset="org/corpus", validation_fraction=0.2))
    assert (cache.manifest["source"]["revision"], revisions) == ("0123abcd", {"0123abcd"})


def test_prepare_cache_stops_at_prepare_train_tokens(tiny_data, prepare_tiny) -> None:
    result = prepare_tiny(tiny_data(prepare_train_tokens=12_345)).manifest["splits"]["train"]["tokens"]
    assert result == 12_345


def test_prepare_cache_appends_eos_to_every_document(tiny_cache: Cache) -> None:
    tokens = np.concatenate([np.fromfile(path, dtype=tiny_cache.dtype) for path, _ in tiny_cache.shards("validation")])
    result = int((tokens == tiny_cache.eos_id).sum()), int(tokens[-1])
    assert result == (tiny_cache.manifest["splits"]["validation"]["documents"], tiny_cache.eos_id)


def test_prepare_cache_records_validation_targets(tiny_cache: Cache) -> None:
    assert tiny_cache.validation_targets == tiny_cache.manifest["splits"]["validation"]["tokens"] - 1


def test_prepare_cache_uses_uint32_beyond_uint16_ids(tiny_data, prepare_tiny, large_tokenizer: Path) -> None:
    cache = prepare_tiny(tiny_data(tokenizer=str(large_tokenizer)), 70_000)
    assert cache.dtype == np.dtype("<u4")


def test_prepare_cache_keeps_a_given_tokenizer_file(tiny_data, prepare_tiny, large_tokenizer: Path) -> None:
    cache = prepare_tiny(tiny_data(tokenizer=str(large_tokenizer)), 70_000)
    result = Tokenizer.from_file(str(cache.tokenizer_path)).to_str()
    assert result == Tokenizer.from_file(str(large_tokenizer)).to_str()


def test_prepare_cache_again_is_a_no_op(tiny_data, prepare_tiny) -> None:
    data = tiny_data()
    cache = prepare_tiny(data)
    before = {path.name: path.stat().st_mtime_ns for path in cache.directory.iterdir()}
    prepare_tiny(data)
    result = {path.name: path.stat().st_mtime_ns for path in cache.directory.iterdir()}
    assert result == before


def test_prepare_cache_concurrent_builders_share_one_cache(tiny_data, tiny_cache: Cache, tmp_path: Path) -> None:
    data = tiny_data(cache_dir=tmp_path / "caches" / "shared")
    processes = [_prepare_in_subprocess(data.model_dump(mode="json"), tiny_cache.vocab_size) for _ in range(2)]
    identities = [process.communicate()[0].strip() for process in processes]
    result = identities, sorted(path.name for path in (tmp_path / "caches").iterdir())
    assert result == ([verify_cache(data.cache_dir).identity] * 2, ["shared"])


def test_prepare_cache_builds_into_an_empty_directory(
    tiny_data, prepare_tiny, tiny_cache: Cache, tmp_path: Path
) -> None:
    (tmp_path / "made-by-snakemake").mkdir()
    result = prepare_tiny(tiny_data(cache_dir=tmp_path / "made-by-snakemake")).identity
    assert result == tiny_cache.identity


def test_find_cache_identity_of_a_prepared_cache(tiny_cache: Cache) -> None:
    assert find_cache_identity(tiny_cache.directory) == tiny_cache.identity


def test_find_cache_identity_none_where_nothing_is_prepared(tmp_path: Path) -> None:
    assert find_cache_identity(tmp_path / "absent") is None


def test_open_cache_missing_raises(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"data\.cache_dir .*absent: no cache there"):
        open_cache(tmp_path / "absent")


def test_open_cache_verify_detects_a_changed_shard(tiny_cache: Cache, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_cache.directory, tmp_path / "copy"))
    shard = copy / tiny_cache.manifest["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[0] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"train-00000\.bin: does not match its recorded SHA-256"):
        verify_cache(copy)


def test_prepared_cache_needs_no_hashing_when_opened(tiny_cache: Cache) -> None:
    stamp = tiny_cache.directory / STAMP
    before = stamp.stat().st_mtime_ns
    open_verified_cache(tiny_cache.directory, tiny_cache.vocab_size)
    assert stamp.stat().st_mtime_ns == before


def test_open_verified_cache_hashes_again_a_shard_edited_with_its_time_put_back(
    tiny_cache: Cache, tmp_path: Path
) -> None:
    """The stamp vouches for a file only while its whole identity holds: an edit in place with the
    modification time put back still moves the status-change time."""
    copy = Path(shutil.copytree(tiny_cache.directory, tmp_path / "copy"))
    open_verified_cache(copy, tiny_cache.vocab_size)  # a copy: every file hashed once, the stamp renewed
    shard = copy / "train-00001.bin"
    info = shard.stat()
    with open(shard, "r+b") as handle:  # same size, same inode, mtime put back
        handle.write(bytes([handle.read(1)[0] ^ 1]))
    os.utime(shard, ns=(info.st_atime_ns, info.st_mtime_ns))
    with pytest.raises(UserError, match=r"train-00001\.bin: does not match its recorded SHA-256"):
        open_verified_cache(copy, tiny_cache.vocab_size)
    with pytest.raises(UserError, match=r"train-00001\.bin: does not match its recorded SHA-256"):
        verify_cache(copy)


def test_open_verified_cache_refuses_ids_beyond_the_vocabulary(tiny_cache: Cache, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_cache.directory, tmp_path / "copy"))
    shard = copy / "train-00000.bin"
    shard.write_bytes(b"\xff\xff" + shard.read_bytes()[2:])
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["splits"]["train"]["shards"][0]["sha256"] = sha256_file(shard)  # a manifest edited to match
    (copy / MANIFEST).write_text(json.dumps(manifest))
    (copy / STAMP).unlink()
    with pytest.raises(
        UserError, match=r"train-00000\.bin: holds token id 65535, not below the cache's vocabulary of 300"
    ):
        open_verified_cache(copy, tiny_cache.vocab_size)


_BAD_CASES: dict[str, tuple[dict[str, str | int], int | None, str]] = {
    # name: (data overrides ({root} is the test's folder), model.vocab_size or None for the tiny one, message)
    "missing file": (
        {"source": "local", "dataset": "{root}/absent.jsonl", "cache_dir": "{root}/caches/new"},
        None,
        r"data\.dataset .*absent\.jsonl: no such file",
    ),
    "empty file": (
        {"source": "local", "dataset": "{root}/empty.jsonl", "cache_dir": "{root}/caches/new"},
        None,
        r"data\.dataset .*empty\.jsonl: the train split has no documents",
    ),
    "empty validation split": (
        {"source": "local", "dataset": "{root}/few.jsonl", "cache_dir": "{root}/caches/new"},
        None,
        r"the validation split has no documents; give a larger data\.validation_fraction",
    ),
    "tokenizer too large": (
        {"tokenizer": "{large}", "cache_dir": "{root}/caches/new"},
        512,
        r"model\.vocab_size 512 is smaller than the vocabulary of data\.tokenizer",
    ),
    "cache too large": (
        {"cache_dir": "{root}/caches/existing"},
        200,
        r"model\.vocab_size 200 is smaller than the vocabulary of the cache",
    ),
    "changed request": (
        {"cache_dir": "{root}/caches/existing", "shuffle_seed": 7},
        None,
        r"data\.shuffle_seed: the cache at .* was prepared with 42",
    ),
    "incomplete directory": (
        {"cache_dir": "{root}/caches/partial"},
        None,
        r"data\.cache_dir .*partial: not a complete cache",
    ),
}


@pytest.fixture
def bad_case(request: pytest.FixtureRequest, tiny_cache: Cache, tiny_data, large_tokenizer: Path, tmp_path: Path):
    """(data, vocab size, message) of one bad case, beside a copy of the tiny cache and a partial one."""
    shutil.copytree(tiny_cache.directory, tmp_path / "caches" / "existing")
    (tmp_path / "caches" / "partial").mkdir()
    (tmp_path / "caches" / "partial" / "notes.txt").write_text("not a cache\n", encoding="utf-8")
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "few.jsonl").write_text("".join(f'{{"text": "story {i}"}}\n' for i in range(3)), encoding="utf-8")
    overrides, vocab_size, message = _BAD_CASES[request.param]
    names = {"root": tmp_path, "large": large_tokenizer}
    data = tiny_data(
        **{key: value.format(**names) if isinstance(value, str) else value for key, value in overrides.items()}
    )
    return data, vocab_size or tiny_cache.vocab_size, message


@pytest.mark.parametrize("bad_case", list(_BAD_CASES), indirect=True)
def test_prepare_cache_bad_input_raises(bad_case) -> None:
    data, vocab_size, message = bad_case
    with pytest.raises(UserError, match=message):
        prepare_cache(data, vocab_size, progress=False)


@pytest.mark.parametrize("bad_case", list(_BAD_CASES), indirect=True)
def test_prepare_cache_bad_input_changes_no_file(bad_case, tmp_path: Path) -> None:
    data, vocab_size, _ = bad_case
    before = _snapshot(tmp_path / "caches")
    with pytest.raises(UserError):
        prepare_cache(data, vocab_size, progress=False)
    assert _snapshot(tmp_path / "caches") == before
