"""The model as a sequence of units: embedding, each block's attention and MLP, final norm + head
(a Hugging Face model's finer units come from ebd2n.model.hf_units).

Placement assigns contiguous units to devices and the run dashboard reports each unit's state;
both need the units' sizes and costs from the shapes alone, before any model is built.
"""

from __future__ import annotations

from ebd2n.config import hf_architecture
from ebd2n.config.schema import ModelConfig
from ebd2n.model.hf_units import hf_units
from ebd2n.model.unit import Unit, UnitKind

__all__ = ["Unit", "UnitKind", "model_units", "ties_head", "unit_of_parameter"]

_WRAPPER_PREFIXES = ("_orig_mod.", "module.")
"""Prefixes that torch.compile and DDP put in front of parameter names; unit_of_parameter drops them."""


def model_units(cfg: ModelConfig) -> list[Unit]:
    """The units of the model, in forward order; their parameters sum to count_parameters(cfg)."""
    if cfg.source == "huggingface":
        return hf_units(hf_architecture(cfg), cfg.context_length)
    d, f, v, t = cfg.width, cfg.ffn_width, cfg.vocab_size, cfg.context_length
    units = [Unit("embedding", "embedding", None, v * d, 0, ("embed.",))]
    for i in range(cfg.layers):
        units.append(
            Unit(
                name=f"block{i}.attention",
                kind="attention",
                block=i,
                parameters=d + 4 * d * d,  # attn_norm gain; q, k, v, o
                flops_per_token=2 * 4 * d * d + 2 * 2 * t * d,  # projections; QK^T and AV over t positions
                param_prefixes=(f"blocks.{i}.attn_norm.", f"blocks.{i}.attn."),
                projections=tuple((p, d, d) for p in ("q", "k", "v", "o")),
            )
        )
        units.append(
            Unit(
                name=f"block{i}.mlp",
                kind="mlp",
                block=i,
                parameters=d + 3 * d * f,  # mlp_norm gain; gate, up, down
                flops_per_token=2 * 3 * d * f,
                param_prefixes=(f"blocks.{i}.mlp_norm.", f"blocks.{i}.mlp."),
                projections=(("gate", d, f), ("up", d, f), ("down", f, d)),
            )
        )
    # The head owns only the final norm: its projection is the embedding matrix (tied), but it
    # does compute the logits.
    units.append(Unit("head", "head", None, d, 2 * v * d, ("norm.",)))
    return units


def ties_head(cfg: ModelConfig) -> bool:
    """Whether the output head is the embedding matrix (GPT always; a Hugging Face model per its config)."""
    return cfg.source != "huggingface" or hf_architecture(cfg).tied


def unit_of_parameter(name: str) -> str:
    """The unit a GPT parameter (or state_dict entry) belongs to: 'blocks.3.mlp.up.weight' -> 'block3.mlp'.

    'head.weight' is the tied embedding matrix and belongs to 'embedding'. Names from a compiled
    (`_orig_mod.`) or DDP-wrapped (`module.`) model are accepted.
    """
    stripped = name
    while stripped.startswith(_WRAPPER_PREFIXES):
        stripped = stripped.split(".", 1)[1]
    parts = stripped.split(".")
    if parts[0] in ("embed", "head") and len(parts) > 1:
        return "embedding"
    if parts[0] == "norm" and len(parts) > 1:
        return "head"
    if parts[0] == "blocks" and len(parts) > 3 and parts[1].isdigit():
        if parts[2] in ("attn_norm", "attn"):
            return f"block{int(parts[1])}.attention"
        if parts[2] in ("mlp_norm", "mlp"):
            return f"block{int(parts[1])}.mlp"
    raise ValueError(
        f"parameter {name!r} belongs to no unit of the GPT (expected embed.*, blocks.N.*, norm.* or head.*)"
    )
