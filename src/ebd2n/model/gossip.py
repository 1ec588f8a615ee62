"""Gossip between the K local models of a packed run, and their per-replica gradient clipping.

All functions work on stacked tensors whose leading dimension indexes the K replicas. After a
step each replica averages with one peer: x_i <- (x_i + x_peer(i)) / 2, with peer(i) = (i + offset) mod K,
which is the mixing matrix W = I/2 + P_offset/2 (P_offset[i, (i + offset) mod K] = 1). W is doubly
stochastic, so mixing preserves the global average.
"""

from __future__ import annotations

from typing import Literal

import torch

Topology = Literal["one_peer_ring", "one_peer_exponential", "complete"]
TOPOLOGIES: tuple[str, ...] = ("one_peer_ring", "one_peer_exponential", "complete")


def peer_offset(topology: Topology, step: int, num_models: int) -> int:
    """Offset of each replica's peer at this step (replica i averages with (i + offset) mod K).

    one_peer_ring: +1 (right neighbour) on even steps, -1 (left neighbour) on odd steps.
    one_peer_exponential: 2^(step mod log2 K) (Ying et al. 2021); K must be a power of two.
    complete has no single peer (every replica averages with all): ValueError.
    """
    _check_num_models(num_models)
    if topology == "one_peer_ring":
        return 1 if step % 2 == 0 else -1
    if topology == "one_peer_exponential":
        _check_power_of_two(num_models)
        rounds = num_models.bit_length() - 1  # log2 K
        return 1 << (step % rounds) if rounds else 0
    if topology == "complete":
        raise ValueError("topology complete has no single peer: every model averages with all K models")
    raise ValueError(f"unknown topology {topology!r}; expected one of {', '.join(TOPOLOGIES)}")


def mixing_matrix(topology: Topology, step: int, num_models: int) -> torch.Tensor:
    """The (K, K) FP32 matrix W of this step's gossip: x_new[i] = sum_j W[i, j] x[j]."""
    _check_num_models(num_models)
    if topology == "complete":
        return torch.full((num_models, num_models), 1.0 / num_models)
    offset = peer_offset(topology, step, num_models)
    rows = torch.arange(num_models)
    permutation = torch.zeros(num_models, num_models)
    permutation[rows, (rows + offset) % num_models] = 1.0
    return 0.5 * torch.eye(num_models) + 0.5 * permutation


@torch.no_grad()
def mix_(tensors: list[torch.Tensor], topology: Topology, step: int, gamma: float = 1.0) -> None:
    """Gossip in place: every stacked tensor (K, ...) becomes W' @ it, W' = gamma W + (1 - gamma) I
    with W = mixing_matrix(topology, step, K) (adaptive consensus; gamma 1: plain gossip, 0: none)."""
    if not tensors:
        return
    num_models = tensors[0].size(0)
    if any(t.size(0) != num_models for t in tensors):
        raise ValueError("mix_: every tensor must have the same leading (replica) dimension K")
    if topology == "complete":
        for t in tensors:
            mean = t.mean(dim=0, keepdim=True).expand_as(t)
            if gamma == 1:
                t.copy_(mean)
            else:
                t.lerp_(mean, gamma)
        return
    offset = peer_offset(topology, step, num_models) % num_models
    if offset == 0:  # K = 1: a model's only peer is itself
        return
    # torch.roll(x, -offset, 0)[i] = x[(i + offset) mod K], the peer of replica i.
    peers = [torch.roll(t, -offset, dims=0) for t in tensors]
    if gamma != 1:  # x + gamma (W x - x), with W x - x = (peer - x) / 2
        torch._foreach_lerp_(tensors, peers, gamma / 2)
        return
    torch._foreach_add_(tensors, peers)
    torch._foreach_mul_(tensors, 0.5)


@torch.no_grad()
def clip_per_replica_(grads: list[torch.Tensor], max_norm: float | torch.Tensor) -> torch.Tensor:
    """Clip each replica's gradients to a global norm of max_norm (one for all, or a (K,) tensor of
    one per replica), like clip_grad_norm_ per replica.

    grads are stacked (K, ...) tensors. Replica i's norm is taken over its slice of every tensor;
    its slices are scaled by min(1, max_norm / (norm_i + 1e-6)). Returns the K pre-clip norms (FP32).
    A replica whose norm is not finite is left unscaled and its norm returned as is: the caller
    skips the step.
    """
    if not grads:
        raise ValueError("clip_per_replica_: no gradients given")
    num_models = grads[0].size(0)
    per_tensor = [torch.linalg.vector_norm(g.flatten(1), dim=1, dtype=torch.float32) for g in grads]
    norms = torch.linalg.vector_norm(torch.stack(per_tensor), dim=0)  # (K,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    scale = torch.where(torch.isfinite(norms), scale, torch.ones_like(scale))
    for g in grads:
        g.mul_(scale.to(g.dtype).view(num_models, *([1] * (g.dim() - 1))))
    return norms


def _check_num_models(num_models: int) -> None:
    if num_models < 1:
        raise ValueError(f"decentralized.num_models must be at least 1, got {num_models}")


def _check_power_of_two(num_models: int) -> None:
    if num_models & (num_models - 1):
        raise ValueError(
            f"topology one_peer_exponential needs decentralized.num_models to be a power of two, got {num_models}; "
            "use 2, 4, 8, ... models or the one_peer_ring topology"
        )
