"""Tokenizers of a cache: a byte-level BPE trained on the train split, a local file, or a Hub one.

Whatever its origin, the tokenizer is saved in the cache as `tokenizer.json`, so every run
decodes with exactly the file that produced the tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ebd2n.data.sources import hub_file
from ebd2n.errors import UserError

EOS_TOKEN = "<|endoftext|>"
"""End-of-document token of trained tokenizers (GPT-2's name for it)."""

_EOS_CANDIDATES = (EOS_TOKEN, "</s>", "<|end_of_text|>", "<eos>")
"""EOS spellings looked for in loaded tokenizers, in order (GPT-2, Llama/TinyLlama, Llama 3, Gemma)."""


def train_bpe(documents: Iterable[str], vocab_size: int, progress: bool = False) -> Tokenizer:
    """Byte-level BPE with `vocab_size` entries (EOS included): any text encodes, nothing is unknown."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    tokenizer.train_from_iterator(documents, trainer)
    return tokenizer


def obtain_tokenizer(
    name: str | None,
    revision: str | None,
    train_documents: Callable[[], Iterable[str]],
    vocab_size: int,
    progress: bool = False,
    copy: str | None = None,
) -> tuple[Tokenizer, dict[str, Any]]:
    """The tokenizer a cache asks for and its provenance (name, resolved revision) for the manifest.

    name None trains on `train_documents()`; an existing file is loaded, and so is the tokenizer.json
    of an existing directory (a model in the Hugging Face layout); anything else is a Hub
    repository whose tokenizer.json is downloaded at `revision` (resolved to a commit when None),
    or read from `copy` / the Hugging Face cache offline (see ebd2n.data.sources.hub_snapshot).
    """
    if name is None:
        return train_bpe(train_documents(), vocab_size, progress), {"name": None, "revision": None}
    if Path(name).is_file():
        return _from_file(name), {"name": name, "revision": None}
    if Path(name).is_dir():  # a model directory in the Hugging Face layout
        if not (Path(name) / "tokenizer.json").is_file():
            raise UserError(f"data.tokenizer {name}: a directory without tokenizer.json")
        return _from_file(Path(name) / "tokenizer.json"), {"name": name, "revision": None}
    if name.endswith(".json"):
        raise UserError(f"data.tokenizer {name}: no such file; give an existing tokenizer.json or a Hub name")
    path, resolved = hub_file(name, "tokenizer.json", revision, "data.tokenizer", copy)
    return _from_file(path), {"name": name, "revision": resolved}


def eos_id(tokenizer: Tokenizer) -> int:
    """Id of the tokenizer's end-of-document token (appended after every document)."""
    for token in _EOS_CANDIDATES:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    raise UserError(f"data.tokenizer: no end-of-document token found (looked for {', '.join(_EOS_CANDIDATES)})")


def _from_file(path: str | Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # the Rust loader raises a bare Exception on malformed files
        raise UserError(f"data.tokenizer {path}: not a tokenizers JSON file ({error})") from None
