"""AccumAdamW (tiny-llm's): the update against its formula written out per element, AdamW at
accum_iter 1, and a demo run whose two slices equal one job bitwise."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from workflow_support import assert_states_equal

from ebd2n.config import load_recipe, recipe_identity
from ebd2n.train import train
from ebd2n.train.accum_adamw import AccumAdamW
from ebd2n.train.checkpoint import load_checkpoint
from ebd2n.train.records import read_metrics

LR, BETAS, EPS, DECAY = 0.01, (0.9, 0.95), 1e-8, 0.1


def _gradients(steps: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(3, generator=generator, dtype=torch.float64) for _ in range(steps)]


def _optimized(optimizer_class, gradients, **options) -> torch.Tensor:
    param = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    optimizer = optimizer_class([{"params": [param], "weight_decay": DECAY}], lr=LR, betas=BETAS, eps=EPS, **options)
    for gradient in gradients:
        param.grad = gradient.clone()
        optimizer.step()
    return param.detach()


def _by_the_formula(gradients: list[torch.Tensor], window: int) -> list[float]:
    """The paper's Appendix C as tiny-llm states it, one element at a time in Python floats."""
    result = []
    for i, start in enumerate([0.5, -1.0, 2.0]):
        x, m, v, buffer = start, 0.0, 0.0, 0.0
        for t, gradient in enumerate(gradients, start=1):
            g, k = float(gradient[i]), math.ceil(t / window)
            m_step, v_step = BETAS[0] * m + (1 - BETAS[0]) * g, BETAS[1] * v + (1 - BETAS[1]) * g * g
            x *= 1 - LR * DECAY
            x -= LR / (1 - BETAS[0] ** k) * m_step / (math.sqrt(v_step) / math.sqrt(1 - BETAS[1] ** k) + EPS)
            buffer += g / window
            if t % window == 0:
                m, v = BETAS[0] * m + (1 - BETAS[0]) * buffer, BETAS[1] * v + (1 - BETAS[1]) * buffer * buffer
                buffer = 0.0
        result.append(x)
    return result


def test_accum_adamw_follows_the_formula() -> None:
    gradients = _gradients(8)
    for window in (2, 3):
        got = _optimized(AccumAdamW, gradients, accum_iter=window)
        torch.testing.assert_close(
            got, torch.tensor(_by_the_formula(gradients, window), dtype=torch.float64), rtol=1e-12, atol=1e-14
        )


def test_accum_adamw_of_one_step_windows_is_adamw() -> None:
    gradients = _gradients(6)
    torch.testing.assert_close(
        _optimized(AccumAdamW, gradients, accum_iter=1),
        _optimized(torch.optim.AdamW, gradients),
        rtol=1e-12,
        atol=1e-14,
    )
    assert not torch.allclose(_optimized(AccumAdamW, gradients, accum_iter=3), _optimized(torch.optim.AdamW, gradients))


def test_accum_adamw_recipe_identity() -> None:
    assert recipe_identity(load_recipe("20m", ["optimizer.accum_iter=1"]), "c" * 64) == recipe_identity(
        load_recipe("20m"), "c" * 64
    )
    assert recipe_identity(load_recipe("20m", ["optimizer.accum_iter=4"]), "c" * 64) != recipe_identity(
        load_recipe("20m"), "c" * 64
    )


def test_accum_adamw_two_slices_equal_one_job_bitwise(demo_cache: Path, tmp_path: Path) -> None:
    """Its window buffer travels with the checkpoint (windows of 3 steps straddle the epoch ends)."""

    def recipe(name: str):
        return load_recipe(
            "demo",
            [
                f"data.cache_dir={demo_cache}",
                f"runtime.output_dir={tmp_path / name}",
                "training.max_tokens=16384",
                "training.epoch_tokens=4096",
                "optimizer.accum_iter=3",
            ],
        )

    train(recipe("whole"), progress=False)
    train(recipe("sliced"), until_epoch=2, progress=False)
    train(recipe("sliced"), progress=False)
    whole, sliced = (load_checkpoint(tmp_path / name / "final.pt")["engine"] for name in ("whole", "sliced"))
    assert_states_equal(whole, sliced)
    assert any("accum_grad" in state for state in whole["optimizer"]["state"].values())


def test_accum_adamw_packed_run_trains(demo_cache: Path, tmp_path: Path) -> None:
    recipe = load_recipe(
        "demo",
        [
            f"data.cache_dir={demo_cache}",
            f"runtime.output_dir={tmp_path / 'run'}",
            "training.max_tokens=16384",
            "training.epoch_tokens=4096",
            "optimizer.accum_iter=2",
            "decentralized.num_models=4",
        ],
    )
    train(recipe, progress=False)
    losses = [record["val_loss"] for record in read_metrics(tmp_path / "run") if record["type"] == "epoch"]
    assert losses == sorted(losses, reverse=True) and losses[-1] < math.log(512) - 0.5, losses
    state = load_checkpoint(tmp_path / "run" / "final.pt")["engine"]["optimizer"]["state"]
    assert all(value["accum_grad"].shape[0] == 4 for value in state.values())  # per replica, stacked
