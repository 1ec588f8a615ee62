"""The run dashboard's description tables: who ran what where (identity) and with which settings.

Every value comes back as text; the page's template escapes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ebd2n.config import Recipe, count_parameters, hf_architecture
from ebd2n.quantities import format_duration
from ebd2n.report.html import DASH
from ebd2n.train.schedule import describe_schedule


def identity_rows(run: dict[str, Any], packs: Mapping[int, list[str]] | None = None) -> list[tuple[str, str]]:
    """Who, what and where: every value as text (the template escapes it). `packs`: slice end -> the
    runs of the pack it trained that slice in (packs.json), for a run of packed trials."""
    return [
        ("Purpose", run["purpose"] or DASH),
        ("Run id", run["run_id"]),
        ("Mode", run["mode"]),
        ("Configuration file", run["config_path"] or DASH),
        ("Recipe identity", run["recipe_identity"]),
        ("Cache identity", run["cache_identity"]),
        ("Trainer source hash", run["source_hash"]),
        *_model_identity(run.get("model")),
        *([("Trained in packs", _packs(run["run_id"], packs))] if packs else []),
        ("Host", run["host"]),
        ("Devices", _devices(run)),
        ("GPU slots (CUDA_VISIBLE_DEVICES)", run.get("visible_devices") or DASH),
        ("Python", run["python"]),
        ("PyTorch", run["torch"]),
        ("CUDA", run["cuda"] or "none (CPU)"),
        ("Started", _time(run["started"])),
        (
            "Updated" if run.get("state") else "Ended",
            f"{_time(run['ended'])} ({_duration(run['started'], run['ended'])})",
        ),
    ]


def _packs(run_id: str, packs: Mapping[int, list[str]]) -> str:
    """'to epoch 1 with lr0.003-..., lr0.006-...; to epoch 2 with ...': each slice's pack mates."""
    return "; ".join(
        f"to epoch {end} with {', '.join(m for m in members if m != run_id) or 'none left (trained alone)'}"
        for end, members in sorted(packs.items())
    )


def _model_identity(model: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The fine-tuned Hugging Face model: name and revision (or its directory), config and weights hashes."""
    if model is None:
        return []
    return [
        ("Hugging Face model", model["name"] or model["path"]),
        ("Model revision", model["revision"] or DASH),
        ("Model config SHA-256", model["config_sha256"]),
        ("Model weights SHA-256", model["weights_sha256"]),
    ]


def _architecture(model) -> list[tuple[str, str]]:
    """A Hugging Face model's family, attention heads and experts, from its config.json."""
    if model.source != "huggingface":
        return []
    arch = hf_architecture(model)
    rows = [("Family", arch.family), ("Key/value heads", str(arch.kv_heads))]
    if arch.experts:
        rows.append(
            (
                "Experts",
                f"{arch.experts}, {arch.experts_per_token} per token, MLP width {arch.expert_ffn_width:,}; "
                f"shared expert {arch.shared_ffn_width:,}; {len(arch.sparse_layers)} sparse layers",
            )
        )
    return rows


def _pretrained(model) -> str | None:
    """A Hugging Face model's name@revision (or directory): where a fine-tune's weights start."""
    if model.source != "huggingface":
        return None
    return f"{model.name}@{model.revision}" if model.name else model.path


def _devices(run: dict[str, Any]) -> str:
    """'4 × NVIDIA H200', or 'CPU' for a run without CUDA."""
    if run["cuda"] is None:
        return "CPU"
    return ", ".join(f"{count} × {name}" for name, count in Counter(run["devices"]).items())


def _time(stamp: str) -> str:
    return datetime.fromisoformat(stamp).isoformat(sep=" ")


def _duration(started: str, ended: str) -> str:
    return format_duration((datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds())


def settings_groups(recipe: Recipe, run: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Hyper-parameters in groups of (label, value)."""
    model, optimizer, training, parallel = recipe.model, recipe.optimizer, recipe.training, recipe.parallel
    numerics = run["numerics"]
    return [
        (
            "Model",
            [
                ("Blocks", str(model.layers)),
                ("Width", str(model.width)),
                ("Heads", str(model.heads)),
                ("MLP width", str(model.ffn_width)),
                ("Context length", str(model.context_length)),
                ("Vocabulary", f"{model.vocab_size:,}"),
                ("Parameters (one model)", f"{count_parameters(model):,}"),
                *_architecture(model),
            ],
        ),
        (
            "Optimisation",
            [
                ("Optimizer", f"AdamW, beta1 {optimizer.beta1:g}, beta2 {optimizer.beta2:g}, eps {optimizer.eps:g}"),
                ("Peak learning rate", f"{optimizer.lr:g}"),
                ("Schedule", describe_schedule(optimizer)),
                ("Weight decay", f"{optimizer.weight_decay:g}"),
                ("Gradient clip", f"{optimizer.grad_clip:g}"),
                ("Tokens per step", f"{training.batch_tokens:,}"),
                ("Token budget", _budget(recipe)),
                ("Seed", str(recipe.runtime.seed)),
                ("Initial weights", training.init_from or _pretrained(model) or "random initialisation"),
            ],
        ),
        (
            "Numerics",
            [
                ("Compute dtype", numerics["dtype"]),
                ("torch.compile", _yes(numerics["compile"])),
                ("Deterministic", _yes(numerics["deterministic"])),
            ],
        ),
        (
            "Pipeline",
            [
                ("Pipeline stages", str(parallel.pipeline_stages)),
                ("Data-parallel replicas", str(parallel.data_parallel)),
                ("Pipeline depth", f"{parallel.pipeline_depth} (micro-batches in flight)"),
                ("Schedule", parallel.schedule),
                ("Micro-batch", f"{training.micro_batch_size} sequences"),
            ],
        ),
        ("Freeze and LoRA", [("Frozen prefix", _frozen(parallel.freeze_prefix)), ("LoRA", _lora(recipe))]),
        ("Decentralized", _decentralized(recipe)),
    ]


def _budget(recipe: Recipe) -> str:
    training = recipe.training
    total = f"{training.max_tokens:,}" if training.max_tokens else f"{training.tokens_per_parameter:g} per parameter"
    epoch = (
        f"{training.epoch_tokens:,}"
        if training.epoch_tokens
        else f"{training.epoch_tokens_per_parameter:g} per parameter"
    )
    return f"{total} tokens, epochs of {epoch}"


def _frozen(prefix: int) -> str:
    return "none" if prefix == 0 else "block 0" if prefix == 1 else f"blocks 0–{prefix - 1}"


def _lora(recipe: Recipe) -> str:
    lora = recipe.parallel.lora
    if lora is None:
        return "none (full-rank training)"
    norms = "; norms full rank" if lora.train_norms else ""
    return f"rank {lora.rank}, alpha {lora.alpha:g}, dropout {lora.dropout:g}, on {', '.join(lora.targets)}{norms}"


def _decentralized(recipe: Recipe) -> list[tuple[str, str]]:
    settings = recipe.decentralized
    if settings is None:
        return [("Training", "synchronous (one model)")]
    return [
        ("Local models", str(settings.num_models)),
        ("Topology", settings.topology),
        ("Scheme", settings.scheme),
        ("Gossip rule", GOSSIP_RULES[settings.mixing_version]),
    ]


GOSSIP_RULES = {
    1: "mixing_version 1: a directed shift (the published 2026-09 benchmark's)",
    2: "mixing_version 2: reciprocal pairs (the reference's current rule)",
}
"""What each `decentralized.mixing_version` mixes with, as the run dashboard names it (ebd2n.parallel.gossip)."""


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
