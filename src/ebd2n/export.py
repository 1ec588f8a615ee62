"""Export a fine-tuned Hugging Face model: a run's final weights, adapters merged, back in the
Hugging Face layout (config.json, model.safetensors, the tokenizer files), loadable by
transformers' from_pretrained."""

from __future__ import annotations

from pathlib import Path

from ebd2n.config import hf_model_dir, load_recipe, recipe_identity
from ebd2n.errors import UserError
from ebd2n.layout import RunPaths
from ebd2n.train.checkpoint import load_checkpoint
from ebd2n.train.weights import evaluation_state_dict


def export_run(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the run's merged final model to `out_dir` (which must not exist; written whole or not at all)."""
    paths = RunPaths(Path(run_dir))
    out_dir = Path(out_dir)
    if not paths.recipe.is_file():
        raise UserError(f"{paths.directory}: no {paths.recipe.name}; not a run directory")
    recipe = load_recipe(paths.recipe)
    if recipe.model.source != "huggingface":
        raise UserError(f"{paths.directory}: model.source is {recipe.model.source}; export writes Hugging Face models")
    if out_dir.exists():
        raise UserError(f"OUT_DIR {out_dir}: already exists; choose a new directory")
    if not paths.final.is_file():
        raise UserError(f"{paths.directory}: no {paths.final.name}; export a finished run")
    state = load_checkpoint(paths.final)
    if recipe_identity(recipe, state["cache_identity"]) != state["recipe_identity"]:
        raise UserError(
            f"{paths.directory}: the model in {hf_model_dir(recipe.model)} is not the one this run trained "
            "(its config or weights changed)"
        )
    from ebd2n.model.hf import save_model

    save_model(evaluation_state_dict(recipe, state["engine"]), hf_model_dir(recipe.model), out_dir)
    return out_dir
