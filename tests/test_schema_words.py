"""Campaign-file mistakes answered in plain words (issue #57, item 10): the real `ebd2n campaign
check` on a written file says, in one line naming the key, what is wrong and what the place takes
(ebd2n.campaign.schema_words), exits 2 and writes nothing; and it names the packs it plans."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from ebd2n.config import load_recipe, save_recipe

CAMPAIGN = {
    "campaign": "words",
    "recipe": "demo",  # 2 epochs
    "grid": {"modes": ["synchronous"], "learning_rates": {"synchronous": [0.001, 0.002]}, "beta2": [0.99]},
    "seeds": [1, 2],
    "epochs_per_slice": 1,
    "resources": {"default": {"gpus": 0}},
}


def _ebd2n(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ebd2n", *argv], cwd=cwd, capture_output=True, text=True, timeout=120)


def _check(tmp_path: Path, change: Callable[[dict], object]) -> subprocess.CompletedProcess:
    raw = copy.deepcopy(CAMPAIGN)
    change(raw)
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return _ebd2n(tmp_path, "campaign", "check", "campaign.yaml")


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


MISTAKES = [
    pytest.param(
        lambda raw: _rename(raw, "seeds", "seed"),
        "top level: unknown key 'seed' (did you mean 'seeds'?); 'seeds' is missing",
        id="typo-of-a-required-key",
    ),
    pytest.param(
        lambda raw: raw["grid"].update(seed=raw.pop("seeds")),
        "grid: unknown key 'seed' (did you mean top-level 'seeds'?); top-level 'seeds' is missing",
        id="typo-at-the-wrong-place",
    ),
    pytest.param(
        lambda raw: raw["grid"].update(pack=2),
        "grid: unknown key 'pack' (it belongs under execution)",
        id="key-at-the-wrong-place",
    ),
    pytest.param(
        lambda raw: raw.update(execution={"packs": 2}),
        "execution: unknown key 'packs' (did you mean 'pack'?)",
        id="typo-of-an-optional-key",
    ),
    pytest.param(lambda raw: raw.pop("seeds"), "top level: 'seeds' is missing (required)", id="missing-key"),
    pytest.param(
        lambda raw: raw.update(epochs_per_slice="one"),
        "epochs_per_slice: 'one' is neither a whole number ≥ 1 nor a mapping to whole numbers ≥ 1",
        id="no-branch-of-oneof",
    ),
    pytest.param(lambda raw: raw.update(epochs_per_slice=0), "epochs_per_slice: must be ≥ 1, got 0", id="out-of-range"),
    pytest.param(
        lambda raw: raw.update(epochs_per_slice=None),
        "epochs_per_slice: null is neither a whole number ≥ 1 nor a mapping to whole numbers ≥ 1",
        id="null-as-yaml-writes-it",
    ),
    pytest.param(
        lambda raw: raw.update(execution={"pack": True}),
        "execution.pack: expected a whole number ≥ 1, got true",
        id="true-as-yaml-writes-it",
    ),
    pytest.param(
        lambda raw: raw.update(checkpoint_epochs=[1, 0]),
        "checkpoint_epochs.1: must be ≥ 1, got 0",
        id="out-of-range-in-a-list-branch",
    ),
    pytest.param(
        lambda raw: raw.update(execution={"pack": "two"}),
        "execution.pack: expected a whole number ≥ 1, got 'two'",
        id="wrong-type",
    ),
    pytest.param(
        lambda raw: raw.update(checkpoint_policy="finall"),
        "checkpoint_policy: must be one of final, epoch, all, interval, explicit, got 'finall' (did you mean 'final'?)",
        id="enum",
    ),
    pytest.param(
        lambda raw: raw.update(checkpoint_policy="explicit", checkpoint_epochs=[1, 3, 5]),
        "checkpoint_epochs: epochs 3, 5 are past every run's budget (the longest is 2 epochs), so no run would "
        "keep them; remove them, or lengthen the budget",
        id="checkpoint-epochs-past-the-budget",
    ),
]


@pytest.mark.parametrize(("change", "words"), MISTAKES)
def test_campaign_check_says_the_mistake_in_plain_words(tmp_path: Path, change: Callable, words: str) -> None:
    done = _check(tmp_path, change)
    result = (done.returncode, done.stderr.strip(), sorted(path.name for path in tmp_path.iterdir()))
    expected = (2, f"ebd2n campaign: error: campaign file campaign.yaml: {words}", ["campaign.yaml"])
    assert result == expected


def _scaling(raw: dict, checkpoint_epochs: list[int]) -> None:
    """demo trains 2 epochs, 20m (as overridden) 4."""
    raw.pop("recipe")
    raw["grid"]["presets"] = ["demo", "20m"]
    raw["data"] = {"cache_dir": "results/caches/words"}
    tokens = {"training.max_tokens": 98304, "training.epoch_tokens": 24576, "training.tokens_per_parameter": None}
    raw["preset_overrides"] = {"20m": tokens}
    raw.update(checkpoint_policy="explicit", checkpoint_epochs=checkpoint_epochs)


def test_an_epoch_only_the_longer_preset_reaches_is_kept(tmp_path: Path) -> None:
    done = _check(tmp_path, lambda raw: _scaling(raw, [1, 3]))
    assert (done.returncode, done.stderr.count("error")) == (0, 0), done.stderr


def test_an_epoch_past_every_presets_budget_is_refused(tmp_path: Path) -> None:
    done = _check(tmp_path, lambda raw: _scaling(raw, [3, 5]))
    result = (done.returncode, done.stderr.strip())
    expected = (
        2,
        "ebd2n campaign: error: campaign file campaign.yaml: checkpoint_epochs: epoch 5 is past every run's budget "
        "(the longest is 4 epochs), so no run would keep it; remove it, or lengthen the budget",
    )
    assert result == expected


def test_campaign_check_names_the_packs_it_plans(tmp_path: Path) -> None:
    done = _check(tmp_path, lambda raw: raw.update(seeds=[1, 2, 3], execution={"pack": 4}))
    result = [line for line in done.stdout.splitlines() if "execution.pack" in line]
    assert result == ["  synchronous: execution.pack 4 trains 6 of its 6 runs as 2 pack(s) per slice (4 + 2 runs)"]


def test_train_pack_names_the_run_directory_given_twice(tmp_path: Path) -> None:
    (tmp_path / "runs/a").mkdir(parents=True)
    save_recipe(load_recipe("demo", ["runtime.output_dir=runs/a"]), tmp_path / "runs/a/recipe.yaml")
    done = _ebd2n(tmp_path, "train-pack", "runs/a", "runs/a")
    result = (done.returncode, done.stderr.strip(), sorted(path.name for path in (tmp_path / "runs/a").iterdir()))
    expected = (
        2,
        "ebd2n train-pack: error: runs/a: this run directory is named twice; each run of a pack trains once, "
        "so name it once",
        ["recipe.yaml"],
    )
    assert result == expected
