"""Token budgets as the reference computes them: blocks, epoch boundaries, shortened steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebd2n.cli import main
from ebd2n.config import load_recipe
from ebd2n.errors import UserError
from ebd2n.train.budget import Budget, budget_of
from ebd2n.train.plan import SlicePlan, read_slice_plan

PACKED_4 = ["decentralized.num_models=4", "training.micro_batch_size=8"]
PACKED_8 = ["decentralized.num_models=8", "training.micro_batch_size=4"]
REFERENCE_PACKED = ["training.max_tokens=408068096", "training.epoch_tokens=10207232"]  # selected-packed-4.yaml


def _epochs(budget: Budget) -> list[tuple[int, int, int]]:
    """(tokens, steps, blocks of the last step) of every epoch."""
    rows = []
    for epoch in range(budget.epochs):
        steps = budget.epoch_steps(epoch)
        rows.append((budget.epoch_blocks(epoch) * 1024, len(steps), budget.step_span(steps[-1])[1]))
    return rows


def test_20m_synchronous_is_the_reference_budget() -> None:
    budget = budget_of(load_recipe("20m"))
    result = (budget.total_tokens, budget.total_steps, budget.epochs)
    assert result == (408_071_168, 12_480, 40)


def test_20m_synchronous_epochs_end_on_rounded_up_blocks() -> None:
    # 20 x 20,403,520 tokens in 40 epochs of 10,201,760 = 9,962.66 blocks: epoch i ends at
    # ceil(i x 9,962.66) blocks, so epochs take 9,962 or 9,963 blocks, 311 full steps and a short one
    epochs = _epochs(budget_of(load_recipe("20m")))
    assert epochs[:4] == [
        (9963 * 1024, 312, 11),
        (9963 * 1024, 312, 11),
        (9962 * 1024, 312, 10),
        (9963 * 1024, 312, 11),
    ]
    assert {tokens for tokens, _, _ in epochs} == {9962 * 1024, 9963 * 1024}
    assert sum(tokens for tokens, _, _ in epochs) == 408_071_168


@pytest.mark.parametrize(("mode", "overrides"), [("packed-4", PACKED_4 + REFERENCE_PACKED), ("packed-8", PACKED_8)])
def test_20m_packed_is_the_reference_budget(mode: str, overrides: list[str]) -> None:
    # packed-8 derives it (total rounded down, epoch up to 8 x 1,024 tokens); packed-4 states it,
    # as the reference's selected-packed-4.yaml does
    budget = budget_of(load_recipe("20m", overrides))
    epochs = _epochs(budget)
    result = (budget.total_tokens, budget.total_steps, epochs[:-1], epochs[-1])
    assert result == (408_068_096, 12_473, [(10_207_232, 312, 16)] * 39, (9_986_048, 305, 24))


def test_steps_cover_the_training_order_once_in_order() -> None:
    budget = budget_of(load_recipe("demo", ["training.max_tokens=9600", "training.epoch_tokens=3200"]))
    spans = [budget.step_span(step) for step in range(budget.total_steps)]
    result = [start for start, _ in spans], sum(count for _, count in spans)
    assert result == ([sum(count for _, count in spans[:i]) for i in range(len(spans))], 150)


@pytest.mark.parametrize(
    ("preset", "max_tokens", "overrides"),
    [
        ("demo", 10_000, []),
        ("demo", 1_000_000, []),
        ("demo", 99_999, ["decentralized.num_models=4"]),
        ("20m", 408_070_400, PACKED_8),
    ],
)
def test_explicit_max_tokens_never_exceeded(preset: str, max_tokens: int, overrides: list[str]) -> None:
    recipe = load_recipe(preset, [f"training.max_tokens={max_tokens}", "training.epoch_tokens=8192", *overrides])
    budget = budget_of(recipe)
    unit = recipe.model.context_length * (recipe.decentralized.num_models if recipe.decentralized else 1)
    result = max_tokens - budget.total_tokens
    assert 0 <= result < unit


def test_packed_epoch_tokens_must_be_whole_blocks_for_every_model() -> None:
    recipe = load_recipe("demo", ["training.epoch_tokens=4160", "decentralized.num_models=4"])
    with pytest.raises(UserError, match=r"training.epoch_tokens \(4160\) must be a multiple of .* \(256\)"):
        budget_of(recipe)


def test_epochs_shorter_than_a_block_refused() -> None:
    recipe = load_recipe("demo", ["training.epoch_tokens=16"])
    with pytest.raises(UserError, match="shorter than one block"):
        budget_of(recipe)


def test_plan_command_cuts_the_budget_into_slices(tmp_path: Path) -> None:
    output = tmp_path / "plan.json"
    code = main(
        [
            "plan",
            "demo",
            "--set",
            "training.max_tokens=9600",
            "--set",
            "training.epoch_tokens=3200",
            "--epochs-per-slice",
            "2",
            "--output",
            str(output),
        ]
    )
    result = (code, read_slice_plan(output))
    assert result == (0, SlicePlan(epochs=3, epochs_per_slice=2, ends=(2, 3)))


def test_damaged_slice_plan_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"epochs": 3, "epochs_per_slice": 2, "slice_ends": [3, 2]}')
    with pytest.raises(UserError, match="plan.json: slice_ends \\[3, 2\\] are not increasing"):
        read_slice_plan(path)


def test_plan_command_refuses_an_unexpected_chain(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    output = tmp_path / "plan.json"
    code = main(["plan", "demo", "--epochs-per-slice", "1", "--expect", "2", "--output", str(output)])
    result = (code, output.exists(), capsys.readouterr().err.strip())
    assert result[:2] == (2, False)
    assert result[2].startswith("ebd2n plan: error: --expect 2: this trainer cuts 2 epochs into slices ending at 1,2")
