"""Recipe files: YAML in, `--set` overrides, strict validation, canonical identity, YAML out."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ebd2n.atomic import atomic_write_text
from ebd2n.config.hf import Architecture, locate_model_dir, model_identity, read_architecture
from ebd2n.config.schema import ModelConfig, Recipe
from ebd2n.config.tinyllm import from_tiny_llm, is_tiny_llm
from ebd2n.errors import UserError
from ebd2n.yamlio import first_line, load_yaml, read_yaml_mapping

RESULT_NEUTRAL_FIELDS: tuple[str, ...] = (
    "data.cache_dir",
    "runtime.output_dir",
    "runtime.device",
    "runtime.purpose",
    "runtime.cpu_threads",
    "training.checkpoint_policy",
    "training.checkpoint_epochs",
    "training.keep_pre_decay",
    "training.log_every",
    "runtime.ignored_keys",
)
"""Fields that never change a run's numbers; they are left out of the recipe identity."""


def presets_dir() -> Path:
    """The recipe presets shipped in this package (ebd2n/config/recipes): a checkout, an installed
    wheel and a campaign's frozen trainer copy each read their own."""
    return files(__package__) / "recipes"


def resolve_recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file path, or the name of a shipped preset (demo, 20m, 254m, ...)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    preset = presets_dir() / f"{name_or_path}.yaml"
    if preset.is_file():
        return preset
    known = ", ".join(sorted(p.stem for p in presets_dir().glob("*.yaml")))
    raise UserError(f"recipe {name_or_path}: no such file and no such preset (presets: {known})")


def parse_overrides(pairs: Iterable[str]) -> list[tuple[str, Any]]:
    """Parse `a.b=value` strings; the value is YAML (so 1e-3, true, [1, 2] and null work)."""
    parsed = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise UserError(f"--set {pair!r}: expected KEY=VALUE with a dotted key such as optimizer.lr=0.001")
        try:
            value = load_yaml(raw) if raw.strip() else None
        except yaml.YAMLError as error:
            raise UserError(f"--set {key}: value {raw!r} is not valid YAML ({first_line(error)})") from None
        parsed.append((key, value))
    return parsed


def recipe_from_dict(
    raw: Mapping[str, Any], overrides: Iterable[tuple[str, Any]] = (), source: str = "recipe"
) -> Recipe:
    """Validate a raw mapping (after overrides) into a Recipe; errors name the key and `source`."""
    if not isinstance(raw, Mapping):
        raise UserError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    data = from_tiny_llm(raw, source) if is_tiny_llm(raw) else copy.deepcopy(dict(raw))
    for key, value in overrides:
        _set_dotted(data, key, value, f"{source}: {key}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as error:
        raise UserError(f"{source}: {_describe(error)}") from None


RecipeFiles = str | Path | Sequence[str | Path]
"""One recipe file or preset, or several (a repeated --config), merged in order."""


def recipe_source(names: RecipeFiles) -> str:
    """What the recipe was read from, as errors and run.json name it: `a.yaml + b.yaml` for several."""
    return " + ".join(str(resolve_recipe_path(name)) for name in _names(names))


def read_recipe_files(names: RecipeFiles) -> dict[str, Any]:
    """The raw recipe of one file, or of several merged as the reference merges its --config files:
    mappings deeply, a later value over an earlier one, lists replaced whole, and an `lr_schedule`
    naming another schedule than the earlier one replacing that section."""
    merged: dict[str, Any] = {}
    for name in _names(names):
        _merge(merged, read_yaml_mapping(resolve_recipe_path(name), "recipe"))
    return merged


def _names(names: RecipeFiles) -> list[str | Path]:
    return [names] if isinstance(names, str | Path) else list(names)


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> None:
    for key, value in over.items():
        earlier = base.get(key)
        schedules = key == "lr_schedule" and isinstance(earlier, dict) and isinstance(value, Mapping)
        if schedules and "name" in earlier and "name" in value and earlier["name"] != value["name"]:
            earlier = base[key] = {}
        if isinstance(earlier, dict) and isinstance(value, Mapping):
            _merge(earlier, value)
        else:
            base[key] = copy.deepcopy(value)


def load_recipe(name_or_path: RecipeFiles, overrides: Iterable[str] = ()) -> Recipe:
    """Load a recipe file or preset (or several, merged: `read_recipe_files`) and apply `--set` overrides.

    An error names the `--set KEY=VALUE` arguments that touch the offending key, or all of them
    when the file alone is valid; otherwise it names the file.
    """
    path = recipe_source(name_or_path)
    raw = read_recipe_files(name_or_path)
    if is_tiny_llm(raw):
        raw = from_tiny_llm(raw, str(path))
    pairs = list(overrides)
    parsed = parse_overrides(pairs)
    data = copy.deepcopy(raw)
    for pair, (key, value) in zip(pairs, parsed, strict=True):
        _set_dotted(data, key, value, f"--set {pair}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as error:
        location = ".".join(str(part) for part in error.errors()[0]["loc"])
        blamed = [pair for pair, (key, _) in zip(pairs, parsed, strict=True) if _concerns(key, location)]
        if not blamed and pairs and _valid(raw):
            blamed = pairs
        source = f"--set {', --set '.join(blamed)}" if blamed else str(path)
        raise UserError(f"{source}: {_describe(error)}") from None


_ADDED_DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {"source": "gpt", "path": None, "name": None, "revision": None},
    "lora": {"train_norms": False},
    "data": {"supervised": None},
    "runtime": {"cuda_path_on_cpu": False},
    "optimizer": {
        "schedule": "cosine",
        "decay_fraction": 0.1,
        "decay_shape": "sqrt",
        "accum_iter": 1,
        "warmup_tokens": None,
    },
    "decentralized": {"adaptive_consensus": None, "mixing_version": 1},
    "training": {"divergence_margin": 1.0, "divergence_patience": 20, "keep_pre_decay": False},
}
"""Fields added after recipes were first identified: left out of dumps and identities at their
default, so every earlier recipe keeps its recipe.yaml and its identity."""


def _recipe_data(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe as plain data, without added fields at their default."""
    data = recipe.model_dump(mode="json")
    sections = {
        "model": data["model"],
        "lora": data["parallel"].get("lora"),
        "data": data["data"],
        "runtime": data["runtime"],
        "optimizer": data["optimizer"],
        "decentralized": data["decentralized"],
        "training": data["training"],
    }
    for section, defaults in _ADDED_DEFAULTS.items():
        for key, default in defaults.items():
            if sections[section] is not None and sections[section].get(key, default) == default:
                sections[section].pop(key, None)
    return data


def dump_recipe(recipe: Recipe) -> str:
    """The resolved recipe as YAML, in schema order."""
    return yaml.safe_dump(_recipe_data(recipe), sort_keys=False, allow_unicode=True)


def save_recipe(recipe: Recipe, path: str | Path) -> None:
    """Write the resolved recipe atomically."""
    atomic_write_text(path, dump_recipe(recipe))


def recipe_identity(recipe: Recipe, cache_identity: str | None) -> str:
    """SHA-256 of the canonical resolved recipe without result-neutral fields, plus the cache identity.

    A Hugging Face model is identified by its name, revision and config and weights hashes, not
    by where its directory is.
    """
    data = _recipe_data(recipe)
    if recipe.model.source == "huggingface":
        data["model"].pop("path")
        data["model"]["identity"] = hf_identity(recipe.model)
    for dotted in RESULT_NEUTRAL_FIELDS:
        section, _, field = dotted.partition(".")
        if isinstance(data.get(section), dict):
            data[section].pop(field, None)
    canonical = json.dumps({"recipe": data, "cache_identity": cache_identity}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def count_parameters(model: ModelConfig) -> int:
    """Parameter count from the shapes: tied embedding, per block two norms, attention, SwiGLU; final norm
    (huggingface: of the architecture in its config.json)."""
    if model.source == "huggingface":
        return hf_architecture(model).parameters()
    d, f = model.width, model.ffn_width
    per_block = 2 * d + 4 * d * d + 3 * d * f
    return model.vocab_size * d + model.layers * per_block + d


def hf_model_dir(model: ModelConfig) -> Path:
    """The directory of a huggingface model section (model.path, or model.name in the local hub cache)."""
    return locate_model_dir(model.path, model.name, model.revision)


def hf_identity(model: ModelConfig) -> dict:
    """Name, revision, config and weights SHA-256 of a huggingface model section."""
    return model_identity(hf_model_dir(model), model.name, model.revision)


def hf_architecture(model: ModelConfig) -> Architecture:
    """The architecture of a huggingface model section, from its config.json."""
    return read_architecture(hf_model_dir(model))


def _set_dotted(data: dict, key: str, value: Any, source: str) -> None:
    """Assign data[a][b] = value for key 'a.b', creating sections that are absent or null."""
    *parents, leaf = key.split(".")
    node = data
    for i, part in enumerate(parents):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise UserError(f"{source}: {'.'.join(parents[: i + 1])} is not a section")
        node = child
    node[leaf] = value


def _concerns(key: str, location: str) -> bool:
    """Whether an override of `key` sets the error's location, or a field within it or above it."""
    return bool(location) and (key == location or key.startswith(location + ".") or location.startswith(key + "."))


def _valid(raw: Mapping[str, Any]) -> bool:
    try:
        Recipe.model_validate(raw)
    except ValidationError:
        return False
    return True


def _describe(error: ValidationError) -> str:
    """One line naming the first offending key and what is wrong with it."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "recipe"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    more = error.error_count() - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{location}: {message}{suffix}"
