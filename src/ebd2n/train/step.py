"""What every training engine shares: the result of one step and the base class of the engines.

An engine owns a model and its optimizer and exposes `train_step`, `evaluation_model`,
`state_dict`, `load_state_dict` and `epoch_metrics`; the single-process engines live in
`ebd2n.train.engine`, the torchrun one in `ebd2n.train.distributed_engine`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from ebd2n.config import Recipe
from ebd2n.train.accum_adamw import AccumAdamW
from ebd2n.train.budget import Budget


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did, for metrics.jsonl and the skip counter."""

    loss: float
    accuracy: float
    grad_norm: float
    skipped: bool


class Engine:
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
        trained = [g for g in groups if g["params"]] or groups[:1]  # a pipeline stage may train nothing
        if opt.accum_iter > 1:
            return AccumAdamW(trained, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, accum_iter=opt.accum_iter)
        return torch.optim.AdamW(
            trained, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, fused=fused, foreach=None if fused else True,
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
