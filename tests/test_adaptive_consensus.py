"""tiny-llm's adaptive consensus in the packed mode: gamma = (lr / lr_max)^p from the start step on,
mixing with W' = gamma W + (1 - gamma) I, through the recipe and a packed demo run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ebd2n.config import dump_recipe, load_recipe, recipe_identity
from ebd2n.errors import UserError
from ebd2n.model.gossip import mix_, mixing_matrix
from ebd2n.train import train
from ebd2n.train.budget import budget_of
from ebd2n.train.records import read_metrics
from ebd2n.train.schedule import consensus_schedule, learning_rate

PACKED = ("decentralized.num_models=4", "training.max_tokens=16384", "training.epoch_tokens=4096")


def _recipe(*overrides: str):
    return load_recipe("demo", [*PACKED, *overrides])


@pytest.mark.parametrize("topology", ["one_peer_ring", "one_peer_exponential", "complete"])
@pytest.mark.parametrize("gamma", [0.0, 0.3, 1.0])
def test_adaptive_mixing_equals_the_weakened_matrix(topology: str, gamma: float) -> None:
    generator = torch.Generator().manual_seed(0)
    stacked = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in ((4, 3, 5), (4, 7))]
    for step in range(3):
        weakened = gamma * mixing_matrix(topology, step, 4).double() + (1 - gamma) * torch.eye(4, dtype=torch.float64)
        expected = [torch.einsum("ij,j...->i...", weakened, t) for t in stacked]
        mix_(stacked, topology, step, gamma)
        for got, want in zip(stacked, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_adaptive_consensus_gamma_follows_the_formula() -> None:
    recipe = _recipe("decentralized.adaptive_consensus={start_fraction: 0.5, p: 1.5}")
    budget = budget_of(recipe)
    schedule = consensus_schedule(recipe, budget)
    assert schedule.start_step == math.ceil(0.5 * budget.total_steps) == 8
    rates = [
        learning_rate(budget.tokens_after(step + 1), budget.total_tokens, recipe.optimizer)
        for step in range(budget.total_steps)
    ]
    assert schedule.lr_max == max(rates[8:]) == rates[8]  # cosine: the first active step's
    for step, lr in enumerate(rates):
        expected = 1.0 if step < 8 else (lr / rates[8]) ** 1.5
        assert schedule.gamma(step, lr) == pytest.approx(expected)
    assert schedule.gamma(15, rates[15]) < schedule.gamma(9, rates[9]) < 1


def test_adaptive_consensus_edge_cases() -> None:
    assert consensus_schedule(_recipe(), budget_of(_recipe())) is None
    late = _recipe("decentralized.adaptive_consensus={start_fraction: 1.0, p: 2}")
    assert consensus_schedule(late, budget_of(late)).gamma(15, 0.001) == 1.0  # no active step
    flat = _recipe("decentralized.adaptive_consensus={start_fraction: 0.2, p: 0}")
    assert consensus_schedule(flat, budget_of(flat)).gamma(15, 0.0001) == 1.0
    zero = _recipe("decentralized.adaptive_consensus={start_fraction: 0.9, p: 1}", "optimizer.schedule=wsd")
    with pytest.raises(UserError, match="decentralized.adaptive_consensus: the learning rate is 0 over every step"):
        consensus_schedule(zero, budget_of(zero))


def test_adaptive_consensus_absent_keeps_packed_recipes_as_they_were() -> None:
    plain = _recipe()
    assert "adaptive_consensus" not in dump_recipe(plain)
    adaptive = _recipe("decentralized.adaptive_consensus={start_fraction: 0.5, p: 1}")
    assert "adaptive_consensus" in dump_recipe(adaptive)
    assert recipe_identity(adaptive, "c" * 64) != recipe_identity(plain, "c" * 64)


def test_adaptive_consensus_packed_run_trains_with_weaker_gossip(demo_cache: Path, tmp_path: Path) -> None:
    """Weaker mixing late in training leaves the local models further apart than plain gossip."""
    common = (f"data.cache_dir={demo_cache}", "decentralized.topology=complete")
    train(_recipe(*common, f"runtime.output_dir={tmp_path / 'plain'}"), progress=False)
    train(
        _recipe(
            *common,
            f"runtime.output_dir={tmp_path / 'adaptive'}",
            "decentralized.adaptive_consensus={start_fraction: 0.25, p: 2}",
        ),
        progress=False,
    )
    plain, adaptive = (
        [r for r in read_metrics(tmp_path / name) if r["type"] == "epoch"] for name in ("plain", "adaptive")
    )
    assert plain[0]["val_loss"] == adaptive[0]["val_loss"]  # the first epoch's 4 steps precede step ceil(0.25 x 16)
    assert plain[-1]["consensus_distance"] < adaptive[-1]["consensus_distance"]
    assert adaptive[-1]["val_loss"] < adaptive[0]["val_loss"]
