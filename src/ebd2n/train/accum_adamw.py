"""AccumAdamW (tiny-llm's, after arXiv 2410.11998 Appendix C): AdamW that updates the weights every
step but commits its moments once per window of `accum_iter` steps, from the window's mean gradient.

Each step uses the committed moments blended with its own gradient, m' = b1 m + (1 - b1) g and
v' = b2 v + (1 - b2) g^2, and bias corrections for the k = ceil(t / accum_iter) windows begun, with
epsilon outside the square root; the weights decay by lr x weight_decay first, as AdamW's. The
gradient is also added to a buffer (divided by accum_iter); at a window's last step m and v take
the buffer as their gradient and it is emptied. accum_iter 1 is AdamW.
"""

from __future__ import annotations

import math

import torch


class AccumAdamW(torch.optim.Optimizer):
    """AdamW with moments committed per window of `accum_iter` steps (state: step, exp_avg,
    exp_avg_sq, accum_grad per parameter)."""

    def __init__(
        self, params, lr: float, betas: tuple[float, float], eps: float, accum_iter: int, weight_decay: float = 0.0
    ) -> None:
        if accum_iter < 1:
            raise ValueError(f"accum_iter must be at least 1, got {accum_iter}")
        super().__init__(
            params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "accum_iter": accum_iter}
        )

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch.optim.Optimizer's signature
        loss = None if closure is None else closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            window = group["accum_iter"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state.update(
                        step=torch.zeros((), dtype=torch.int64),
                        exp_avg=torch.zeros_like(param),
                        exp_avg_sq=torch.zeros_like(param),
                        accum_grad=torch.zeros_like(param),
                    )
                state["step"] += 1
                self._update(param, state, group, beta1, beta2, window)
        return loss

    @staticmethod
    def _update(param: torch.Tensor, state: dict, group: dict, beta1: float, beta2: float, window: int) -> None:
        grad, step = param.grad, int(state["step"])
        windows = math.ceil(step / window)
        first = state["exp_avg"].mul(beta1).add_(grad, alpha=1 - beta1)
        second = state["exp_avg_sq"].mul(beta2).addcmul_(grad, grad, value=1 - beta2)
        denominator = second.sqrt_().div_(math.sqrt(1 - beta2**windows)).add_(group["eps"])
        param.mul_(1 - group["lr"] * group["weight_decay"])
        param.addcdiv_(first, denominator, value=-group["lr"] / (1 - beta1**windows))
        state["accum_grad"].add_(grad, alpha=1 / window)
        if step % window == 0:
            buffer = state["accum_grad"]
            state["exp_avg"].mul_(beta1).add_(buffer, alpha=1 - beta1)
            state["exp_avg_sq"].mul_(beta2).addcmul_(buffer, buffer, value=1 - beta2)
            buffer.zero_()
