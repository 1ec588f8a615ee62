"""Loss and accuracy of a model over validation blocks: the trainer's per-epoch subset and the
full validation of `ebd2n validate` both measure through `evaluate_sequences`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ebd2n.errors import UserError
from ebd2n.targets import IGNORE_INDEX, split_block


@torch.inference_mode()
def evaluate_sequences(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device, amp: bool
) -> tuple[float, float, int]:
    """Mean loss (nats), token accuracy and target count over (inputs, targets) batches.

    `amp`: BF16 autocast on `device`, as the caller's recipe decides (ebd2n.train.step.bf16_autocast).
    Targets of IGNORE_INDEX (padding, and the prompt tokens of supervised caches) are not counted:
    on supervised data these are the completion tokens' loss and accuracy.
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    count = 0
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext()
    for inputs, targets in batches:
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        with autocast:
            logits, _ = model(inputs)
        logits = logits.float().flatten(0, 1)
        flat = targets.flatten()
        loss_sum += F.cross_entropy(logits, flat, ignore_index=IGNORE_INDEX, reduction="sum").double()
        valid = flat != IGNORE_INDEX
        correct += (logits.argmax(-1)[valid] == flat[valid]).sum()
        count += int(valid.sum())
    model.train(was_training)
    if count == 0:
        raise UserError("validation: no targets to evaluate")
    return float(loss_sum) / count, float(correct) / count, count


def block_batches(blocks: torch.Tensor, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) batches of (N, T+1) blocks (masked tokens of supervised caches: IGNORE_INDEX targets)."""
    for start in range(0, blocks.shape[0], batch_size):
        yield split_block(blocks[start : start + batch_size])
