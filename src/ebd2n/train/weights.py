"""A recipe's model and the plain GPT weights of its checkpoints: initial weights, fine-tuning
adapters, and the state dict a checkpoint is evaluated with."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ebd2n.config import Recipe, hf_model_dir, load_recipe
from ebd2n.errors import UserError
from ebd2n.layout import run_paths
from ebd2n.model import GPT, PackedGPT
from ebd2n.model.lora import apply_lora_, freeze_prefix_, merged_state_dict
from ebd2n.train.checkpoint import load_checkpoint, run_dir_of


def initial_model(recipe: Recipe) -> nn.Module:
    """A fresh GPT from the current torch seed, or the Hugging Face model's weights; or the weights
    of training.init_from."""
    if recipe.model.source == "huggingface":
        from ebd2n.model.hf import load_model

        model = load_model(hf_model_dir(recipe.model))
    else:
        model = GPT(recipe.model)
    if recipe.training.init_from:
        model.load_state_dict(checkpoint_weights(Path(recipe.training.init_from)))
    return model


def checkpoint_weights(path: Path) -> dict:
    """Plain GPT weights of any ebd2n checkpoint (its run's recipe.yaml says how to read it)."""
    recipe_path = run_paths(run_dir_of(path)).recipe
    if not recipe_path.is_file():
        raise UserError(f"training.init_from {path}: no {recipe_path.name} in its run directory")
    return evaluation_state_dict(load_recipe(recipe_path), load_checkpoint(path)["engine"])


def model_skeleton(recipe: Recipe) -> nn.Module:
    """The recipe's model with every tensor on the meta device (the shapes, nothing allocated)."""
    if recipe.model.source == "huggingface":
        from ebd2n.model.hf import skeleton

        return skeleton(hf_model_dir(recipe.model))
    with torch.device("meta"):
        return GPT(recipe.model)


def model_with_weights(recipe: Recipe, weights: dict) -> nn.Module:
    """The recipe's plain model (no adapters) holding `weights` (from evaluation_state_dict)."""
    if recipe.model.source == "huggingface":
        return hf_with_state(recipe, weights, adapters=False)
    model = GPT(recipe.model)
    model.load_state_dict(weights)
    return model


def hf_with_state(recipe: Recipe, state: dict, adapters: bool = True) -> nn.Module:
    """A Hugging Face recipe's model, with its adapters (an engine's state) or plain, holding `state`."""
    model = model_skeleton(recipe)
    if adapters:
        with torch.device("meta"):
            model = fine_tuning_model(recipe, model)
    model.load_state_dict(state, assign=True)
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.reset_rotary()
    return model


def fine_tuning_model(recipe: Recipe, model: nn.Module) -> nn.Module:
    """Apply the recipe's frozen prefix and LoRA adapters (no-ops for plain training)."""
    lora, prefix = recipe.parallel.lora, recipe.parallel.freeze_prefix
    if lora is not None:
        apply_lora_(model, lora, first_block=prefix)
    elif prefix:
        freeze_prefix_(model, prefix)
    return model


def evaluation_state_dict(recipe: Recipe, state: dict) -> dict:
    """Plain GPT weights a checkpoint is evaluated with (packed: the replica average; LoRA: merged)."""
    if recipe.decentralized is None:
        if recipe.parallel.lora is None:
            return state["model"]
        model = model_skeleton(recipe)
        with torch.device("meta"):
            model = fine_tuning_model(recipe, model)
        model.load_state_dict(state["model"], assign=True)
        return merged_state_dict(model)
    packed = PackedGPT(recipe.model, recipe.decentralized.num_models, init=False)
    packed.load_state_dict(state["model"])
    return packed.average_state_dict()
