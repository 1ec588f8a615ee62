"""K replicas of the GPT held as stacked parameters and computed together (the packed-K mode).

Every weight has a leading replica dimension K. The forward pass runs the K models with batched
matrix products over that dimension and one attention call over all K * B sequences, so K small
models cost a few large kernels instead of K times many small ones. AdamW is elementwise, so one
optimizer over the stacked parameters keeps an independent state per replica; gradient clipping
and gossip per replica live in `ebd2n.model.gossip`.

Within a replica q, k, v are fused into one (3 * width, width) matrix and gate, up into one
(2 * ffn_width, width) matrix; `replica_state_dict` splits them back into GPT's names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ebd2n.config.schema import ModelConfig
from ebd2n.model.gpt import GPT, apply_rotary, fill_rotary_
from ebd2n.targets import IGNORE_INDEX


class ReplicaLinear(torch.autograd.Function):
    """y = x @ W^T for every replica: x (K, N, in), W (K, out, in) -> y (K, N, out), no bias.

    Autograd's own backward of bmm(x, W.mT) forms the weight gradient as (x^T g)^T, which needs a
    transposed copy and is the slower product on CPU BLAS; this one forms g^T x, directly in W's
    layout (as nn.Linear does). Under autocast, inputs are cast as autocast would cast them.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            x, weight = x.to(dtype), weight.to(dtype)
        ctx.save_for_backward(x, weight)
        with torch.autocast(device, enabled=False):
            return torch.bmm(x, weight.mT)  # (K, N, out)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        grad = grad.to(x.dtype)
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None  # (K, N, in)
        grad_weight = torch.bmm(grad.mT, x) if ctx.needs_input_grad[1] else None  # (K, out, in)
        return grad_x, grad_weight


class ReplicaCrossEntropy(torch.autograd.Function):
    """Per-token cross-entropy (at least FP32) of logits (M, V) against targets (M,); 0 where IGNORE_INDEX.

    Same values as F.cross_entropy(reduction="none"), but the backward turns the saved
    log-probabilities into the gradient (softmax - one-hot) in place instead of allocating and
    zero-filling more (M, V) buffers: the logits are the largest tensors of a packed step.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        valid = targets != IGNORE_INDEX
        safe = torch.where(valid, targets, 0).unsqueeze(1)  # (M, 1)
        ctx.save_for_backward(log_probs, safe, valid)
        ctx.logits_dtype = logits.dtype
        return torch.where(valid, -log_probs.gather(1, safe).squeeze(1), 0.0)  # (M,)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        log_probs, safe, valid = ctx.saved_tensors
        grad = torch.where(valid, grad, 0.0).unsqueeze(1)  # (M, 1); ignored tokens get none, even NaN
        grad_logits = log_probs.exp_().mul_(grad)  # softmax * grad, in the saved buffer
        grad_logits.scatter_add_(1, safe, -grad)  # minus grad at each target
        return grad_logits.to(ctx.logits_dtype), None


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of x (K, N, width) with per-replica gains weight (K, width); as GPT's RMSNorm."""
    normed = F.rms_norm(x.float(), (x.size(-1),), eps=eps).type_as(x)
    return normed * weight.unsqueeze(1)  # (K, 1, width) broadcast over tokens


class PackedBlock(nn.Module):
    """K pre-norm blocks: stacked gains (K, width) and stacked projection matrices (K, out, in)."""

    def __init__(self, cfg: ModelConfig, num_models: int) -> None:
        super().__init__()
        K, d, f = num_models, cfg.width, cfg.ffn_width
        self.heads = cfg.heads
        self.head_dim = d // cfg.heads
        self.eps = cfg.norm_eps
        self.attn_norm = nn.Parameter(torch.ones(K, d))
        self.qkv = nn.Parameter(torch.empty(K, 3 * d, d))  # rows: q, k, v (nn.Linear layout: out, in)
        self.o = nn.Parameter(torch.empty(K, d, d))
        self.mlp_norm = nn.Parameter(torch.ones(K, d))
        self.gate_up = nn.Parameter(torch.empty(K, 2 * f, d))  # rows: gate, up
        self.down = nn.Parameter(torch.empty(K, d, f))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: int) -> torch.Tensor:
        K, N, C = x.shape  # N = batch * T tokens per replica
        T = N // batch
        qkv = ReplicaLinear.apply(_rms_norm(x, self.attn_norm, self.eps), self.qkv)  # (K, N, 3 * width)
        qkv = qkv.view(K * batch, T, 3, self.heads, self.head_dim)  # (K*B, T, 3, heads, head_dim)
        qk, v = qkv.permute(2, 0, 3, 1, 4).split([2, 1])  # (2 and 1, K*B, heads, T, head_dim)
        q, k = apply_rotary(qk, cos, sin).unbind(0)  # q and k rotated together; each (K*B, heads, T, head_dim)
        y = F.scaled_dot_product_attention(q, k, v.squeeze(0), is_causal=True)  # (K*B, heads, T, head_dim)
        y = y.transpose(1, 2).reshape(K, N, C)  # (K, N, width)
        x = x + ReplicaLinear.apply(y, self.o)
        gate_up = ReplicaLinear.apply(_rms_norm(x, self.mlp_norm, self.eps), self.gate_up)  # (K, N, 2 * ffn)
        gate, up = gate_up.chunk(2, dim=-1)  # (K, N, ffn) each
        return x + ReplicaLinear.apply(F.silu(gate) * up, self.down)


class PackedGPT(nn.Module):
    """K GPTs of one shape as stacked parameters; forward (K, B, T) -> logits (K, B, T, V), losses (K,)."""

    def __init__(self, cfg: ModelConfig, num_models: int, *, init: bool = True) -> None:
        """init=True starts every replica from one GPT(cfg) initialisation (drawn from torch's
        global RNG exactly as GPT(cfg) draws it); init=False leaves the matrices to be loaded."""
        super().__init__()
        if num_models < 1:
            raise ValueError(f"decentralized.num_models must be at least 1, got {num_models}")
        self.cfg = cfg
        self.num_models = num_models
        K, d = num_models, cfg.width
        self.embed = nn.Parameter(torch.empty(K, cfg.vocab_size, d))  # also the tied output head
        self.blocks = nn.ModuleList(PackedBlock(cfg, K) for _ in range(cfg.layers))
        self.norm = nn.Parameter(torch.ones(K, d))
        self.register_buffer("rope_cos", torch.empty(cfg.context_length, d // cfg.heads), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.context_length, d // cfg.heads), persistent=False)
        self.reset_rotary()
        if init:
            state = GPT(cfg).state_dict()
            for i in range(K):
                self.load_replica_state_dict(i, state)

    @classmethod
    def from_model(cls, model: GPT, num_models: int) -> PackedGPT:
        """K replicas that all start from a copy of model's weights (on model's device and dtype)."""
        reference = model.embed.weight
        with torch.device(reference.device):
            packed = cls(model.cfg, num_models, init=False).to(reference.dtype)
        state = model.state_dict()
        for i in range(num_models):
            packed.load_replica_state_dict(i, state)
        return packed

    def reset_rotary(self) -> None:
        """Recompute the rotary cos/sin tables (non-persistent buffers) on their current device."""
        fill_rotary_(self)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (K, B, T) -> logits (K, B, T, vocab) and, with targets (K, B, T), losses (K,):
        losses[i] is replica i's mean cross-entropy over its targets that are not IGNORE_INDEX.
        Train on losses.sum(): each replica's gradient is then that of its own mean loss."""
        K, B, T = idx.shape
        if K != self.num_models:
            raise ValueError(f"input has {K} replica slices, the packed model has num_models={self.num_models}")
        if T > self.cfg.context_length:
            raise ValueError(
                f"sequence of {T} tokens exceeds model.context_length ({self.cfg.context_length}); "
                "cut the input into blocks of at most context_length tokens"
            )
        V = self.cfg.vocab_size
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, head_dim)
        # Replica i's rows of the flattened (K*V, width) table start at i*V.
        offsets = torch.arange(K, device=idx.device).view(K, 1, 1) * V
        x = F.embedding((idx + offsets).view(K, B * T), self.embed.view(K * V, -1))  # (K, B*T, width)
        for block in self.blocks:
            x = block(x, cos, sin, B)
        logits = ReplicaLinear.apply(_rms_norm(x, self.norm, self.cfg.norm_eps), self.embed)  # (K, B*T, vocab)
        if targets is None:
            return logits.view(K, B, T, V), None
        flat_targets = targets.reshape(K * B * T)
        per_token = ReplicaCrossEntropy.apply(logits.view(K * B * T, V), flat_targets).view(K, B * T)
        counts = (flat_targets != IGNORE_INDEX).view(K, B * T).sum(dim=1)  # (K,)
        losses = per_token.sum(dim=1) / counts.clamp(min=1)  # (K,); 0 for a replica without targets
        return logits.view(K, B, T, V), losses

    def replica_param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW parameter groups: weight decay on the stacked matrices, none on the stacked norm gains."""
        norms = {id(self.norm)} | {id(p) for b in self.blocks for p in (b.attn_norm, b.mlp_norm)}
        params = [p for p in self.parameters() if p.requires_grad]
        return [
            {"params": [p for p in params if id(p) not in norms], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) in norms], "weight_decay": 0.0},
        ]

    @torch.no_grad()
    def replica_state_dict(self, i: int) -> dict[str, torch.Tensor]:
        """Replica i's weights in GPT's state_dict naming (copies), ready for GPT.load_state_dict."""
        self._check_replica(i)
        return self._gpt_state(lambda p: p[i])

    @torch.no_grad()
    def average_state_dict(self) -> dict[str, torch.Tensor]:
        """The global average model (FP32 mean over the replicas) in GPT's state_dict naming."""
        return self._gpt_state(lambda p: p.float().mean(dim=0))

    @torch.no_grad()
    def load_replica_state_dict(self, i: int, state: dict[str, torch.Tensor]) -> None:
        """Overwrite replica i with a GPT state_dict (the inverse of replica_state_dict)."""
        for name, view in self.replica_views(i).items():
            view.copy_(state[name])

    def replica_views(
        self, i: int, of: Callable[[nn.Parameter], torch.Tensor] = lambda p: p
    ) -> dict[str, torch.Tensor]:
        """Replica i's share of `of(parameter)` (the parameter itself, or a tensor of its shape such as
        an AdamW moment) for each of GPT's parameters by name: views, written in place to load one."""
        self._check_replica(i)
        return {name: of(param)[i] if rows is None else of(param)[i, rows] for name, param, rows in self._layout()}

    def _layout(self) -> list[tuple[str, nn.Parameter, slice | None]]:
        """(GPT parameter name, the stacked parameter holding it, its rows there; None: all)."""
        d, f = self.cfg.width, self.cfg.ffn_width
        layout = [("embed.weight", self.embed, None)]
        for n, block in enumerate(self.blocks):
            prefix = f"blocks.{n}."
            layout += [
                (prefix + "attn_norm.weight", block.attn_norm, None),
                *(
                    (f"{prefix}attn.{name}.weight", block.qkv, slice(j * d, (j + 1) * d))
                    for j, name in enumerate("qkv")
                ),
                (prefix + "attn.o.weight", block.o, None),
                (prefix + "mlp_norm.weight", block.mlp_norm, None),
                (prefix + "mlp.gate.weight", block.gate_up, slice(0, f)),
                (prefix + "mlp.up.weight", block.gate_up, slice(f, 2 * f)),
                (prefix + "mlp.down.weight", block.down, None),
            ]
        return [*layout, ("norm.weight", self.norm, None)]

    @torch.no_grad()
    def consensus_distance(self) -> float:
        """sqrt of the mean over replicas of ||x_i - x_mean||^2, over all parameters (FP32)."""
        total = torch.zeros((), dtype=torch.float32, device=self.embed.device)
        for p in self.parameters():
            x = p.float()
            total += (x - x.mean(dim=0, keepdim=True)).pow(2).sum()
        return (total / self.num_models).sqrt().item()

    def _gpt_state(self, take: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """GPT-named tensors, each made by take(stacked parameter), split where fused, then copied
        into its own storage (the tied head entry is the embedding tensor itself, as in GPT)."""
        state = {
            name: (take(param) if rows is None else take(param)[rows]).clone() for name, param, rows in self._layout()
        }
        state["head.weight"] = state["embed.weight"]  # tied
        return state

    def _check_replica(self, i: int) -> None:
        if not 0 <= i < self.num_models:
            raise IndexError(f"replica {i} out of range for num_models={self.num_models}")
