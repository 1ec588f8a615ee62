"""One run's recipe: the campaign's frozen base recipe plus the run's grid point and seed."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ebd2n.campaign.runs import Run, packed_models, parse_run_id
from ebd2n.config import Recipe, load_recipe, recipe_from_dict, save_recipe
from ebd2n.errors import UserError
from ebd2n.layout import campaign_of_run, run_paths


def run_recipe(
    base: Recipe, run: Run, output_dir: str | Path, source: str = "recipe", settings: Iterable[tuple[str, Any]] = ()
) -> Recipe:
    """`base` with the run's mode, its further axes' `settings` (`Grid.settings`), learning rate,
    beta2 and seed, writing into `output_dir`."""
    raw = base.model_dump(mode="json")
    models = packed_models(run.mode)
    raw["decentralized"] = None if models is None else {**(raw.get("decentralized") or {}), "num_models": models}
    overrides = [
        *settings,
        ("optimizer.lr", run.lr),
        ("optimizer.beta2", run.beta2),
        ("runtime.seed", run.seed),
        ("runtime.output_dir", Path(output_dir).as_posix()),
    ]
    return recipe_from_dict(raw, overrides, source=f"{source} for run {run.id}")


def resolve_run(run_dir: str | Path, settings: str | None = None) -> Path:
    """Write `<run_dir>/recipe.yaml` from results/<campaign>/frozen, the run id (the dir's name) and
    the settings of its further axes (`settings_option`: the workflow passes them, JSON)."""
    run_dir = Path(run_dir)
    campaign = campaign_of_run(run_dir)
    if campaign is None:
        raise UserError(f"{run_dir}: expected a run directory results/<campaign>/runs/<run-id>")
    run = parse_run_id(run_dir.name)
    base_path = campaign.base_recipe(run.base)
    if not base_path.is_file():
        raise UserError(f"{base_path}: no frozen base recipe; freeze the campaign first (ebd2n freeze CAMPAIGN_FILE)")
    recipe = run_recipe(load_recipe(base_path), run, run_dir, str(base_path), _settings(settings, run))
    path = run_paths(run_dir).recipe
    save_recipe(recipe, path)
    return path


def settings_option(settings: Iterable[tuple[str, Any]]) -> str:
    """`ebd2n resolve --settings`'s value: the settings as a JSON object (floats exactly), '' for none."""
    return json.dumps(dict(settings)) if settings else ""


def _settings(option: str | None, run: Run) -> list[tuple[str, Any]]:
    """The settings a run's id asks for, as `--settings` gave them; named axes without settings are refused."""
    try:
        settings = json.loads(option) if option else {}
    except json.JSONDecodeError:
        raise UserError(f"--settings {option!r}: not a JSON object of recipe keys") from None
    if not isinstance(settings, dict):
        raise UserError(f"--settings {option!r}: not a JSON object of recipe keys")
    if run.axes and not settings:
        raise UserError(f"run {run.id}: its axes ({', '.join(name for name, _ in run.axes)}) need --settings")
    return list(settings.items())
