"""The Llama-style decoder, in one file, bottom-up: norm, rotary, attention, MLP, block, model.

RMSNorm (weight only), rotary position embedding, causal SDPA attention, SwiGLU MLP, no biases,
and an output head tied to the token embedding. The shape lives in `ModelConfig`
(`ebd2n.config.schema`); `count_parameters(cfg)` there counts exactly the parameters built here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ebd2n.config.schema import ModelConfig
from ebd2n.targets import IGNORE_INDEX


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain and no bias (Zhang & Sennrich 2019, as in Llama)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in FP32 even under BF16 autocast, then return the input's dtype.
        normed = F.rms_norm(x.float(), (x.size(-1),), eps=self.eps).type_as(x)
        return normed * self.weight


def rotary_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each (length, head_dim), in the rotate-half layout.

    Pair j of a head rotates by position * theta^(-2j / head_dim) (Su et al. 2021, RoFormer);
    the first and second halves of the head dimension hold the two members of each pair.
    """
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (head_dim/2,)
    angles = torch.outer(torch.arange(length, dtype=torch.float64), inv_freq)  # (length, head_dim/2)
    angles = torch.cat((angles, angles), dim=-1)  # (length, head_dim)
    return angles.cos().float(), angles.sin().float()


@torch.no_grad()
def fill_rotary_(module: nn.Module) -> None:
    """Fill a model's `rope_cos` / `rope_sin` buffers from its config (GPT and PackedGPT share this)."""
    cfg = module.cfg
    cos, sin = rotary_tables(cfg.width // cfg.heads, cfg.context_length, cfg.rope_theta)
    module.rope_cos.copy_(cos)
    module.rope_sin.copy_(sin)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., T, head_dim) by the angles of positions 0..T-1 (cos, sin: (T, head_dim))."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    """Multi-head causal self-attention with rotary positions; q, k, v, o are bias-free Linears."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.width // cfg.heads
        # Separate projections (not one fused qkv) so that LoRA can target them by name.
        self.q = nn.Linear(cfg.width, cfg.width, bias=False)
        self.k = nn.Linear(cfg.width, cfg.width, bias=False)
        self.v = nn.Linear(cfg.width, cfg.width, bias=False)
        self.o = nn.Linear(cfg.width, cfg.width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, T, head_dim)
        k = self.k(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, T, head_dim)
        v = self.v(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, T, head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, heads, T, head_dim)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, width)
        return self.o(y)


class MLP(nn.Module):
    """SwiGLU feed-forward (Shazeer 2020): down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.width, cfg.ffn_width, bias=False)
        self.up = nn.Linear(cfg.width, cfg.ffn_width, bias=False)
        self.down = nn.Linear(cfg.ffn_width, cfg.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.width, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.width, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """Token embedding, `layers` pre-norm blocks, final norm and the tied output head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        # The layers' own default inits draw from a forked RNG, so init_weights is the only draw
        # from torch's global RNG: a model built on meta and initialised later gets the same
        # weights. (Not built on meta here: initialising meta tensors imports torch._dynamo,
        # seconds of start-up for every training job.)
        with torch.random.fork_rng(devices=[]):
            self.embed = nn.Embedding(cfg.vocab_size, cfg.width)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
            self.norm = RMSNorm(cfg.width, cfg.norm_eps)
            self.head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        # Rotary tables are derived from the config, so they are not saved in the state dict.
        head_dim = cfg.width // cfg.heads
        self.register_buffer("rope_cos", torch.empty(cfg.context_length, head_dim), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.context_length, head_dim), persistent=False)
        self.init_weights()  # also ties head.weight to embed.weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """Draw the initial weights (from torch's global RNG) and fill the rotary tables.

        Every Linear and the embedding: N(0, init_std). The residual output projections (o, down)
        are scaled by 1/sqrt(2 * layers), the scaled init of residual projections of GPT-2
        (Radford et al. 2019), since each block adds two of them to the residual stream. Norm
        gains start at one. Also call this after materialising a model built on the meta device
        (`to_empty` unties the head from the embedding; this ties them again).
        """
        self.head.weight = self.embed.weight  # weight tying (Press & Wolf 2017): one (vocab, width) matrix
        std = self.cfg.init_std
        residual_std = std / math.sqrt(2 * self.cfg.layers)
        nn.init.normal_(self.embed.weight, mean=0.0, std=std)  # also the head's weight (tied)
        for block in self.blocks:
            for linear in (block.attn.q, block.attn.k, block.attn.v, block.mlp.gate, block.mlp.up):
                nn.init.normal_(linear.weight, mean=0.0, std=std)
            for linear in (block.attn.o, block.mlp.down):
                nn.init.normal_(linear.weight, mean=0.0, std=residual_std)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        self.reset_rotary()

    def reset_rotary(self) -> None:
        """Recompute the rotary cos/sin tables (non-persistent buffers) on their current device."""
        fill_rotary_(self)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) token ids -> logits (B, T, vocab) and, with targets (B, T), the mean
        cross-entropy over the targets that are not IGNORE_INDEX."""
        B, T = idx.shape
        if T > self.cfg.context_length:
            raise ValueError(
                f"sequence of {T} tokens exceeds model.context_length ({self.cfg.context_length}); "
                "cut the input into blocks of at most context_length tokens"
            )
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, head_dim)
        x = self.embed(idx)  # (B, T, width)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.head(self.norm(x))  # (B, T, vocab)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().view(B * T, -1), targets.reshape(B * T), ignore_index=IGNORE_INDEX)
        return logits, loss

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW parameter groups: weight decay on the matrices (embedding, projections), not on norms."""
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
