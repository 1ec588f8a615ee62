"""Recipes: load, override, validate, save and identify one run's configuration."""

from ebd2n.config.recipe import (
    RESULT_NEUTRAL_FIELDS,
    count_parameters,
    dump_recipe,
    load_recipe,
    parse_overrides,
    recipe_from_dict,
    recipe_identity,
    resolve_recipe_path,
    save_recipe,
)
from ebd2n.config.schema import (
    DataConfig,
    DecentralizedConfig,
    EvaluationConfig,
    LoraConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    Recipe,
    RuntimeConfig,
    SupervisedConfig,
    TrainingConfig,
)

__all__ = [
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
    "load_recipe",
    "parse_overrides",
    "recipe_from_dict",
    "recipe_identity",
    "resolve_recipe_path",
    "save_recipe",
]
