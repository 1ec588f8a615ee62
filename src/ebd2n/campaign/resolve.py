"""One run's recipe: the campaign's frozen base recipe plus the run's grid point and seed."""

from __future__ import annotations

from pathlib import Path

from ebd2n.campaign.runs import Run, packed_models, parse_run_id
from ebd2n.config import Recipe, load_recipe, recipe_from_dict, save_recipe
from ebd2n.errors import UserError
from ebd2n.layout import campaign_of_run, run_paths


def run_recipe(base: Recipe, run: Run, output_dir: str | Path, source: str = "recipe") -> Recipe:
    """`base` with the run's mode, learning rate, beta2 and seed, writing into `output_dir`."""
    raw = base.model_dump(mode="json")
    models = packed_models(run.mode)
    raw["decentralized"] = None if models is None else {**(raw.get("decentralized") or {}), "num_models": models}
    overrides = [
        ("optimizer.lr", run.lr),
        ("optimizer.beta2", run.beta2),
        ("runtime.seed", run.seed),
        ("runtime.output_dir", Path(output_dir).as_posix()),
    ]
    return recipe_from_dict(raw, overrides, source=f"{source} for run {run.id}")


def resolve_run(run_dir: str | Path) -> Path:
    """Write `<run_dir>/recipe.yaml` from results/<campaign>/frozen and the run id (the dir's name)."""
    run_dir = Path(run_dir)
    campaign = campaign_of_run(run_dir)
    if campaign is None:
        raise UserError(f"{run_dir}: expected a run directory results/<campaign>/runs/<run-id>")
    run = parse_run_id(run_dir.name)
    base_path = campaign.base_recipe(run.base)
    if not base_path.is_file():
        raise UserError(f"{base_path}: no frozen base recipe; freeze the campaign first (ebd2n freeze CAMPAIGN_FILE)")
    recipe = run_recipe(load_recipe(base_path), run, run_dir, source=str(base_path))
    path = run_paths(run_dir).recipe
    save_recipe(recipe, path)
    return path
