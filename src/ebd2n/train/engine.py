"""Training engines: one optimizer step of a synchronous model or of K packed local models.

Both expose the same small interface (`train_step`, `evaluation_model`, `state_dict`,
`load_state_dict`, `epoch_metrics`), so the trainer loop, checkpoints and exact resume are
written once for every mode.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ebd2n.config import Recipe, load_recipe
from ebd2n.errors import UserError
from ebd2n.layout import run_paths
from ebd2n.model import GPT, PackedGPT
from ebd2n.model.gossip import clip_per_replica_, mix_
from ebd2n.model.lora import apply_lora_, freeze_prefix_, merged_state_dict
from ebd2n.train.budget import Budget
from ebd2n.train.checkpoint import load_checkpoint, run_dir_of

if TYPE_CHECKING:  # parallel: imported for the annotation only (ebd2n.parallel builds on this module)
    from ebd2n.parallel.distributed import Context


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did, for metrics.jsonl and the skip counter."""

    loss: float
    accuracy: float
    grad_norm: float
    skipped: bool


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


def resolve_device(name: str) -> torch.device:
    """`auto` means CUDA when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_engine(recipe: Recipe, budget: Budget, device: torch.device, context: Context | None = None) -> _Engine:
    """The engine of the recipe's mode, its model initialised from the current torch seed.

    `context` (ebd2n.parallel.distributed.Context) is this process's place in a torchrun job;
    with more than one process the DistributedEngine runs this rank's share.
    """
    if context is not None and context.world_size > 1:  # parallel: a multi-process job
        # Imported here: ebd2n.parallel.engine builds on this module.
        from ebd2n.parallel.engine import DistributedEngine

        return DistributedEngine(recipe, budget, context)
    if recipe.decentralized is None:
        return SynchronousEngine(recipe, budget, device)
    return PackedEngine(recipe, budget, device)


class _Engine:
    """Shared pieces: autocast, AdamW construction, LR assignment, state assembly."""

    model: nn.Module
    optimizer: torch.optim.Optimizer

    def __init__(self, recipe: Recipe, budget: Budget, device: torch.device) -> None:
        self.recipe = recipe
        self.budget = budget
        self.device = device
        self.use_amp = device.type == "cuda" and recipe.runtime.amp

    def autocast(self) -> contextlib.AbstractContextManager:
        """BF16 autocast on CUDA; the CPU computes in FP32."""
        if self.use_amp:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _make_optimizer(self, groups: list[dict]) -> torch.optim.Optimizer:
        """AdamW (fused on CUDA, foreach on CPU); groups carry their own weight decay."""
        opt = self.recipe.optimizer
        fused = self.device.type == "cuda"
        return torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps,
            fused=fused, foreach=None if fused else True,
        )

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _compiled(self, module: nn.Module) -> nn.Module:
        return torch.compile(module) if self.recipe.runtime.compile else module

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def epoch_metrics(self) -> dict:
        return {}


class SynchronousEngine(_Engine):
    """One model; gradient accumulation over micro-batches reaches batch_tokens."""

    def __init__(self, recipe: Recipe, budget: Budget, device: torch.device) -> None:
        super().__init__(recipe, budget, device)
        self.model = fine_tuning_model(recipe, initial_model(recipe)).to(device)
        self.forward = self._compiled(self.model)
        self.optimizer = self._make_optimizer(self.model.param_groups(recipe.optimizer.weight_decay))

    def train_step(self, sequences: torch.Tensor, lr: float) -> StepResult:
        """Forward/backward over micro-batches of (S, T+1) sequences, clip, then step or skip."""
        self._set_lr(lr)
        rows = sequences.shape[0]  # fewer than a full batch at the end of some epochs
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        for chunk in sequences.split(self.budget.micro_batch_size):
            inputs, targets = chunk[:, :-1], chunk[:, 1:]
            with self.autocast():
                logits, loss = self.forward(inputs, targets)
            share = chunk.shape[0] / rows  # the step's gradient is that of its mean token loss
            (loss * share).backward()
            loss_sum += loss.detach() * share
            correct += (logits.detach().argmax(-1) == targets).sum()
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.recipe.optimizer.grad_clip))
        skipped = not math.isfinite(grad_norm)
        if not skipped:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(
            loss=float(loss_sum),
            accuracy=float(correct) / (sequences.shape[0] * (sequences.shape[1] - 1)),
            grad_norm=grad_norm,
            skipped=skipped,
        )

    def evaluation_model(self) -> GPT:
        return self.model


class PackedEngine(_Engine):
    """K local models as stacked parameters: own data share, own clipping and AdamW moments, gossip."""

    def __init__(self, recipe: Recipe, budget: Budget, device: torch.device) -> None:
        super().__init__(recipe, budget, device)
        settings = recipe.decentralized
        self.k = settings.num_models
        self.topology = settings.topology
        self.scheme = settings.scheme
        self.model = PackedGPT.from_model(initial_model(recipe), self.k).to(device)
        for block in self.model.blocks[: recipe.parallel.freeze_prefix]:
            block.requires_grad_(False)
        self.forward = self._compiled(self.model)
        self.optimizer = self._make_optimizer(self.model.replica_param_groups(recipe.optimizer.weight_decay))
        self.mix_step = 0
        self._eval_model = GPT(recipe.model).to(device)

    def train_step(self, sequences: torch.Tensor, lr: float) -> StepResult:
        """Replica i takes every K-th sequence; the driving loss is the sum of replica mean losses."""
        self._set_lr(lr)
        shares = torch.stack([sequences[i :: self.k] for i in range(self.k)])  # (K, S/K, T+1); K divides S
        rows = shares.shape[1]  # fewer than a full share at the end of some epochs
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        for chunk in shares.split(self.budget.micro_batch_size, dim=1):
            inputs, targets = chunk[..., :-1], chunk[..., 1:]
            with self.autocast():
                logits, losses = self.forward(inputs, targets)
            share = chunk.shape[1] / rows
            (losses.sum() * share).backward()
            loss_sum += losses.detach().mean() * share
            correct += (logits.detach().argmax(-1) == targets).sum()
        params = [p for p in self.model.parameters() if p.requires_grad]
        norms = clip_per_replica_([p.grad for p in params], self.recipe.optimizer.grad_clip)
        skipped = not bool(torch.isfinite(norms).all())
        if not skipped:
            self._apply(params)
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(
            loss=float(loss_sum),
            accuracy=float(correct) / (sequences.shape[0] * (sequences.shape[1] - 1)),
            grad_norm=float(norms.mean()),
            skipped=skipped,
        )

    @torch.no_grad()
    def _apply(self, params: list[nn.Parameter]) -> None:
        """awc mixes before the local AdamW step, atc after it."""
        if self.scheme == "awc":
            mix_([p.data for p in params], self.topology, self.mix_step)
            self.optimizer.step()
        else:
            self.optimizer.step()
            mix_([p.data for p in params], self.topology, self.mix_step)
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


def initial_model(recipe: Recipe) -> GPT:
    """A fresh GPT from the current torch seed, or the weights of training.init_from."""
    model = GPT(recipe.model)
    if recipe.training.init_from:
        model.load_state_dict(checkpoint_weights(Path(recipe.training.init_from)))
    return model


def checkpoint_weights(path: Path) -> dict:
    """Plain GPT weights of any ebd2n checkpoint (its run's recipe.yaml says how to read it)."""
    recipe_path = run_paths(run_dir_of(path)).recipe
    if not recipe_path.is_file():
        raise UserError(f"training.init_from {path}: no {recipe_path.name} in its run directory")
    return evaluation_state_dict(load_recipe(recipe_path), load_checkpoint(path)["engine"])


def fine_tuning_model(recipe: Recipe, model: GPT) -> GPT:
    """Apply the recipe's frozen prefix and LoRA adapters (no-ops for plain training)."""
    lora, prefix = recipe.parallel.lora, recipe.parallel.freeze_prefix
    if lora is not None:
        apply_lora_(model, lora, first_block=prefix)
    elif prefix:
        freeze_prefix_(model, prefix)
    return model


def evaluation_state_dict(recipe: Recipe, state: dict) -> dict:
    """Plain GPT weights a checkpoint is evaluated with (packed: the replica average; LoRA: merged)."""
    if recipe.decentralized is None:
        if recipe.parallel.lora is None:
            return state["model"]
        with torch.device("meta"):
            model = fine_tuning_model(recipe, GPT(recipe.model))
        model.load_state_dict(state["model"], assign=True)
        return merged_state_dict(model)
    packed = PackedGPT(recipe.model, recipe.decentralized.num_models, init=False)
    packed.load_state_dict(state["model"])
    return packed.average_state_dict()

