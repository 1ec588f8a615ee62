"""The reference's current recipe format (tiny-llm with its lr_schedule section) loads and means what
the reference runs: its shipped schedule overlays by a repeated --config, key by key; a packed
recipe without topology or model: as the reference's defaults (complete, reciprocal-pair gossip,
the 20M shape); its other keys mapped, or refused in one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ebd2n.config import load_recipe, read_recipe_files, recipe_source
from ebd2n.errors import UserError

CURRENT = Path(__file__).resolve().parent / "reference" / "tiny_llm_current"
COSINE, WSD = CURRENT / "cosine.yaml", CURRENT / "wsd.yaml"
SRC = Path(__file__).resolve().parents[1] / "src"


def _file(tmp_path: Path, raw: dict, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_cosine_overlay_over_a_recipe_is_the_references_schedule() -> None:
    recipe = load_recipe(["demo", COSINE])
    optimizer = recipe.optimizer
    assert (optimizer.schedule, optimizer.warmup_tokens, optimizer.min_lr_ratio) == (
        "cosine",
        312 * recipe.training.batch_tokens,
        0.1,
    )


def test_the_wsd_overlay_is_the_references_schedule_with_its_sqrt_decay() -> None:
    recipe = load_recipe(["demo", WSD])
    optimizer = recipe.optimizer
    assert (optimizer.schedule, optimizer.warmup_tokens, optimizer.decay_fraction, optimizer.decay_shape) == (
        "wsd",
        312 * recipe.training.batch_tokens,
        0.1,
        "sqrt",
    )


def test_a_later_schedule_of_another_name_replaces_the_earlier_section() -> None:
    """cosine then wsd: the wsd section alone (cosine's min_lr_ratio, no key of wsd, is gone)."""
    assert read_recipe_files([COSINE, WSD]) == yaml.safe_load(WSD.read_text())
    assert load_recipe(["demo", COSINE, WSD]).optimizer.schedule == "wsd"


def test_a_cosine_schedule_left_at_its_defaults_decays_to_zero(tmp_path: Path) -> None:
    """tiny-llm's schema default min_lr_ratio is 0.0 (its shipped overlay says 0.1)."""
    overlay = _file(tmp_path, {"lr_schedule": {"name": "cosine"}})
    assert load_recipe(["demo", overlay]).optimizer.min_lr_ratio == 0.0


def test_a_packed_recipe_without_topology_or_model_is_the_references_default(tmp_path: Path) -> None:
    recipe = load_recipe(_file(tmp_path, {"decentralized": {"num_models": 4}, "training": {"micro_batch_size": 8}}))
    model = recipe.model
    assert (model.vocab_size, model.layers, model.width, model.heads, model.ffn_width, model.context_length) == (
        32000,
        8,
        320,
        5,
        896,
        1024,
    )
    assert (recipe.decentralized.topology, recipe.decentralized.mixing_version) == ("complete", 2)
    optimizer = recipe.optimizer  # no lr_schedule: the reference's default one
    assert (optimizer.schedule, optimizer.warmup_tokens, optimizer.min_lr_ratio) == ("cosine", 312 * 32768, 0.0)


def test_an_overlay_without_a_name_keeps_the_schedule_it_tunes(tmp_path: Path) -> None:
    """The reference clears an earlier lr_schedule only for another name: a bare tweak keeps wsd."""
    tweak = _file(tmp_path, {"lr_schedule": {"warmup_steps": 10}})
    expected = {"lr_schedule": {"name": "wsd", "warmup_steps": 10, "decay_fraction": 0.1}}
    assert read_recipe_files([WSD, tweak]) == expected


def test_the_published_packed_recipe_keeps_its_directed_shift() -> None:
    recipe = load_recipe(Path(__file__).resolve().parent / "reference" / "recipe_sweep_20m" / "selected-packed-4.yaml")
    assert (recipe.decentralized.topology, recipe.decentralized.mixing_version) == ("one_peer_ring", 1)


def test_accum_adamw_and_its_accumulation_steps_are_accumadamw(tmp_path: Path) -> None:
    overlay = _file(tmp_path, {"optimizer": {"name": "accum_adamw", "accumulation_steps": 4}})
    assert load_recipe(["demo", overlay]).optimizer.accum_iter == 4
    bare = _file(tmp_path, {"optimizer": {"name": "accum_adamw"}}, "bare.yaml")
    assert load_recipe(["demo", bare]).optimizer.accum_iter == 2  # the reference's default


def test_checkpoint_policy_none_and_the_backend_are_recorded_as_ignored(tmp_path: Path) -> None:
    overlay = _file(tmp_path, {"training": {"checkpoint_policy": "none"}, "runtime": {"training_backend": "gh200"}})
    recipe = load_recipe(["demo", COSINE, overlay])
    assert recipe.training.checkpoint_policy == "final"
    assert recipe.runtime.ignored_keys == {"training.checkpoint_policy": "none", "runtime.training_backend": "gh200"}


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"data": {"shuffle_group_size": 2}}, "data.shuffle_group_size: 2: tiny-llm reads groups of 2 shards"),
        ({"lr_schedule": {"name": "wsd", "min_lr_ratio": 0.1}}, "lr_schedule.min_lr_ratio: not a key of"),
        ({"lr_schedule": {"name": "step"}}, "lr_schedule: expected a mapping with name cosine or wsd"),
        ({"lr_schedule": {"warmup_steps": 1.5}}, "lr_schedule.warmup_steps: 1.5"),
        ({"runtime": {"training_backend": "tpu"}}, "runtime.training_backend: tpu"),
    ],
)
def test_a_key_ebd2n_cannot_mean_the_same_is_refused_in_one_line(tmp_path: Path, raw: dict, key: str) -> None:
    with pytest.raises(UserError, match=key) as error:
        load_recipe(["demo", _file(tmp_path, raw)])
    assert "\n" not in str(error.value)


def test_ebd2n_train_takes_the_overlays_by_a_repeated_config(tmp_path: Path, demo_cache: Path) -> None:
    """The command line as the reference's: `--config base --config overlay` (a budget past its 312
    warm-up steps, one short slice of it trained); the run's recipe.yaml holds the merged schedule
    and its train.log names both files."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "ebd2n", "train", "--config", "demo", "--config", str(WSD), "--quiet"]
    command += ["--set", f"data.cache_dir={demo_cache}", "--set", f"runtime.output_dir={out}"]
    command += ["--set", "training.max_tokens=327680", "--set", "training.epoch_tokens=8192", "--until-epoch", "1"]
    result = subprocess.run(command, env={"PYTHONPATH": str(SRC), "PATH": ""}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    assert (recipe["optimizer"]["schedule"], recipe["optimizer"]["warmup_tokens"]) == ("wsd", 312 * 1024)
    assert f"config {recipe_source(['demo', WSD])} |" in (out / "train.log").read_text()
    bad = _file(tmp_path, {"data": {"shuffle_group_size": 2}})
    refused = subprocess.run(
        [*command[:6], "--config", str(bad)], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True
    )
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "data.shuffle_group_size" in refused.stderr


def test_ebd2n_campaign_check_takes_a_current_packed_recipe(tmp_path: Path) -> None:
    recipe = _file(tmp_path, {"decentralized": {"num_models": 4}, "lr_schedule": {"name": "wsd"}})
    campaign = {
        "campaign": "current",
        "recipe": str(recipe),
        "data": {"source": "synthetic", "cache_dir": "results/caches/synthetic"},
        "grid": {"modes": ["packed-4"], "learning_rates": {"packed-4": [0.004]}, "beta2": [0.95]},
        "seeds": [42],
        "epochs_per_slice": 40,
        "resources": {"default": {"gpus": 1, "minutes": 30, "mem_mb": 32000, "cpus": 8}},
    }
    path = _file(tmp_path, campaign, "campaign.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "ebd2n", "campaign", "check", str(path)], cwd=tmp_path, capture_output=True, text=True
    )
    from ebd2n.campaign.check import load_campaign
    from ebd2n.campaign.resolve import run_recipe

    grid = load_campaign(path).grid
    run = run_recipe(load_campaign(path).current_bases["base"], grid.runs()[0], "out")
    mixing = (run.decentralized.num_models, run.decentralized.topology, run.decentralized.mixing_version)
    result = (done.returncode, mixing, run.optimizer.schedule, run.model.width, "packed-4: 1 runs" in done.stdout)
    assert result == (0, (4, "complete", 2), "wsd", 320, True), done.stderr
