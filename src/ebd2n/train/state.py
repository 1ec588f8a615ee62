"""The trainer's stateful parts besides the engine and the metrics writer: the data position, the
random number generators and the counters. Each has `state_dict()`/`load_state_dict()`, as torch
modules and optimizers do, so a checkpoint is their assembly (ebd2n.train.checkpoint.CheckpointManager).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ebd2n.data import BlockReader, train_block_indices
from ebd2n.train.budget import Budget


class DataPosition:
    """Where the training order stands: the order is a pure function of the seed and the position,
    so the number of batches drawn is the data's whole state."""

    def __init__(self, reader: BlockReader, budget: Budget, seed: int, device: torch.device) -> None:
        self.reader, self.budget, self.seed, self.device = reader, budget, seed, device
        self.step = 0
        """0-based index of the next step's batch (= optimizer steps taken)."""

    def next_batch(self) -> torch.Tensor:
        """The (S, T+1) sequences of the next step (an epoch's last step may be shortened)."""
        start, count = self.budget.step_span(self.step)
        indices = train_block_indices(self.reader.num_blocks, self.seed, start, count)
        self.step += 1
        return self.reader.read(indices).to(self.device, non_blocking=True)

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


class RandomState:
    """torch's generators (the CPU's and every CUDA device's)."""

    def state_dict(self) -> dict[str, Any]:
        state = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class Progress:
    """Counters carried across slices: epochs done, skipped steps, the best subset epoch, the jobs."""

    epoch: int = 0
    skipped_steps: int = 0
    consecutive_skips: int = 0
    best: dict | None = None
    job_ids: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in asdict(Progress(**state)).items():  # unknown or missing counters fail here
            setattr(self, name, value)
