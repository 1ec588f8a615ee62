"""Training engines: one optimizer step of a synchronous model or of K packed local models.

Every engine (these two and `ebd2n.train.distributed_engine.DistributedEngine`) has the interface
of `ebd2n.train.step.Engine`, so the trainer loop, checkpoints and exact resume are written once
for every mode.
"""

from __future__ import annotations

import math
import os

import torch
from torch import nn

from ebd2n.config import Recipe
from ebd2n.model import GPT, PackedGPT
from ebd2n.model.gossip import clip_per_replica_, mix_
from ebd2n.parallel.distributed import Context
from ebd2n.targets import split_block, target_counts
from ebd2n.train.budget import Budget
from ebd2n.train.schedule import consensus_schedule
from ebd2n.train.step import Engine, StepResult
from ebd2n.train.weights import fine_tuning_model, initial_model


def configure_torch(recipe: Recipe) -> None:
    """CPU threads and determinism from the recipe (training and validation alike: two jobs
    sharing a machine must not each spin all cores)."""
    if recipe.runtime.cpu_threads:
        torch.set_num_threads(recipe.runtime.cpu_threads)
    deterministic = recipe.runtime.deterministic
    if deterministic:  # cuBLAS is deterministic only with a fixed workspace, chosen before its first use
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if recipe.runtime.compile:
        torch.use_deterministic_algorithms(deterministic)  # also tells the compiler (imports inductor)
    else:
        # The same switch without importing torch._inductor, which costs seconds per job.
        torch._C._set_deterministic_algorithms(deterministic, warn_only=False)
    torch.backends.cudnn.benchmark = not deterministic


def build_engine(recipe: Recipe, budget: Budget, device: torch.device, context: Context | None = None) -> Engine:
    """The engine of the recipe's mode, its model initialised from the current torch seed.

    `context` (ebd2n.parallel.distributed.Context) is this process's place in a torchrun job;
    with more than one process the DistributedEngine runs this rank's share.
    """
    if context is not None and context.world_size > 1:
        # Imported here: torch.distributed.pipelining takes a second to import, and one-process jobs never need it.
        from ebd2n.train.distributed_engine import DistributedEngine

        return DistributedEngine(recipe, budget, context)
    if recipe.decentralized is None:
        return SynchronousEngine(recipe, budget, device)
    return PackedEngine(recipe, budget, device)


class SynchronousEngine(Engine):
    """One model; gradient accumulation over micro-batches reaches batch_tokens."""

    def __init__(self, recipe: Recipe, budget: Budget, device: torch.device) -> None:
        super().__init__(recipe, budget, device)
        self.model = fine_tuning_model(recipe, initial_model(recipe)).to(device)
        self.forward = self._compiled(self.model)
        self.optimizer = self._make_optimizer(self.model.param_groups(recipe.optimizer.weight_decay))

    def train_step(self, sequences: torch.Tensor, lr: float) -> StepResult:
        """Forward/backward over micro-batches of (S, T+1) sequences, clip, then step or skip.

        Each micro-batch's mean loss is weighted by its share of the step's counted targets, so the
        step's gradient is that of its mean loss per counted target (for language-model caches,
        every target: the share of rows); a micro-batch without one adds nothing and is not run.
        """
        self._set_lr(lr)
        inputs, targets = split_block(sequences)
        counts = target_counts(targets)
        total = max(sum(counts), 1)
        size = self.budget.micro_batch_size
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        for start in range(0, len(counts), size):
            counted = sum(counts[start : start + size])
            if not counted:
                continue
            chunk_targets = targets[start : start + size]
            with self.autocast():
                logits, loss = self.forward(inputs[start : start + size], chunk_targets)
            share = counted / total
            (loss * share).backward()
            loss_sum += loss.detach() * share
            correct += (logits.detach().argmax(-1) == chunk_targets).sum()
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.recipe.optimizer.grad_clip))
        skipped = not math.isfinite(grad_norm)
        if not skipped:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(loss=float(loss_sum), accuracy=float(correct) / total, grad_norm=grad_norm, skipped=skipped)

    def evaluation_model(self) -> GPT:
        return self.model


class PackedEngine(Engine):
    """K local models as stacked parameters: own data share, own clipping and AdamW moments, gossip."""

    def __init__(self, recipe: Recipe, budget: Budget, device: torch.device) -> None:
        super().__init__(recipe, budget, device)
        settings = recipe.decentralized
        self.k = settings.num_models
        self.topology = settings.topology
        self.scheme = settings.scheme
        self.mixing_version = settings.mixing_version
        self.model = PackedGPT.from_model(initial_model(recipe), self.k).to(device)
        for block in self.model.blocks[: recipe.parallel.freeze_prefix]:
            block.requires_grad_(False)
        self.forward = self._compiled(self.model)
        self.optimizer = self._make_optimizer(self.model.replica_param_groups(recipe.optimizer.weight_decay))
        self.mix_step = 0
        self.consensus = consensus_schedule(recipe, budget)
        self._eval_model = GPT(recipe.model).to(device)

    def train_step(self, sequences: torch.Tensor, lr: float) -> StepResult:
        """Replica i takes every K-th sequence; the driving loss is the sum of replica mean losses,
        each micro-batch weighted by its share of the replica's counted targets in the step."""
        self._set_lr(lr)
        shares = torch.stack([sequences[i :: self.k] for i in range(self.k)])  # (K, S/K, T+1); K divides S
        inputs, targets = split_block(shares)
        counts = target_counts(targets)  # per replica, per row
        totals = [max(sum(rows), 1) for rows in counts]
        size = self.budget.micro_batch_size
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        for start in range(0, len(counts[0]), size):
            weights = [sum(rows[start : start + size]) / total for rows, total in zip(counts, totals, strict=True)]
            if not any(weights):
                continue
            chunk_targets = targets[:, start : start + size]
            with self.autocast():
                logits, losses = self.forward(inputs[:, start : start + size], chunk_targets)
            weight = torch.tensor(weights, device=self.device)
            (losses * weight).sum().backward()
            loss_sum += (losses.detach() * weight).mean()
            correct += (logits.detach().argmax(-1) == chunk_targets).sum()
        params = [p for p in self.model.parameters() if p.requires_grad]
        norms = clip_per_replica_([p.grad for p in params], self.recipe.optimizer.grad_clip)
        skipped = not bool(torch.isfinite(norms).all())
        if not skipped:
            self._apply(params, 1.0 if self.consensus is None else self.consensus.gamma(self.mix_step, lr))
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(
            loss=float(loss_sum), accuracy=float(correct) / sum(totals), grad_norm=float(norms.mean()), skipped=skipped
        )

    @torch.no_grad()
    def _apply(self, params: list[nn.Parameter], gamma: float) -> None:
        """awc mixes before the local AdamW step, atc after it (gamma: adaptive consensus's)."""
        if self.scheme == "awc":
            mix_([p.data for p in params], self.topology, self.mix_step, gamma, self.mixing_version)
            self.optimizer.step()
        else:
            self.optimizer.step()
            mix_([p.data for p in params], self.topology, self.mix_step, gamma, self.mixing_version)
        self.mix_step += 1

    def evaluation_model(self) -> GPT:
        """A synchronous model holding the FP32 global average of the K local models."""
        self._eval_model.load_state_dict(self.model.average_state_dict())
        return self._eval_model

    def epoch_metrics(self) -> dict:
        return {"consensus_distance": self.model.consensus_distance()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "mix_step": self.mix_step}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.mix_step = int(state["mix_step"])
