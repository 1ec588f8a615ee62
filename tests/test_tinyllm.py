"""The reference's tiny-llm recipes (selected-*.yaml) load as they are, through config/tinyllm.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ebd2n.campaign.check import campaign_from_dict
from ebd2n.config import load_recipe
from ebd2n.errors import UserError
from ebd2n.train.budget import budget_of

REFERENCE = Path(__file__).resolve().parent / "reference" / "recipe_sweep_20m"
SELECTED = {"synchronous": REFERENCE / "selected-synchronous.yaml", "packed-4": REFERENCE / "selected-packed-4.yaml"}
BUDGETS = {"synchronous": (408_071_168, 12_480, 40), "packed-4": (408_068_096, 12_473, 40)}
IGNORED = {"data.buffer_size_mib": 64.0, "data.prefetch": True, "training.checkpoint_every": 500}


def _raw(mode: str) -> dict:
    return yaml.safe_load(SELECTED[mode].read_text())


@pytest.mark.parametrize("mode", SELECTED)
def test_selected_recipe_resolves_to_the_reference_run(mode: str) -> None:
    recipe, raw = load_recipe(SELECTED[mode]), _raw(mode)
    budget = budget_of(recipe)
    result = (
        recipe.mode,
        recipe.model.model_dump(),
        recipe.optimizer.model_dump(exclude=set(ADDED_OPTIMIZER_DEFAULTS)),
        (budget.total_tokens, budget.total_steps, budget.epochs),
        {key: getattr(recipe.training, key) for key in ("batch_tokens", "micro_batch_size", "checkpoint_policy")},
    )
    expected = (
        mode,
        load_recipe("20m").model.model_dump(),
        raw["optimizer"],
        BUDGETS[mode],
        {key: raw["training"][key] for key in ("batch_tokens", "micro_batch_size", "checkpoint_policy")},
    )
    assert result == expected
    assert {key: getattr(recipe.optimizer, key) for key in ADDED_OPTIMIZER_DEFAULTS} == ADDED_OPTIMIZER_DEFAULTS


ADDED_OPTIMIZER_DEFAULTS = {
    "schedule": "cosine",
    "decay_fraction": 0.1,
    "decay_shape": "sqrt",
    "accum_iter": 1,
    "warmup_tokens": None,
}
"""Optimizer keys added after these recipes (issue 39): the reference's cosine AdamW run, so their defaults."""


@pytest.mark.parametrize("mode", SELECTED)
def test_selected_recipe_records_what_it_ignores(mode: str) -> None:
    result = load_recipe(SELECTED[mode]).runtime.ignored_keys
    assert result == IGNORED


def test_selected_recipe_keeps_the_pinned_data() -> None:
    data, raw = load_recipe(SELECTED["synchronous"]).data, _raw("synchronous")["data"]
    result = (data.source, data.dataset, data.dataset_config, data.revision, data.tokenizer, data.tokenizer_revision)
    assert result == ("huggingface", "allenai/c4", "en", raw["revision"], raw["tokenizer"], raw["tokenizer_revision"])


def test_cli_names_ignored_keys_once_and_takes_the_seed_overrides(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ebd2n",
            "recipe",
            str(SELECTED["packed-4"]),
            "--set",
            "runtime.seed=43",
            "--set",
            f"runtime.output_dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "ignored" in line] == [
        f"{SELECTED['packed-4']}: tiny-llm recipe; ignored (no effect in ebd2n): "
        "data.buffer_size_mib=64.0, data.prefetch=True, training.checkpoint_every=500"
    ]
    assert "seed: 43\n" in result.stdout and "training tokens: 408,068,096\n" in result.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw["runtime"].update(warp_speed=True), "runtime.warp_speed: unknown key"),
        (
            lambda raw: raw["data"].update(shuffle_buffer=5000),
            "data.shuffle_buffer: 5000 would change the prepared data",
        ),
        (lambda raw: raw["training"].update(checkpoint_policy="none"), "checkpoint_policy: tiny-llm's none"),
    ],
)
def test_tiny_llm_keys_outside_the_mapping_stay_errors(tmp_path: Path, change, message: str) -> None:
    raw = _raw("synchronous")
    change(raw)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match=message):
        load_recipe(tmp_path / "r.yaml")


@pytest.mark.parametrize(
    ("policy", "epochs", "kept"), [("interval", 10, [10, 20, 30]), ("explicit", [39, 5, 5], [5, 39])]
)
def test_tiny_llm_interval_and_explicit_policies_keep_its_saved_epochs(
    tmp_path: Path, policy: str, epochs: int | list[int], kept: list[int]
) -> None:
    """tiny-llm's saved_epochs() of the 40-epoch reference run: interval 10 keeps 10, 20, 30 (and its
    last, 40, which is final.pt here); explicit keeps the listed epochs, once each."""
    from ebd2n.train.retention import Retention

    raw = _raw("synchronous")
    raw["training"].update(checkpoint_policy=policy, checkpoint_epochs=epochs)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    recipe = load_recipe(tmp_path / "r.yaml")
    assert sorted(Retention.of(recipe, budget_of(recipe).epochs).kept_epochs) == kept


def test_campaign_recipe_may_be_a_tiny_llm_file() -> None:
    campaign = campaign_from_dict(
        {
            "campaign": "reference",
            "recipe": str(SELECTED["synchronous"]),
            "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.0028]}, "beta2": [0.999]},
            "seeds": [42],
            "epochs_per_slice": 40,
            "resources": {"default": {"gpus": 1, "minutes": 30}},
        }
    )
    recipe = campaign.base_recipe("base")
    result = (recipe.optimizer.lr, recipe.runtime.ignored_keys, budget_of(recipe).total_steps)
    assert result == (0.0028, IGNORED, 12_480)


def test_tiny_llm_accumadamw_and_adaptive_consensus_in_ebd2n_terms(tmp_path: Path) -> None:
    """configs/accumadamw.yaml (name accumadamw, accum_iter 4) and packed adaptive consensus's start_frac."""
    raw = _raw("packed-4")
    raw["optimizer"].update(name="accumadamw", accum_iter=4)
    raw["decentralized"]["adaptive_consensus"] = {"start_frac": 0.8, "p": 1.0}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    recipe = load_recipe(tmp_path / "r.yaml")
    assert (recipe.optimizer.accum_iter, recipe.decentralized.adaptive_consensus.model_dump()) == (
        4,
        {"start_fraction": 0.8, "p": 1.0},
    )
    raw["optimizer"].pop("accum_iter")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match="optimizer.name accumadamw: set optimizer.accum_iter"):
        load_recipe(tmp_path / "r.yaml")
    raw["optimizer"]["name"] = "sgd"
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match="optimizer.name: sgd; ebd2n trains with adamw or accumadamw"):
        load_recipe(tmp_path / "r.yaml")
