"""Recipes: load, override, validate, save and identify one run's configuration."""

from ebd2n.config.parallelism import DecentralizedConfig, LoraConfig, ParallelConfig
from ebd2n.config.recipe import (
    RESULT_NEUTRAL_FIELDS,
    count_parameters,
    dump_recipe,
    hf_architecture,
    hf_identity,
    hf_model_dir,
    load_recipe,
    parse_overrides,
    read_recipe_files,
    recipe_from_dict,
    recipe_identity,
    recipe_source,
    resolve_recipe_path,
    save_recipe,
)
from ebd2n.config.schema import (
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    OptimizerConfig,
    Recipe,
    RuntimeConfig,
    SupervisedConfig,
    TrainingConfig,
)
from ebd2n.config.section import INT_RANGE

__all__ = [
    "INT_RANGE",
    "RESULT_NEUTRAL_FIELDS",
    "DataConfig",
    "DecentralizedConfig",
    "EvaluationConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "Recipe",
    "RuntimeConfig",
    "SupervisedConfig",
    "TrainingConfig",
    "count_parameters",
    "dump_recipe",
    "hf_architecture",
    "hf_identity",
    "hf_model_dir",
    "load_recipe",
    "parse_overrides",
    "recipe_from_dict",
    "recipe_identity",
    "read_recipe_files",
    "recipe_source",
    "resolve_recipe_path",
    "save_recipe",
]
