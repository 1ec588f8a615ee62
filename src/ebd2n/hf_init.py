"""Tiny Hugging Face models for tests and the demo fine-tune, built offline: random weights of a
tiny family configuration and, unless one is given, a tokenizer trained on the embedded
text-to-SQL set (its own unit, one layer above the data and the model it joins)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ebd2n.data.sql_synthetic import iter_records, split_seed
from ebd2n.data.tokenizer import EOS_TOKEN, train_bpe
from ebd2n.model.hf import init_model

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The chat template written beside a trained tokenizer (Qwen's turn markers)."""

TOKENIZER_TRAINING_BYTES = 400_000
"""Text of the embedded text-to-SQL training records a tiny model's tokenizer is trained on."""


def tiny_hf_model(
    family: str, out_dir: Path, vocab_size: int = 512, seed: int = 0, tokenizer: Path | None = None
) -> Path:
    """`ebd2n hf-init`: a random tiny `family` model in `out_dir` with `tokenizer` (a tokenizer.json),
    or with a byte-level BPE of `vocab_size` trained on the text-to-SQL set, its tokenizer_config.json
    naming the EOS and a chat template."""
    if tokenizer is not None:
        return init_model(family, out_dir, vocab_size, seed=seed, tokenizer=tokenizer)
    records = iter_records(split_seed(0, "train"), TOKENIZER_TRAINING_BYTES)
    trained = train_bpe((text for r in records for text in (r.prompt, r.completion)), vocab_size)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS_TOKEN, "chat_template": CHAT_TEMPLATE}
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "tokenizer.json"
        trained.save(str(path))
        return init_model(family, out_dir, vocab_size, seed=seed, tokenizer=path, tokenizer_config=config)
