"""Gossip between the K local models of a packed run, and their per-replica gradient clipping.

All functions work on stacked tensors whose leading dimension indexes the K replicas. After a
step each replica averages with one peer: x_i <- (x_i + x_peer(i)) / 2, the mixing matrix
W = I/2 + P/2 (P[i, peer(i)] = 1), which is doubly stochastic, so mixing preserves the global
average. Two rules choose the peer (decentralized.mixing_version):

- 1, the directed shift of the published 2026-09 benchmark's code: peer(i) = (i + offset) mod K,
  offset +1 / -1 on even / odd steps (ring) or 2^(t mod log2 K) (exponential);
- 2, the reference's reciprocal pairs (tiny-llm's packed.py, its recipe identity's mixing_version
  2): the ring pairs (0,1), (2,3), ... on even steps and (1,2), ..., (K-1,0) on odd ones (K even),
  the exponential graph pairs i with i XOR 2^(t mod log2 K); each pair averages both ways.

t is the zero-based index of the optimizer update.
"""

from __future__ import annotations

from typing import Literal

import torch

from ebd2n.config.parallelism import unpaired_ring

Topology = Literal["one_peer_ring", "one_peer_exponential", "complete"]
TOPOLOGIES: tuple[str, ...] = ("one_peer_ring", "one_peer_exponential", "complete")
MIXING_VERSIONS = (1, 2)
"""The peer rules (see the module): 1 directed shifts, 2 reciprocal pairs."""


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


def peers(topology: Topology, step: int, num_models: int, version: int = 1) -> list[int]:
    """peer(i) for every replica i at this step under the rule `version` (see the module); complete
    has no single peer: ValueError."""
    if version == 1:
        offset = peer_offset(topology, step, num_models)
        return [(i + offset) % num_models for i in range(num_models)]
    if version != 2:
        raise ValueError(f"mixing_version {version}: expected one of {', '.join(map(str, MIXING_VERSIONS))}")
    check_pairs(topology, num_models)
    if topology == "complete":
        raise ValueError("topology complete has no single peer: every model averages with all K models")
    if num_models == 1:
        return [0]
    if topology == "one_peer_ring":
        return [(i + (1 if (i + step % 2) % 2 == 0 else -1)) % num_models for i in range(num_models)]
    return [i ^ (1 << (step % (num_models - 1).bit_length())) for i in range(num_models)]


def check_pairs(topology: Topology, num_models: int) -> None:
    """Reciprocal pairs (version 2) need an even K for the ring, a power of two for the exponential graph."""
    _check_num_models(num_models)
    if (problem := unpaired_ring(topology, num_models, 2)) is not None:
        raise ValueError(problem)
    if topology == "one_peer_exponential":
        _check_power_of_two(num_models)


def mixing_matrix(topology: Topology, step: int, num_models: int, version: int = 1) -> torch.Tensor:
    """The (K, K) FP32 matrix W of this step's gossip: x_new[i] = sum_j W[i, j] x[j]."""
    _check_num_models(num_models)
    if topology == "complete":
        return torch.full((num_models, num_models), 1.0 / num_models)
    rows = torch.arange(num_models)
    permutation = torch.zeros(num_models, num_models)
    permutation[rows, torch.tensor(peers(topology, step, num_models, version))] = 1.0
    return 0.5 * torch.eye(num_models) + 0.5 * permutation


@torch.no_grad()
def mix_(tensors: list[torch.Tensor], topology: Topology, step: int, gamma: float = 1.0, version: int = 1) -> None:
    """Gossip in place: every stacked tensor (K, ...) becomes W' @ it, W' = gamma W + (1 - gamma) I
    with W = mixing_matrix(topology, step, K, version) (adaptive consensus; gamma 1: plain gossip, 0: none)."""
    if not tensors:
        return
    num_models = tensors[0].size(0)
    if any(t.size(0) != num_models for t in tensors):
        raise ValueError("mix_: every tensor must have the same leading (replica) dimension K")
    if version != 1:
        _mix_pairs_(tensors, topology, step, gamma, version)
        return
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
    shifted = [torch.roll(t, -offset, dims=0) for t in tensors]
    if gamma != 1:  # x + gamma (W x - x), with W x - x = (peer - x) / 2
        torch._foreach_lerp_(tensors, shifted, gamma / 2)
        return
    torch._foreach_add_(tensors, shifted)
    torch._foreach_mul_(tensors, 0.5)


def _mix_pairs_(tensors: list[torch.Tensor], topology: Topology, step: int, gamma: float, version: int) -> None:
    """Version 2 in the reference's own arithmetic, element by element: the pair's mean (or the
    mean of all, complete), then gamma x that + (1 - gamma) x the model's own."""
    num_models = tensors[0].size(0)
    check_pairs(topology, num_models)
    if num_models == 1 or gamma == 0:
        return
    chosen = None if topology == "complete" else peers(topology, step, num_models, version)
    index = None if chosen is None else torch.tensor(chosen, device=tensors[0].device)
    for t in tensors:
        if index is None:
            mixed = t.mean(dim=0, keepdim=True).expand_as(t).clone()
        else:
            mixed = t.index_select(0, index)
            mixed.add_(t).mul_(0.5)
        if gamma != 1:
            mixed.mul_(gamma).add_(t, alpha=1 - gamma)
        t.copy_(mixed)


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
