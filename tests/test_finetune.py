"""Fine-tuning recipes: init_from, frozen prefix, LoRA adapters, per-unit accounting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ebd2n.config import load_recipe
from ebd2n.errors import UserError
from ebd2n.evaluate import validate_run
from ebd2n.model import GPT
from ebd2n.model.lora import apply_lora_, merged_state_dict
from ebd2n.train import train
from ebd2n.train.checkpoint import load_checkpoint

SHORT = ["training.max_tokens=8192", "training.epoch_tokens=4096"]


@pytest.fixture(scope="module")
def base_run(demo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short demo pre-training run whose final.pt the fine-tunes start from."""
    run = tmp_path_factory.mktemp("base") / "run"
    train(load_recipe("demo", [f"data.cache_dir={demo_cache}", f"runtime.output_dir={run}", *SHORT]), progress=False)
    return run


@pytest.fixture(scope="module")
def lora_run(demo_cache: Path, base_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("lora") / "run"
    recipe = load_recipe(
        "demo",
        [
            f"data.cache_dir={demo_cache}",
            f"runtime.output_dir={run}",
            *SHORT,
            f"training.init_from={base_run / 'final.pt'}",
            "parallel.freeze_prefix=1",
            "parallel.lora={rank: 4, alpha: 8}",
        ],
    )
    train(recipe, progress=False)
    return run


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "final.pt")["engine"]["model"]


def test_lora_frozen_prefix_is_bitwise_unchanged(base_run: Path, lora_run: Path) -> None:
    before, after = _weights(base_run), _weights(lora_run)
    result = [name for name in before if name.startswith("blocks.0.") and not torch.equal(before[name], after[name])]
    assert result == []


def test_lora_base_weights_unchanged_adapters_trained(base_run: Path, lora_run: Path) -> None:
    before, after = _weights(base_run), _weights(lora_run)
    bases_equal = all(torch.equal(before[n.replace(".base.", ".")], t) for n, t in after.items() if ".base." in n)
    adapters_moved = all(t.abs().sum() > 0 for n, t in after.items() if n.endswith("lora_b"))
    assert bases_equal and adapters_moved


def test_lora_trainable_parameters_match_formula(lora_run: Path) -> None:
    record = json.loads((lora_run / "run.json").read_text())
    d, f, r = 64, 176, 4  # demo width, ffn width, LoRA rank; one LoRA block (block 1)
    expected = r * (4 * (d + d) + 2 * (d + f) + (f + d))
    assert record["trainable_parameters"] == expected


def test_lora_trainable_count_equals_live_model(demo_cache: Path) -> None:
    recipe = load_recipe("demo", ["parallel.freeze_prefix=1", "parallel.lora={rank: 4}"])
    from ebd2n.train.accounting import unit_table
    from ebd2n.train.weights import fine_tuning_model

    model = fine_tuning_model(recipe, GPT(recipe.model))
    live = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert live == sum(row["trainable"] for row in unit_table(recipe, "cpu", 10, 0))


def test_lora_unit_table_states(lora_run: Path) -> None:
    record = json.loads((lora_run / "run.json").read_text())
    result = {row["name"]: row["state"] for row in record["units"]}
    expected = {
        "embedding": "frozen base under LoRA",
        "block0.attention": "frozen by the prefix",
        "block0.mlp": "frozen by the prefix",
        "block1.attention": "LoRA",
        "block1.mlp": "LoRA",
        "head": "frozen base under LoRA",
    }
    assert result == expected


def test_lora_merge_computes_the_same_function() -> None:
    recipe = load_recipe("demo", ["parallel.lora={rank: 4}"])
    torch.manual_seed(0)
    model = GPT(recipe.model)
    apply_lora_(model, recipe.parallel.lora, first_block=0)
    for name, param in model.named_parameters():
        if name.endswith("lora_b"):
            torch.nn.init.normal_(param)
    merged = GPT(recipe.model)
    merged.load_state_dict(merged_state_dict(model))
    idx = torch.randint(0, recipe.model.vocab_size, (2, 16))
    torch.testing.assert_close(model(idx)[0], merged(idx)[0], rtol=1e-4, atol=1e-4)


def test_lora_run_full_validation_uses_merged_weights(lora_run: Path) -> None:
    results = validate_run(lora_run)
    assert results["targets"] > 0 and results["loss"] < 7.0


def test_frozen_prefix_without_lora_keeps_block_zero(demo_cache: Path, base_run: Path, tmp_path: Path) -> None:
    recipe = load_recipe(
        "demo",
        [
            f"data.cache_dir={demo_cache}",
            f"runtime.output_dir={tmp_path / 'run'}",
            *SHORT,
            f"training.init_from={base_run / 'final.pt'}",
            "parallel.freeze_prefix=1",
        ],
    )
    train(recipe, progress=False)
    before, after = _weights(base_run), _weights(tmp_path / "run")
    frozen_same = all(torch.equal(before[n], after[n]) for n in before if n.startswith("blocks.0."))
    rest_moved = not torch.equal(before["blocks.1.mlp.up.weight"], after["blocks.1.mlp.up.weight"])
    assert frozen_same and rest_moved


def test_lora_with_packed_mode_refused() -> None:
    with pytest.raises(UserError, match="parallel.lora: LoRA fine-tuning is for synchronous runs"):
        load_recipe("demo", ["decentralized.num_models=4", "parallel.lora={rank: 4}"])
