"""Recipes: presets, YAML round trip, --set overrides, identity, bad input through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ebd2n.config import (
    RESULT_NEUTRAL_FIELDS,
    count_parameters,
    dump_recipe,
    load_recipe,
    parse_overrides,
    recipe_identity,
    save_recipe,
)
from ebd2n.errors import UserError

PRESET_SIZES = {"254m": 254e6, "483m": 483e6, "778m": 778e6, "1.41b": 1.41e9}
CACHE = "c" * 64


def _ebd2n(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_preset_20m_has_the_reference_parameter_count() -> None:
    result = count_parameters(load_recipe("20m").model)
    assert result == 20_403_520


@pytest.mark.parametrize(("preset", "size"), PRESET_SIZES.items())
def test_scaling_preset_within_half_a_percent_of_its_name(preset: str, size: float) -> None:
    result = abs(count_parameters(load_recipe(preset).model) - size) / size
    assert result < 0.005


def test_recipe_yaml_round_trip(tmp_path: Path) -> None:
    recipe = load_recipe("20m", ["optimizer.lr=1e-3", "decentralized.num_models=4"])
    save_recipe(recipe, tmp_path / "recipe.yaml")
    result = load_recipe(tmp_path / "recipe.yaml")
    assert result == recipe


def test_overrides_parse_values_as_yaml() -> None:
    result = parse_overrides(
        ["optimizer.lr=1e-3", "runtime.compile=true", "parallel.lora={rank: 4}", "training.init_from="]
    )
    expected = [
        ("optimizer.lr", 0.001),
        ("runtime.compile", True),
        ("parallel.lora", {"rank": 4}),
        ("training.init_from", None),
    ]
    assert result == expected


def test_overrides_apply_in_order() -> None:
    result = load_recipe("demo", ["runtime.seed=1", "runtime.seed=7", "optimizer.beta2=0.98"])
    assert (result.runtime.seed, result.optimizer.beta2) == (7, 0.98)


def test_override_creates_a_null_section() -> None:
    result = load_recipe("demo", ["decentralized.num_models=8"]).mode
    assert result == "packed-8"


def test_identity_stable_across_processes() -> None:
    code = "from ebd2n.config import load_recipe, recipe_identity; print(recipe_identity(load_recipe('20m'), 'c' * 64))"
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    result = outputs
    assert result == {recipe_identity(load_recipe("20m"), CACHE) + "\n"}


@pytest.mark.parametrize(
    "override",
    [
        "optimizer.lr=0.0029",
        "optimizer.beta2=0.99",
        "runtime.seed=43",
        "model.layers=9",
        "training.batch_tokens=65536",
        "evaluation.seed=1",
        "data.shuffle_seed=7",
        "decentralized.num_models=4",
        "runtime.deterministic=true",
        "runtime.cuda_path_on_cpu=true",
    ],
)
def test_identity_changes_with_result_relevant_fields(override: str) -> None:
    result = recipe_identity(load_recipe("20m", [override]), CACHE)
    assert result != recipe_identity(load_recipe("20m"), CACHE)


def test_identity_changes_with_the_cache() -> None:
    result = recipe_identity(load_recipe("20m"), "d" * 64)
    assert result != recipe_identity(load_recipe("20m"), CACHE)


@pytest.mark.parametrize(
    "override",
    [
        "runtime.output_dir=elsewhere",
        "runtime.device=cpu",
        "data.cache_dir=/tmp/c4",
        "runtime.purpose=why",
        "training.checkpoint_policy=epoch",
    ],
)
def test_identity_ignores_result_neutral_fields(override: str) -> None:
    assert override.split("=")[0] in RESULT_NEUTRAL_FIELDS
    result = recipe_identity(load_recipe("20m", [override]), CACHE)
    assert result == recipe_identity(load_recipe("20m"), CACHE)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.depth=3"], "model.depth: unknown key"),
        (["optimizer.lr=-0.1"], "optimizer.lr: Input should be greater than 0"),
        (["optimizer.beta2=1.0"], "optimizer.beta2: Input should be less than 1"),
        (["training.micro_batch_size=half"], "training.micro_batch_size: Input should be a valid integer"),
        (["model.heads=3"], "must be divisible by model.heads"),
        (["decentralized.num_models=6", "decentralized.topology=one_peer_exponential"], "power of two"),
        (["optimizer.lr"], "expected KEY=VALUE"),
        (["optimizer.lr=[1"], "optimizer.lr: value .* is not valid YAML"),
        (["optimizer=3"], "optimizer: Input should be a valid dictionary"),
    ],
)
def test_bad_recipe_input_names_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_recipe("demo", overrides)


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(UserError, match=r"recipe nope: no such file and no such preset \(presets: .*20m"):
        load_recipe("nope")


def test_cli_recipe_prints_identity_and_parameters() -> None:
    result = _ebd2n("recipe", "20m", "--set", "optimizer.lr=1e-3")
    assert result.returncode == 0 and "parameters: 20,403,520" in result.stdout and "lr: 0.001" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["recipe", "demo", "--set", "optimizer.momentum=0.9"], "optimizer.momentum: unknown key"),
        (["recipe", "demo", "--set", "nokey"], "expected KEY=VALUE"),
        (["prepare", "demo", "--set", "data.source=local", "--set", "data.dataset=/nonexistent/x.jsonl"], "x.jsonl"),
        (["train", "--config", "missing.yaml"], "missing.yaml"),
        (["validate", "/nonexistent/run"], "/nonexistent/run"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = _ebd2n(*args, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines), message in lines[-1]) == (2, 1, True)


def test_dump_keeps_schema_section_order() -> None:
    result = [line.split(":")[0] for line in dump_recipe(load_recipe("demo")).splitlines() if not line.startswith(" ")]
    assert result == ["model", "data", "optimizer", "training", "evaluation", "runtime", "decentralized", "parallel"]
