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
from ebd2n.model.gpt import GPT, Block

_ATTENTION = ("q", "k", "v", "o")
_MLP = ("gate", "up", "down")


class LoRALinear(nn.Module):
    """A frozen bias-free linear layer plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.scale = alpha / rank
        # A base left on the meta device by another pipeline stage still gets real adapters (outside a
        # meta-device context), so every stage draws the same adapters as one process does.
        device = base.weight.device if not base.weight.is_meta else torch.empty(0).device
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, device=device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, device=device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # nn.Linear's default init, as in the LoRA paper
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b)  # (..., out)
        return self.base(x) + self.scale * update

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """W + (alpha/r)·B·A: the plain weight that computes the same function (dropout off)."""
        return self.base.weight + self.scale * (self.lora_b @ self.lora_a)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's decoder layers: GPT's blocks, or a Hugging Face model's model.layers."""
    return model.blocks if isinstance(model, GPT) else model.model.layers


def _lora_sites(layer: nn.Module) -> list[tuple[nn.Module, str, str]]:
    """(owner, attribute, LoRA target) of every projection of a decoder layer that LoRA can adapt."""
    if isinstance(layer, Block):
        return [(layer.attn, n, n) for n in _ATTENTION] + [(layer.mlp, n, n) for n in _MLP]
    sites = [(layer.self_attn, f"{n}_proj", n) for n in _ATTENTION]
    mlp = getattr(layer.mlp, "shared_expert", layer.mlp)  # a Qwen2-MoE layer adapts its shared expert
    return sites + [(mlp, f"{n}_proj", n) for n in _MLP]


def freeze_prefix_(model: nn.Module, blocks: int) -> None:
    """Freeze every parameter of the first `blocks` decoder layers."""
    for block in decoder_layers(model)[:blocks]:
        block.requires_grad_(False)


def apply_lora_(model: nn.Module, lora: LoraConfig, first_block: int) -> None:
    """Freeze all base weights and put adapters on the target projections of layers >= first_block
    (with lora.train_norms, those layers' norms and the final norm train full rank)."""
    model.requires_grad_(False)
    for block in decoder_layers(model)[first_block:]:
        for owner, attribute, target in _lora_sites(block):
            if target in lora.targets:
                setattr(owner, attribute, LoRALinear(getattr(owner, attribute), lora.rank, lora.alpha, lora.dropout))
        if lora.train_norms:
            block.input_layernorm.requires_grad_(True)
            block.post_attention_layernorm.requires_grad_(True)
    if lora.train_norms:
        model.model.norm.requires_grad_(True)


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights in its plain naming, every adapter merged into its base weight."""
    state = {}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        if ".base." in name:
            prefix, _, leaf = name.rpartition(".base.")
            if leaf == "weight":
                tensor = model.get_submodule(prefix).merged_weight()
            name = f"{prefix}.{leaf}"
        state[name] = tensor
    return state
