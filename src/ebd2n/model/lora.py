"""Low-rank adapters (LoRA, Hu et al. 2021) and block freezing for fine-tuning recipes.

A LoRA linear keeps the pretrained weight frozen and learns a rank-r update B·A scaled by
alpha/r: A starts Kaiming-uniform and B at zero, so training starts exactly at the base model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ebd2n.config import LoraConfig
from ebd2n.model.gpt import GPT

_ATTENTION = ("q", "k", "v", "o")
_MLP = ("gate", "up", "down")


class LoRALinear(nn.Module):
    """A frozen bias-free linear layer plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, device=base.weight.device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # nn.Linear's default init, as in the LoRA paper
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b)  # (..., out)
        return self.base(x) + self.scale * update

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """W + (alpha/r)·B·A: the plain weight that computes the same function (dropout off)."""
        return self.base.weight + self.scale * (self.lora_b @ self.lora_a)


def freeze_prefix_(model: GPT, blocks: int) -> None:
    """Freeze every parameter of the first `blocks` blocks."""
    for block in model.blocks[:blocks]:
        block.requires_grad_(False)


def apply_lora_(model: GPT, lora: LoraConfig, first_block: int) -> None:
    """Freeze all base weights and put adapters on the target projections of blocks >= first_block."""
    model.requires_grad_(False)
    for block in model.blocks[first_block:]:
        for owner, names in ((block.attn, _ATTENTION), (block.mlp, _MLP)):
            for name in names:
                if name in lora.targets:
                    setattr(owner, name, LoRALinear(getattr(owner, name), lora.rank, lora.alpha, lora.dropout))


@torch.no_grad()
def merged_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The model's weights in plain GPT naming, every adapter merged into its base weight."""
    state = {}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        if name.endswith(".base.weight"):
            prefix = name[: -len(".base.weight")]
            layer = model.get_submodule(prefix)
            name, tensor = f"{prefix}.weight", layer.merged_weight()
        state[name] = tensor
    return state
