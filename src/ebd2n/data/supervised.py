"""Prompt/completion records as masked token streams: the supervised side of a cache.

A record becomes its prompt's tokens, stored as their bitwise complements ~t (negative: no loss),
then its completion's tokens, ending with the end-of-sequence token (both carry loss). The
prompt and completion are tokenized separately, so the mask falls exactly on their border.

Formats (data.supervised.format):
- plain: prompt + "\\n", then completion + EOS.
- chat: the tokenizer's chat template (tokenizer_config.json) rendered with one user turn (the
  prompt) and one assistant turn (the completion); the prompt part is the rendering of the user
  turn with the generation prompt, the completion part the rest. The completion ends at the last
  EOS it holds (template text after the end of turn is dropped), or gets one.

Layouts (data.supervised.packing): packed records follow each other in the stream; padded ones
each fill one block of context_length + 1 tokens, padded with masked EOS, or truncated to it.
`ebd2n.targets.split_block` turns either into inputs and targets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from ebd2n.config.schema import SupervisedConfig
from ebd2n.data.sources import hub_file
from ebd2n.errors import UserError

DTYPE = np.dtype("<i4")
"""Token dtype of supervised caches: signed, for the masked (complemented) ids."""

TOKENIZER_CONFIG = "tokenizer_config.json"


def tokenizer_config(name: str | None, revision: str | None, copy: str | None) -> dict[str, Any]:
    """The tokenizer_config.json of data.tokenizer ({} for a trained tokenizer or where there is none):
    in a model directory, beside a tokenizer.json file, or in the Hub repository."""
    if name is None:
        return {}
    local = Path(name)
    if local.is_dir() or local.is_file():
        path = (local if local.is_dir() else local.parent) / TOKENIZER_CONFIG
        if not path.is_file():
            return {}
    else:
        path = Path(hub_file(name, TOKENIZER_CONFIG, revision, "data.tokenizer", copy)[0])
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"data.tokenizer {path}: not a readable JSON file ({type(error).__name__})") from None
    if not isinstance(config, dict):
        raise UserError(f"data.tokenizer {path}: not a JSON object")
    return config


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


class RecordEncoder:
    """Encodes batches of (prompt, completion) records into one masked int32 stream, noting the
    records cut short (padded layout) on the way."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        settings: SupervisedConfig,
        config: dict[str, Any],
        default_eos: int,
        block_len: int | None,
    ) -> None:
        self.tokenizer, self.block_len = tokenizer, block_len
        eos_text = _token_text(config.get("eos_token"))
        self.eos = tokenizer.token_to_id(eos_text) if eos_text else None
        if self.eos is None:
            self.eos = default_eos
        self.template = _chat_template(config) if settings.format == "chat" else None
        self._cut: list[tuple[bool, bool]] = []
        """Per record encoded (padded layout): (truncated to the block, no completion token within it)."""

    def cut_counts(self, records: int) -> dict[str, int]:
        """Of the first `records` records: those longer than a block, cut to it, and those whose
        prompt alone fills the block (kept: they carry no loss)."""
        cut = self._cut[:records]
        return {"truncated": sum(t for t, _ in cut), "without_completion": sum(w for _, w in cut)}

    def provenance(self) -> dict[str, Any]:
        """What the manifest records about the encoding (besides the request)."""
        return {
            "eos_id": self.eos,
            "eos_token": self.tokenizer.id_to_token(self.eos),
            "block_len": self.block_len,
            "chat_template": self.template.source if self.template else None,
        }

    def __call__(self, batch: Sequence[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's masked tokens and where each record ends."""
        prompts, completions = zip(*(self._texts(prompt, completion) for prompt, completion in batch), strict=True)
        encode = self.tokenizer.encode_batch_fast
        pieces, ends, length = [], [], 0
        for prompt, completion in zip(
            encode(list(prompts), add_special_tokens=False),
            encode(list(completions), add_special_tokens=False),
            strict=True,
        ):
            record = np.concatenate([~np.array(prompt.ids, dtype=DTYPE), self._ended(completion.ids)])
            if self.block_len is not None:
                record = self._padded(record, len(prompt.ids))
            pieces.append(record)
            length += len(record)
            ends.append(length)
        return np.concatenate(pieces), np.array(ends)

    def _texts(self, prompt: str, completion: str) -> tuple[str, str]:
        if self.template is None:
            return prompt + "\n", completion
        return self.template.split(prompt, completion)

    def _ended(self, ids: list[int]) -> np.ndarray:
        """Completion ids ending with EOS: cut after the last EOS they hold, or one appended."""
        completion = np.array(ids, dtype=DTYPE)
        ends = np.flatnonzero(completion == self.eos)
        if len(ends):
            return completion[: ends[-1] + 1]
        return np.append(completion, DTYPE.type(self.eos))

    def _padded(self, record: np.ndarray, prompt_tokens: int) -> np.ndarray:
        """One block: the record padded with masked EOS, or truncated."""
        self._cut.append((len(record) > self.block_len, prompt_tokens >= self.block_len))
        if len(record) > self.block_len:
            return record[: self.block_len]
        return np.concatenate([record, np.full(self.block_len - len(record), ~self.eos, dtype=DTYPE)])


class ChatTemplate:
    """A tokenizer's chat template, rendered in Jinja2's immutable sandbox.

    The sandbox keeps a template from reaching Python; autoescaping stays off because the
    output is model text, not HTML (escaping would change the quotes of every SQL literal).
    """

    def __init__(self, source: str, special_tokens: dict[str, str | None]) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False)
        environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        environment.globals["raise_exception"] = raise_exception
        self.source = source
        self._special = special_tokens
        try:
            self._template = environment.from_string(source)
        except TemplateError as error:
            raise UserError(f"data.tokenizer: the chat template does not compile ({error})") from None

    def render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        from jinja2 import TemplateError

        try:
            return self._template.render(messages=messages, add_generation_prompt=generation_prompt, **self._special)
        except TemplateError as error:
            raise UserError(f"data.tokenizer: the chat template fails on a record ({error})") from None

    def split(self, prompt: str, completion: str) -> tuple[str, str]:
        """(prompt text, completion text) of one user turn and one assistant turn."""
        user = {"role": "user", "content": prompt}
        head = self.render([user], generation_prompt=True)
        whole = self.render([user, {"role": "assistant", "content": completion}], generation_prompt=False)
        if not whole.startswith(head):
            raise UserError(
                "data.supervised.format chat: the tokenizer's chat template does not render the prompt as the start "
                "of the conversation; use data.supervised.format plain"
            )
        return head, whole[len(head) :]


def _chat_template(config: dict[str, Any]) -> ChatTemplate:
    template = config.get("chat_template")
    if isinstance(template, list):  # several named templates: the default one
        template = next(
            (t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None
        )
    if not isinstance(template, str):
        raise UserError(
            f"data.supervised.format chat: data.tokenizer has no chat_template in its {TOKENIZER_CONFIG}; "
            "give a tokenizer with one, or use data.supervised.format plain"
        )
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    return ChatTemplate(template, {name: _token_text(config.get(name)) for name in names})
