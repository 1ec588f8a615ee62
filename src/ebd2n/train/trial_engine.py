"""K synchronous runs of one model shape trained as one packed model: packed trials.

A 20M model cannot fill a GPU on its own, and the packed-K engine already computes K models with
batched kernels. Here the K replicas are K runs of a sweep: no mixing, each member initialised from
its own seed, trained on its own batches with its own micro-batch weights, clipping and AdamW
hyperparameters (ebd2n.train.member_adamw). `member(i)` is member i as an engine of its own whose
state_dict is the one its solo run saves (SynchronousEngine's model and AdamW names), so each run's
checkpoints keep the solo layout and a run can resume packed or alone from either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ebd2n.config import Recipe
from ebd2n.model import GPT, PackedGPT
from ebd2n.model.gossip import clip_per_replica_
from ebd2n.targets import split_block, target_counts
from ebd2n.train.budget import Budget
from ebd2n.train.member_adamw import MemberAdamW, MemberSettings
from ebd2n.train.pack_rules import pack_refusal
from ebd2n.train.step import Engine, StepResult, takes_cuda_path
from ebd2n.train.weights import initial_model, model_skeleton


class TrialPack:
    """The K members' weights as one PackedGPT, their AdamW moments in one MemberAdamW."""

    def __init__(self, recipes: Sequence[Recipe], budget: Budget, device: torch.device) -> None:
        refusal = pack_refusal(recipes)
        if refusal is not None:
            raise ValueError(f"these runs do not pack: {refusal}")
        self.recipes, self.budget, self.device = list(recipes), budget, device
        self.model = PackedGPT(recipes[0].model, len(recipes), init=False).to(device)
        self.rng_states = []
        for i, recipe in enumerate(recipes):  # each member drawn from its seed, as its solo run draws it
            torch.manual_seed(recipe.runtime.seed)
            self.model.load_replica_state_dict(i, initial_model(recipe).state_dict())
            self.rng_states.append(torch.get_rng_state())
        with torch.random.fork_rng(devices=[]):
            self.evaluation = GPT(recipes[0].model).to(device)
        self.forward = torch.compile(self.model) if recipes[0].runtime.compile else self.model
        matrices = [p for p in self.model.parameters() if p.dim() >= 3]  # (K, out, in): the solo run's decayed group
        gains = [p for p in self.model.parameters() if p.dim() < 3]
        members = [
            MemberSettings(r.optimizer.beta1, r.optimizer.beta2, r.optimizer.eps, r.optimizer.weight_decay)
            for r in recipes
        ]
        self.optimizer = MemberAdamW(
            [{"params": matrices, "decays": True}, {"params": gains, "decays": False}], members
        )
        self.max_norms = torch.tensor([r.optimizer.grad_clip for r in recipes], device=device)
        self.last_lrs = [r.optimizer.lr for r in recipes]
        self.members = [MemberEngine(self, i) for i in range(len(recipes))]

    def train_step(self, batches: Sequence[torch.Tensor | None], lrs: Sequence[float]) -> list[StepResult | None]:
        """One optimizer step of every member given a batch (None: a member that has left, whose
        slice computes nothing it keeps). Each member's step is its solo run's: micro-batches
        weighted by their share of its counted targets, clipped to its own norm, skipped when not finite."""
        present = [batch is not None for batch in batches]
        shape = next(batch for batch in batches if batch is not None).shape
        stacked = torch.stack(
            [
                batch if batch is not None else torch.zeros(shape, dtype=torch.long, device=self.device)
                for batch in batches
            ]
        )
        inputs, targets = split_block(stacked)  # (K, S, T) each
        counts = target_counts(targets)
        totals = [max(sum(rows), 1) for rows in counts]
        size = self.budget.micro_batch_size
        loss_sums = torch.zeros(len(batches), device=self.device)
        correct = torch.zeros(len(batches), device=self.device, dtype=torch.long)
        for start in range(0, shape[0], size):
            weights = [
                sum(rows[start : start + size]) / total if here else 0.0
                for rows, total, here in zip(counts, totals, present, strict=True)
            ]
            if not any(weights):
                continue
            chunk_targets = targets[:, start : start + size]
            with self.members[0].autocast():
                logits, losses = self.forward(inputs[:, start : start + size], chunk_targets)
            weight = torch.tensor(weights, device=self.device)
            (losses * weight).sum().backward()
            loss_sums += losses.detach() * weight
            correct += (logits.detach().argmax(-1) == chunk_targets).flatten(1).sum(1)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.model.parameters()]
        norms = clip_per_replica_(grads, self.max_norms).tolist()
        finite = [math.isfinite(norm) for norm in norms]
        # A member without a counted target in the step has no gradient: its solo AdamW skips it.
        stepping = [here and ok and sum(rows) > 0 for here, ok, rows in zip(present, finite, counts, strict=True)]
        self.optimizer.step(lrs, stepping)
        self.optimizer.zero_grad()
        for i, here in enumerate(present):
            if here:
                self.last_lrs[i] = lrs[i]
        return [
            StepResult(
                loss=float(loss_sums[i]),
                accuracy=float(correct[i]) / totals[i],
                grad_norm=norms[i],
                skipped=not finite[i],
            )
            if present[i]
            else None
            for i in range(len(batches))
        ]


class MemberEngine(Engine):
    """Member i of a TrialPack with the interface and checkpoint state of its solo run's engine."""

    def __init__(self, pack: TrialPack, index: int) -> None:
        super().__init__(pack.recipes[index], pack.budget, pack.device)
        self.pack, self.index = pack, index
        skeleton = model_skeleton(self.recipe)  # the solo run's parameters and AdamW groups, nothing allocated
        groups = skeleton.param_groups(self.recipe.optimizer.weight_decay)
        names = {id(p): name for name, p in skeleton.named_parameters()}
        self.order = [names[id(p)] for group in groups for p in group["params"]]
        """The solo AdamW's parameter indices: index -> GPT parameter name."""
        opt, fused = self.recipe.optimizer, takes_cuda_path(self.recipe, pack.device)
        template = torch.optim.AdamW(groups, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, foreach=True)
        self.param_groups = template.state_dict()["param_groups"]
        for group in self.param_groups:
            group.update(fused=fused, foreach=None if fused else True)
        self.step_device = pack.device if fused else torch.device("cpu")

    @property
    def model(self) -> PackedGPT:
        return self.pack.model

    def evaluation_model(self) -> GPT:
        self.pack.evaluation.load_state_dict(self.pack.model.replica_state_dict(self.index))
        return self.pack.evaluation

    def state_dict(self) -> dict:
        """The solo engine's state: GPT weights and torch AdamW's state_dict, member i's share."""
        pack, steps = self.pack, self.pack.optimizer.steps[self.index]
        state = {}
        if steps:
            moments = {
                key: pack.model.replica_views(self.index, lambda p, key=key: pack.optimizer.state[p][key])
                for key in ("exp_avg", "exp_avg_sq")
            }
            step = torch.tensor(float(steps), dtype=torch.float32, device=self.step_device)
            state = {
                index: {"step": step.clone(), **{key: moments[key][name].clone() for key in moments}}
                for index, name in enumerate(self.order)
            }
        groups = [{**group, "lr": pack.last_lrs[self.index]} for group in self.param_groups]
        return {
            "model": pack.model.replica_state_dict(self.index),
            "optimizer": {"state": state, "param_groups": groups},
        }

    def load_state_dict(self, state: dict) -> None:
        pack = self.pack
        pack.model.load_replica_state_dict(self.index, state["model"])
        saved = state["optimizer"]["state"]
        pack.optimizer.steps[self.index] = int(saved[0]["step"]) if saved else 0
        for param in pack.model.parameters():
            pack.optimizer.state.setdefault(
                param, {"exp_avg": torch.zeros_like(param), "exp_avg_sq": torch.zeros_like(param)}
            )
        for key in ("exp_avg", "exp_avg_sq"):
            views = pack.model.replica_views(self.index, lambda p, key=key: pack.optimizer.state[p][key])
            for index, name in enumerate(self.order):
                views[name].copy_(saved[index][key] if saved else 0)
        pack.last_lrs[self.index] = float(state["optimizer"]["param_groups"][0]["lr"])

    def train_step(self, sequences: torch.Tensor, lr: float) -> StepResult:
        raise TypeError("a pack's member steps with its pack (TrialPack.train_step)")
