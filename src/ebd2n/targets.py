"""IGNORE_INDEX and the decoding of cache blocks into inputs and targets, spelled once for the
data that pads or masks targets and the engines, validation and losses that skip them.

A foundation module: data and model are peers, and both need it.

A block is context_length + 1 token ids. Supervised caches store a token that carries no loss
(a prompt token, padding) as its bitwise complement ~t (negative); language-model caches hold
no negative id, so their blocks decode exactly as before: inputs block[:-1], targets block[1:].
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100
"""Target of padded or masked positions, counted by no loss or accuracy (torch's cross_entropy default ignore_index)."""


def split_block(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of integer blocks (..., T + 1): the tokens with masks removed, and the
    next tokens with IGNORE_INDEX where masked. Any leading dimensions (rows, replicas) pass through."""
    masked = blocks < 0
    tokens = torch.where(masked, ~blocks, blocks)
    targets = tokens[..., 1:].masked_fill(masked[..., 1:], IGNORE_INDEX)
    return tokens[..., :-1], targets


def target_counts(targets: torch.Tensor) -> list[int]:
    """Targets that carry loss, per row of (..., rows, T) targets, as Python ints (one device sync)."""
    return (targets != IGNORE_INDEX).sum(-1).tolist()
