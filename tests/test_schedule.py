"""The wsd learning-rate schedule: tiny-llm's reference values, the formula at every step of a budget
for each decay shape, the recipe's identity and a demo run that trains with it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ebd2n.config import load_recipe, recipe_identity
from ebd2n.errors import UserError
from ebd2n.train import train
from ebd2n.train.budget import budget_of
from ebd2n.train.records import read_metrics
from ebd2n.train.schedule import describe_schedule, learning_rate

PEAK = 0.001
STEPS = 1000


def _optimizer(warmup_steps: int, decay_fraction: float, shape: str = "sqrt"):
    """A wsd optimizer section over a budget of STEPS steps of one token each."""
    return load_recipe(
        "demo",
        [
            f"optimizer.lr={PEAK}",
            "optimizer.schedule=wsd",
            f"optimizer.warmup_fraction={warmup_steps / STEPS}",
            f"optimizer.decay_fraction={decay_fraction}",
            f"optimizer.decay_shape={shape}",
        ],
    ).optimizer


@pytest.mark.parametrize(
    ("warmup", "decay", "steps", "shares"),
    [  # tiny-llm's own test cases for its wsd schedule (tests/test_schedule.py there), in steps of 1,000
        (50, 0.1, [0, 25, 50, 500, 900, 925, 964, 1000, 1100], [0, 0.5, 1, 1, 1, 0.5, 0.2, 0, 0]),
        (0, 0.1, [0, 900, 925, 1000, 1100], [1, 1, 0.5, 0, 0]),
        (100, 0, [0, 50, 100, 1000, 1100], [0, 0.5, 1, 1, 1]),
        (0, 0, [0, 1, 1000, 1100], [1, 1, 1, 1]),
        (500, 0.5, [0, 250, 500, 625, 1000], [0, 0.5, 1, 0.5, 0]),
        (0, 1, [0, 250, 640, 1000], [1, 0.5, 0.2, 0]),
        (50, 1e-20, [0, 50, 999, 1000], [0, 1, 1, 0]),
        (900, 0.2, [0, 800, 900, 925, 1000], [0, 8 / 9, 1, 0.5, 0]),
    ],
)
def test_wsd_reference_values(warmup: int, decay: float, steps: list[int], shares: list[float]) -> None:
    optimizer = _optimizer(warmup, decay)
    assert [learning_rate(step, STEPS, optimizer) / PEAK for step in steps] == pytest.approx(shares)


DECAYS = {
    "sqrt": lambda p: 1 - math.sqrt(p),
    "linear": lambda p: 1 - p,
    "cosine": lambda p: 0.5 * (1 + math.cos(math.pi * p)),
}


@pytest.mark.parametrize("shape", sorted(DECAYS))
def test_wsd_every_step_of_a_budget_follows_the_formula(shape: str) -> None:
    recipe = load_recipe(
        "demo",
        [
            "optimizer.schedule=wsd",
            "optimizer.warmup_fraction=0.1",
            "optimizer.decay_fraction=0.25",
            f"optimizer.decay_shape={shape}",
            "training.max_tokens=50000",
            "training.epoch_tokens=12500",
        ],
    )
    budget = budget_of(recipe)
    total = budget.total_tokens
    warmup, decay_start = 0.1 * total, 0.75 * total
    phases = set()
    for step in range(budget.total_steps):
        tokens = budget.tokens_after(step + 1)  # the trainer's position for this step's update
        if tokens < warmup:
            expected, phase = tokens / warmup, "warm-up"
        elif tokens < decay_start:
            expected, phase = 1.0, "stable"
        else:
            expected, phase = DECAYS[shape]((tokens - decay_start) / (total - decay_start)), "decay"
        phases.add(phase)
        assert learning_rate(tokens, total, recipe.optimizer) == pytest.approx(0.01 * expected, abs=1e-15), step
    assert phases == {"warm-up", "stable", "decay"}
    assert learning_rate(total, total, recipe.optimizer) == 0  # the last step's update, as tiny-llm's


def test_wsd_settings_keep_the_identity_of_cosine_recipes() -> None:
    def identity(*overrides: str) -> str:
        return recipe_identity(load_recipe("20m", list(overrides)), "c" * 64)

    assert identity("optimizer.schedule=cosine") == identity()
    wsd = identity("optimizer.schedule=wsd")
    assert wsd != identity()
    assert identity("optimizer.schedule=wsd", "optimizer.decay_shape=linear") != wsd
    assert identity("optimizer.schedule=wsd", "optimizer.decay_fraction=0.2") != wsd


def test_wsd_decay_settings_without_wsd_are_refused() -> None:
    with pytest.raises(UserError, match="optimizer.decay_fraction=0.2.*set schedule: wsd"):
        load_recipe("demo", ["optimizer.decay_fraction=0.2"])


def test_wsd_demo_run_trains(demo_cache: Path, tmp_path: Path) -> None:
    recipe = load_recipe(
        "demo",
        [
            f"data.cache_dir={demo_cache}",
            f"runtime.output_dir={tmp_path / 'run'}",
            "training.max_tokens=16384",
            "training.epoch_tokens=4096",
            "optimizer.schedule=wsd",
            "optimizer.decay_fraction=0.5",
        ],
    )
    train(recipe, progress=False)
    epochs = [record for record in read_metrics(tmp_path / "run") if record["type"] == "epoch"]
    assert [record["lr"] for record in epochs] == pytest.approx([0.01, 0.01, 0.01 * (1 - math.sqrt(0.5)), 0.0])
    losses = [record["val_loss"] for record in epochs]
    assert losses == sorted(losses, reverse=True) and losses[-1] < math.log(512) - 0.9, losses  # below uniform
    assert "sqrt decay to zero over the last 50%" in describe_schedule(recipe.optimizer)
