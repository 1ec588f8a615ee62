"""The one mapping from a tiny-llm recipe (the reference's YAML, e.g. its selected-*.yaml) to ebd2n's schema.

A raw recipe is a tiny-llm recipe when it holds a key only tiny-llm has (TINY_LLM_ONLY), or is in
the reference's current format (`is_current`: an `lr_schedule` section, a key only that format has,
or no `model:` at all). Every other key means the same in both and passes unchanged; unknown keys
stay errors of the ebd2n schema. The tiny-llm-only keys either have an ebd2n equivalent (the value
ebd2n always uses) or only tune runtime buffering and checkpoint cadence; those are dropped,
recorded under runtime.ignored_keys (result-neutral) and named on stderr once per process.

A current-format recipe means what the reference runs today (`_current`): its `lr_schedule`, its
default 20M shape where `model:` is left out, and for the packed mode its default topology
(complete) and its reciprocal-pair gossip (decentralized.mixing_version 2). The published 2026-09
benchmark's recipes are not of that format and keep the directed shift (version 1). docs/training.md
("tiny-llm recipes") has the table of every key.
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

CURRENT_ONLY = ("data.shuffle_group_size", "runtime.training_backend", "optimizer.accumulation_steps")
"""Keys only the reference's current recipe format has (besides its lr_schedule section)."""

MODEL_20M = {
    "vocab_size": 32000,
    "layers": 8,
    "width": 320,
    "heads": 5,
    "ffn_width": 896,
    "context_length": 1024,
    "rope_theta": 10000.0,
    "norm_eps": 1e-5,
    "init_std": 0.02,
}
"""tiny-llm's default model: the 20M shape (20,403,520 parameters)."""

SCHEDULE_DEFAULTS = {
    "cosine": {"warmup_steps": 312, "min_lr_ratio": 0.0},
    "wsd": {"warmup_steps": 312, "decay_fraction": 0.1},
}
"""tiny-llm's lr_schedule defaults per name (its schema's: cosine decays to zero unless min_lr_ratio is set)."""

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
    """Whether the raw recipe holds a key only tiny-llm recipes have, or is in its current format."""
    return any(_get(raw, key) is not _MISSING for key in TINY_LLM_ONLY) or is_current(raw)


def is_current(raw: Mapping[str, Any]) -> bool:
    """Whether the raw recipe is in the reference's current format (see the module)."""
    return (
        "lr_schedule" in raw
        or (bool(raw) and "model" not in raw)  # an empty file is no recipe
        or _get(raw, "optimizer.name") == "accum_adamw"
        or any(_get(raw, key) is not _MISSING for key in CURRENT_ONLY)
    )


def from_tiny_llm(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ebd2n raw recipe of a tiny-llm recipe (validated afterwards by the ebd2n schema)."""
    data = copy.deepcopy(dict(raw))
    ignored: dict[str, Any] = {}
    if is_current(data):
        _current(data, source, ignored)
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
        if not is_current(raw):
            raise UserError(
                f"{source}: training.checkpoint_policy: tiny-llm's none has no ebd2n counterpart; use final"
            )
        ignored["training.checkpoint_policy"] = _pop(
            data, "training.checkpoint_policy"
        )  # final: validation reads final.pt
    if ignored:
        _put(data, "runtime.ignored_keys", ignored)
        if source not in _announced:
            _announced.add(source)
            names = ", ".join(f"{key}={value}" for key, value in ignored.items())
            print(f"{source}: tiny-llm recipe; ignored (no effect in ebd2n): {names}", file=sys.stderr)
    return data


_MISSING = object()


def _current(data: dict[str, Any], source: str, ignored: dict[str, Any]) -> None:
    """The reference's current format in ebd2n's terms, in place (see the module)."""
    if "model" not in data:
        data["model"] = dict(MODEL_20M)
    packed = data.get("decentralized")
    if isinstance(packed, dict):
        packed.setdefault("topology", "complete")
        packed.setdefault("mixing_version", 2)
    groups = _pop(data, "data.shuffle_group_size")
    if groups is not _MISSING:
        raise UserError(
            f"{source}: data.shuffle_group_size: {groups}: tiny-llm reads groups of {groups} shards in file order, "
            "shuffled within each group by seed; ebd2n does not reproduce that data order (its own shuffle is a "
            "10,000-document buffer): leave the key out to train on ebd2n's order"
        )
    backend = _pop(data, "runtime.training_backend")
    if backend not in (_MISSING, "native", "gh200"):
        raise UserError(f"{source}: runtime.training_backend: {backend}; tiny-llm's are native and gh200")
    if backend is not _MISSING:
        ignored["runtime.training_backend"] = backend  # ebd2n's own engine: the same math, its own kernels
    if _get(data, "optimizer.name") == "accum_adamw":
        _put(data, "optimizer.name", "accumadamw")
        steps = _pop(data, "optimizer.accumulation_steps")
        _put(data, "optimizer.accum_iter", 2 if steps is _MISSING else steps)  # the other line's default
    elif _pop(data, "optimizer.accumulation_steps") not in (_MISSING, 1):
        raise UserError(f"{source}: optimizer.accumulation_steps applies to optimizer.name accum_adamw")
    own = ("schedule", "warmup_fraction", "warmup_tokens", "min_lr_ratio")
    if "lr_schedule" not in data and all(_get(data, f"optimizer.{key}") is _MISSING for key in own):
        data["lr_schedule"] = {"name": "cosine"}  # the reference's default schedule
    _schedule(data, source)


def _schedule(data: dict[str, Any], source: str) -> None:
    """tiny-llm's lr_schedule onto optimizer.schedule: warm-up in updates (x batch_tokens), cosine's
    floor, WSD's decay share with its 1 - sqrt shape."""
    section = data.pop("lr_schedule", None)
    if section is None:
        return
    if not isinstance(section, dict) or section.get("name", "cosine") not in SCHEDULE_DEFAULTS:
        raise UserError(f"{source}: lr_schedule: expected a mapping with name cosine or wsd, got {section!r}")
    name = section.pop("name", "cosine")
    values = SCHEDULE_DEFAULTS[name] | section
    unknown = sorted(set(values) - set(SCHEDULE_DEFAULTS[name]))
    if unknown:
        raise UserError(f"{source}: lr_schedule.{unknown[0]}: not a key of tiny-llm's {name} schedule")
    steps = values["warmup_steps"]
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise UserError(f"{source}: lr_schedule.warmup_steps: {steps!r}; expected a whole number of updates")
    batch = _get(data, "training.batch_tokens")
    _put(data, "optimizer.schedule", name)
    _put(data, "optimizer.warmup_tokens", steps * (32768 if batch is _MISSING else batch) or None)
    if not steps:
        _put(data, "optimizer.warmup_fraction", 0.0)
    if name == "cosine":
        _put(data, "optimizer.min_lr_ratio", values["min_lr_ratio"])
    else:
        _put(data, "optimizer.decay_fraction", values["decay_fraction"])
        _put(data, "optimizer.decay_shape", "sqrt")


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
