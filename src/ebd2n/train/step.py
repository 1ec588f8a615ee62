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


def takes_cuda_path(recipe: Recipe, device: torch.device) -> bool:
    """Whether a run on `device` takes the CUDA path's decisions (fused AdamW; BF16 autocast when
    runtime.amp): on CUDA, and on the CPU under the test-only runtime.cuda_path_on_cpu, so that CI
    executes the code every GPU run executes."""
    return device.type == "cuda" or recipe.runtime.cuda_path_on_cpu


def bf16_autocast(recipe: Recipe, device: torch.device) -> bool:
    """Whether forward passes on `device` run under BF16 autocast: training steps, subset and full validation."""
    return recipe.runtime.amp and takes_cuda_path(recipe, device)


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
        self.use_amp = bf16_autocast(recipe, device)

    def autocast(self) -> contextlib.AbstractContextManager:
        """BF16 autocast on the CUDA path (`bf16_autocast`); otherwise FP32."""
        if self.use_amp:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _make_optimizer(self, groups: list[dict]) -> torch.optim.Optimizer:
        """AdamW (fused on the CUDA path, `takes_cuda_path`; foreach otherwise); groups carry their own weight decay."""
        opt = self.recipe.optimizer
        fused = takes_cuda_path(self.recipe, self.device)
        trained = [g for g in groups if g["params"]] or groups[:1]  # a pipeline stage may train nothing
        if opt.accum_iter > 1:
            return AccumAdamW(trained, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, accum_iter=opt.accum_iter)
        return torch.optim.AdamW(
            trained, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, fused=fused, foreach=None if fused else True
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
