"""AdamW over stacked parameters whose K members are separate runs with their own hyperparameters.

A packed trial (ebd2n.train.trial_engine) holds K runs of one shape as one PackedGPT. AdamW is
elementwise, so one optimizer can step them all when every hyperparameter is a per-member value
broadcast over the member's slice: learning rate, betas, eps, weight decay, and a step count of its
own (a member whose gradient was not finite skips its step, as the solo run does). The arithmetic is
that of torch's foreach AdamW, the solo run's on the CPU (decoupled weight decay, bias corrections in
double precision; the CUDA path's fused AdamW rounds alike within FP32), so a member moves as its
solo run would, up to the rounding of batched kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemberSettings:
    """One member's AdamW hyperparameters (its recipe's optimizer section)."""

    beta1: float
    beta2: float
    eps: float
    weight_decay: float


class MemberAdamW:
    """AdamW for stacked (K, ...) parameters in groups that decay or not (the solo run's two groups)."""

    def __init__(self, groups: list[dict], members: Sequence[MemberSettings]) -> None:
        """groups: [{"params": [...], "decays": bool}], as the packed model's parameter groups."""
        self.groups = groups
        self.members = list(members)
        self.steps = [0] * len(self.members)
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self, lrs: Sequence[float], stepping: Sequence[bool]) -> None:
        """One AdamW step of the members marked in `stepping`, each at its own learning rate; the
        others (skipped, stopped) keep their weights, moments and step count."""
        chosen = [i for i, go in enumerate(stepping) if go]
        if not chosen:
            return
        for i in chosen:
            self.steps[i] += 1
        every = len(chosen) == len(self.members)
        index = None if every else torch.tensor(chosen, device=self._device())
        for group in self.groups:
            factors = self._factors(chosen, lrs, group["decays"])
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state.get(param)
                if state is None:
                    state = self.state[param] = {
                        "exp_avg": torch.zeros_like(param),
                        "exp_avg_sq": torch.zeros_like(param),
                    }
                tensors = (param.data, param.grad, state["exp_avg"], state["exp_avg_sq"])
                if every:
                    _adamw_(*tensors, factors)
                    continue
                picked = [t.index_select(0, index) for t in tensors]
                _adamw_(*picked, factors)
                for target, value in zip(
                    (param.data, state["exp_avg"], state["exp_avg_sq"]), picked[:1] + picked[2:], strict=True
                ):
                    target.index_copy_(0, index, value)

    def zero_grad(self) -> None:
        for group in self.groups:
            for param in group["params"]:
                param.grad = None

    def _factors(self, chosen: list[int], lrs: Sequence[float], decays: bool) -> dict[str, torch.Tensor]:
        """The per-member scalars of this step, each a (members,) FP32 tensor, computed in double
        precision as torch's AdamW computes its Python scalars."""
        rows = []
        for i in chosen:
            member, step, lr = self.members[i], self.steps[i], lrs[i]
            decay = member.weight_decay if decays else 0.0
            rows.append(
                (
                    1 - lr * decay,
                    1 - member.beta1,
                    member.beta2,
                    1 - member.beta2,
                    -lr / (1 - member.beta1**step),
                    (1 - member.beta2**step) ** 0.5,
                    member.eps,
                )
            )
        names = ("keep", "avg_weight", "beta2", "sq_weight", "step_size", "correction2_sqrt", "eps")
        columns = torch.tensor(rows, dtype=torch.float64).T.to(torch.float32)
        return {name: column.to(self._device()) for name, column in zip(names, columns, strict=True)}

    def _device(self) -> torch.device:
        return self.groups[0]["params"][0].device


def _adamw_(
    param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, factors: dict
) -> None:
    """One AdamW update in place, every factor a (members,) tensor broadcast over each member's slice."""

    def per_member(name: str) -> torch.Tensor:
        return factors[name].to(param.dtype).view(-1, *([1] * (param.dim() - 1)))

    param.mul_(per_member("keep"))
    exp_avg.lerp_(grad, per_member("avg_weight"))
    exp_avg_sq.mul_(per_member("beta2")).addcmul_(grad, grad * per_member("sq_weight"))
    denom = exp_avg_sq.sqrt().div_(per_member("correction2_sqrt")).add_(per_member("eps"))
    param.add_(exp_avg / denom * per_member("step_size"))
