"""Low-rank adapters (LoRA, Hu et al. 2021) and block freezing for fine-tuning recipes.

A LoRA linear keeps the pretrained weight frozen and learns a rank-r update B·A scaled by
alpha/r: A starts Kaiming-uniform and B at zero, so training starts exactly at the base model.
LoRA experts do the same for each expert of a fused mixture of experts (a batch of updates).
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
        device = _adapter_device(base.weight)
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

    def merged(self, name: str) -> torch.Tensor:
        """The plain tensor `name` (weight merged, bias as it is)."""
        return self.merged_weight() if name == "weight" else getattr(self.base, name)


class LoRAExperts(nn.Module):
    """Frozen fused experts (gate_up_proj (E, 2F, D), down_proj (E, D, F), as transformers' Qwen2-MoE
    stores them) plus a rank-r update per expert and projection: (E, r, in) A's and (E, out, r) B's.

    The forward is transformers' eager expert loop with each expert's low-rank path added.
    """

    def __init__(self, base: nn.Module, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.scale = alpha / rank
        device = _adapter_device(base.gate_up_proj)
        experts, double, width = base.gate_up_proj.shape
        hidden = base.down_proj.shape[2]
        self.lora_gate_up_a = nn.Parameter(torch.empty(experts, rank, width, device=device))
        self.lora_gate_up_b = nn.Parameter(torch.zeros(experts, double, rank, device=device))
        self.lora_down_a = nn.Parameter(torch.empty(experts, rank, hidden, device=device))
        self.lora_down_b = nn.Parameter(torch.zeros(experts, width, rank, device=device))
        for a in (self.lora_gate_up_a, self.lora_down_a):
            for e in range(experts):  # each expert's A as a LoRA linear's
                nn.init.kaiming_uniform_(a[e], a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """(tokens, D) states, (tokens, k) chosen experts and their weights -> (tokens, D)."""
        base, experts = self.base, self.base.gate_up_proj.shape[0]
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = F.one_hot(top_k_index, num_classes=experts + 1).permute(2, 1, 0)  # (E + 1, k, tokens)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for index in hit:
            e = index[0]
            if e == experts:
                continue
            position, token = torch.where(mask[e])
            x = hidden_states[token]  # (n, D)
            gate_up = F.linear(x, base.gate_up_proj[e]) + self.scale * F.linear(
                F.linear(self.dropout(x), self.lora_gate_up_a[e]), self.lora_gate_up_b[e]
            )
            gate, up = gate_up.chunk(2, dim=-1)
            h = base.act_fn(gate) * up  # (n, F)
            out = F.linear(h, base.down_proj[e]) + self.scale * F.linear(
                F.linear(self.dropout(h), self.lora_down_a[e]), self.lora_down_b[e]
            )
            final.index_add_(0, token, (out * top_k_weights[token, position, None]).to(final.dtype))
        return final

    @torch.no_grad()
    def merged(self, name: str) -> torch.Tensor:
        """The plain fused tensor `name` (gate_up_proj or down_proj) with every expert's update merged."""
        a, b = (
            (self.lora_gate_up_a, self.lora_gate_up_b)
            if name == "gate_up_proj"
            else (self.lora_down_a, self.lora_down_b)
        )
        return getattr(self.base, name) + self.scale * torch.bmm(b, a)


def _adapter_device(weight: torch.Tensor) -> torch.device:
    """Where adapters of `weight` live: its device; for a base left on the meta device by another
    pipeline stage, real tensors outside a meta-device context, so every stage draws the same
    adapters as one process does."""
    return weight.device if not weight.is_meta else torch.empty(0).device


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
        if "experts" in lora.targets and hasattr(getattr(block, "mlp", None), "experts"):
            block.mlp.experts = LoRAExperts(block.mlp.experts, lora.rank, lora.alpha, lora.dropout)
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
            tensor = model.get_submodule(prefix).merged(leaf)
            name = f"{prefix}.{leaf}"
        state[name] = tensor
    return state
