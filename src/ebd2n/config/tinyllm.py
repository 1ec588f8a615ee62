"""The one mapping from a tiny-llm recipe (the reference's YAML, e.g. its selected-*.yaml) to ebd2n's schema.

A raw recipe is a tiny-llm recipe when it holds a key only tiny-llm has (TINY_LLM_ONLY). Every
other key means the same in both and passes unchanged; unknown keys stay errors of the ebd2n
schema. The tiny-llm-only keys either have an ebd2n equivalent (the value ebd2n always uses) or
only tune runtime buffering and checkpoint cadence; those are dropped, recorded under
runtime.ignored_keys (result-neutral) and named on stderr once per process.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any

from ebd2n.errors import UserError

EQUIVALENT: dict[str, Any] = {
    "data.shuffle_buffer": 10_000,  # ebd2n.data.sources.SHUFFLE_BUFFER: the same buffer shuffle of streamed documents
    "runtime.compile_mode": "default",  # torch.compile's default mode
    "runtime.sdpa_backend": "auto",  # PyTorch picks the SDPA kernel
    "runtime.attention_backend": "sdpa",  # ebd2n's attention is scaled_dot_product_attention
    "runtime.fused_optimizer": True,  # ebd2n's AdamW is fused on CUDA
}
"""tiny-llm keys whose value here is what ebd2n always does; another value is ignored and named."""

RUNTIME_ONLY = (
    "data.buffer_size_mib",  # read-ahead buffer of tiny-llm's loader; ebd2n reads blocks from memory maps
    "data.prefetch",  # background loading thread of tiny-llm's loader
    "training.checkpoint_every",  # steps between tiny-llm's latest.pt; ebd2n checkpoints at epoch boundaries
    "training.save_epoch_training_state",  # tiny-llm's per-epoch resumable state; ebd2n: checkpoint_policy
)
"""tiny-llm keys that do not change the trained numbers; always ignored and named."""

TINY_LLM_ONLY = (*EQUIVALENT, *RUNTIME_ONLY)

DATA_CHANGING = ("data.shuffle_buffer",)
"""Equivalent keys whose other values would change the data: refused rather than ignored."""

DEFAULTS: dict[str, Any] = {
    "data.source": "huggingface",
    "data.dataset": "allenai/c4",
    "data.dataset_config": "en",  # tiny-llm reads the en/c4-{train,validation}.* shards
    "data.validation_split": "validation",
    "data.tokenizer": "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
    "optimizer.lr": 1e-3,
    "optimizer.beta2": 0.95,
    "runtime.device": "cuda:0",
    "runtime.compile": True,
}
"""tiny-llm defaults that differ from ebd2n's, applied where the tiny-llm recipe leaves them out."""

_announced: set[str] = set()


def is_tiny_llm(raw: Mapping[str, Any]) -> bool:
    """Whether the raw recipe holds a key only tiny-llm recipes have."""
    return any(_get(raw, key) is not _MISSING for key in TINY_LLM_ONLY)


def from_tiny_llm(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ebd2n raw recipe of a tiny-llm recipe (validated afterwards by the ebd2n schema)."""
    data = copy.deepcopy(dict(raw))
    ignored: dict[str, Any] = {}
    for key in TINY_LLM_ONLY:
        value = _pop(data, key)
        if value is _MISSING:
            continue
        if key in DATA_CHANGING and value != EQUIVALENT[key]:
            raise UserError(
                f"{source}: {key}: {value} would change the prepared data; ebd2n shuffles with {EQUIVALENT[key]}"
            )
        if key not in EQUIVALENT or value != EQUIVALENT[key]:
            ignored[key] = value
    for key, value in DEFAULTS.items():
        if _get(data, key) is _MISSING:
            _put(data, key, value)
    _rename_packed_and_optimizer(data, source)
    if _get(data, "training.checkpoint_policy") == "none":  # final and all mean the same in both
        raise UserError(f"{source}: training.checkpoint_policy: tiny-llm's none has no ebd2n counterpart; use final")
    if ignored:
        _put(data, "runtime.ignored_keys", ignored)
        if source not in _announced:
            _announced.add(source)
            names = ", ".join(f"{key}={value}" for key, value in ignored.items())
            print(f"{source}: tiny-llm recipe; ignored (no effect in ebd2n): {names}", file=sys.stderr)
    return data


_MISSING = object()


def _rename_packed_and_optimizer(data: dict[str, Any], source: str) -> None:
    """tiny-llm's optimizer.name (adamw, or accumadamw with its accum_iter) and adaptive
    consensus's start_frac in ebd2n's terms (accum_iter alone; start_fraction)."""
    name = _pop(data, "optimizer.name")
    if name == "adamw" and _get(data, "optimizer.accum_iter") not in (_MISSING, 1):
        raise UserError(f"{source}: optimizer.accum_iter applies to optimizer.name accumadamw, not adamw")
    if name == "accumadamw" and _get(data, "optimizer.accum_iter") is _MISSING:
        raise UserError(f"{source}: optimizer.name accumadamw: set optimizer.accum_iter (its window in steps)")
    if name not in (_MISSING, "adamw", "accumadamw"):
        raise UserError(f"{source}: optimizer.name: {name}; ebd2n trains with adamw or accumadamw")
    consensus = (data.get("decentralized") or {}).get("adaptive_consensus")
    if isinstance(consensus, dict) and "start_frac" in consensus:
        consensus["start_fraction"] = consensus.pop("start_frac")


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    section, _, key = dotted.partition(".")
    node = data.get(section)
    return node.get(key, _MISSING) if isinstance(node, Mapping) else _MISSING


def _pop(data: dict[str, Any], dotted: str) -> Any:
    section, _, key = dotted.partition(".")
    node = data.get(section)
    return node.pop(key, _MISSING) if isinstance(node, dict) else _MISSING


def _put(data: dict[str, Any], dotted: str, value: Any) -> None:
    section, _, key = dotted.partition(".")
    if not isinstance(data.get(section), dict):
        data[section] = {}
    data[section][key] = value
