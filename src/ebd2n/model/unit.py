"""One unit of a model: the piece placement assigns to a device and the dashboard gives a state.

Its own module so that the GPT's units (ebd2n.model.units) and a Hugging Face model's
(ebd2n.model.hf_units) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

UnitKind = Literal["embedding", "attention", "mlp", "head", "norm", "router", "experts", "shared_expert"]


@dataclass(frozen=True)
class Unit:
    """One unit of the model, described from the shapes."""

    name: str
    """'embedding', 'block0.attention', 'block0.mlp', ..., 'head'."""
    kind: UnitKind
    """What the unit computes."""
    block: int | None
    """Decoder layer (block) the unit belongs to; None for the embedding, the head and a final norm."""
    parameters: int
    """Parameters the unit owns (the tied embedding/head matrix is owned by the embedding)."""
    flops_per_token: int
    """Forward FLOPs per token (2 per multiply-add) of the matrix products; norms, rotary and
    softmax are left out. Attention counts QK^T and AV over the full context length."""
    param_prefixes: tuple[str, ...]
    """Prefixes of the unit's names in the model's state_dict."""
    projections: tuple[tuple[str, int, int], ...] = ()
    """(LoRA target, in features, out features) of the unit's linear projections that LoRA can adapt."""
    segment: str | None = None
    """Units of one segment stay on one pipeline stage (a Hugging Face layer's attention or MLP half:
    no residual stream passes between its units); None: the unit is a segment of its own."""
