"""ebd2n prepare on a node without internet: C4- and MiniPile-shaped local copies in the hub's layout."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from ebd2n.data import open_cache
from ebd2n.data.synthetic import generate_documents
from ebd2n.data.tokenizer import train_bpe

DATA_SHA = "1588ec454efa1a09f29cd18ddd04fe05fc8653a2"
TOKENIZER_SHA = "59f6f375b26bde864a6ca194a9a3044570490064"
TOKENIZER = "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"
C4_README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/c4-train.*.json.gz
  - split: validation
    path: en/c4-validation.*.json.gz
---
"""


def _documents(count: int, seed: int) -> list[str]:
    return generate_documents(seed, 3000 * count)[:count]


def _tokenizer_snapshot(hub: Path) -> Path:
    """TinyLlama's repository in the Hugging Face cache layout, holding a small trained tokenizer.json."""
    snapshot = hub / "models--TinyLlama--TinyLlama-1.1B-intermediate-step-1431k-3T" / "snapshots" / TOKENIZER_SHA
    snapshot.mkdir(parents=True)
    train_bpe(_documents(40, 3), 300, False).save(str(snapshot / "tokenizer.json"))
    return snapshot


def _c4_local_dir(root: Path) -> Path:
    """allenai/c4 as `hf download --local-dir` leaves it: en/ shards, README configs, download metadata."""
    for name, seed in (("c4-train.00000-of-01024.json.gz", 1), ("c4-validation.00000-of-00008.json.gz", 2)):
        path = root / "en" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            for text in _documents(12, seed):
                handle.write(
                    json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z", "url": "https://x.invalid"}) + "\n"
                )
        metadata = root / ".cache/huggingface/download/en" / f"{name}.metadata"
        metadata.parent.mkdir(parents=True, exist_ok=True)
        metadata.write_text(f'{DATA_SHA}\n"etag"\n1700000000.0\n')
    (root / "README.md").write_text(C4_README)
    return root


def _minipile_cache(hub: Path) -> None:
    """JeanKaddour/minipile in the Hugging Face cache: data/*.parquet at a pinned snapshot."""
    snapshot = hub / "datasets--JeanKaddour--minipile" / "snapshots" / DATA_SHA / "data"
    snapshot.mkdir(parents=True)
    for split, seed in (("train", 1), ("validation", 2)):
        pl.DataFrame({"text": _documents(12, seed)}).write_parquet(snapshot / f"{split}-00000-of-00001.parquet")


def _prepare(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`ebd2n prepare` with the Hub switched offline and every connection refused (a dead proxy)."""
    dead = "http://127.0.0.1:9"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "NO_PROXY": "",
    }
    settings = [
        "data.source=huggingface",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"data.tokenizer={TOKENIZER}",
        "model.vocab_size=512",
        *overrides,
    ]
    command = [sys.executable, "-m", "ebd2n", "prepare", "demo", *(f"--set={s}" for s in settings)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_c4_local_copy_prepares_offline_with_revisions_checked(tmp_path: Path) -> None:
    copy = _c4_local_dir(tmp_path / "c4")
    tokenizer = _tokenizer_snapshot(tmp_path / "elsewhere")
    finished = _prepare(
        tmp_path,
        "data.dataset=allenai/c4",
        "data.dataset_config=en",
        "data.validation_split=validation",
        f"data.revision={DATA_SHA}",
        f"data.dataset_copy={copy}",
        f"data.tokenizer_revision={TOKENIZER_SHA}",
        f"data.tokenizer_copy={tokenizer}",
    )
    assert finished.returncode == 0, finished.stderr
    manifest = open_cache(tmp_path / "cache").manifest
    result = (manifest["source"]["dataset"], manifest["source"]["revision"], manifest["tokenizer"]["revision"])
    assert result == ("allenai/c4", DATA_SHA, TOKENIZER_SHA)


def test_minipile_in_the_hub_cache_prepares_offline(tmp_path: Path) -> None:
    _minipile_cache(tmp_path / "hub")
    _tokenizer_snapshot(tmp_path / "hub")
    finished = _prepare(
        tmp_path,
        "data.dataset=JeanKaddour/minipile",
        "data.validation_split=validation",
        f"data.revision={DATA_SHA}",
        f"data.tokenizer_revision={TOKENIZER_SHA}",
    )
    assert finished.returncode == 0, finished.stderr
    manifest = open_cache(tmp_path / "cache").manifest
    result = (manifest["source"]["revision"], manifest["splits"]["validation"]["documents"])
    assert result == (DATA_SHA, 12)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((f"data.revision={'a' * 40}",), f"data.revision {'a' * 40}: data.dataset_copy .* holds revision {DATA_SHA}"),
        (("data.revision=null",), None),  # unpinned: the copy's recorded commit is taken
    ],
)
def test_c4_local_copy_revision_must_match(tmp_path: Path, overrides: tuple[str, ...], message: str | None) -> None:
    copy = _c4_local_dir(tmp_path / "c4")
    tokenizer = _tokenizer_snapshot(tmp_path / "elsewhere")
    finished = _prepare(
        tmp_path,
        "data.dataset=allenai/c4",
        "data.dataset_config=en",
        "data.validation_split=validation",
        f"data.dataset_copy={copy}",
        f"data.tokenizer_copy={tokenizer}",
        *overrides,
    )
    if message is None:
        assert finished.returncode == 0, finished.stderr
        assert open_cache(tmp_path / "cache").manifest["source"]["revision"] == DATA_SHA
    else:
        assert finished.returncode == 2 and len(finished.stderr.strip().splitlines()) == 1
        assert re.search(message, finished.stderr), finished.stderr


def test_offline_without_a_pinned_revision_names_the_key(tmp_path: Path) -> None:
    finished = _prepare(tmp_path, "data.dataset=JeanKaddour/minipile", "data.validation_split=validation")
    result = (finished.returncode, "data.revision: HF_HUB_OFFLINE=1 needs a pinned commit" in finished.stderr)
    assert result == (2, True)
