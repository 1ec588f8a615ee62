"""A checked campaign: the schema, then what a schema cannot say (axes that fit together, presets
and resources that fit the recipes, settings a started campaign must keep, a search that fits the
slices).

Every check raises a one-line UserError naming the campaign file and the key; `ebd2n campaign
check` and the workflow's Snakefile load a campaign here, so both refuse a bad file alike.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ebd2n.campaign.axis_check import bind_axes, check_axes, check_axes_kept, check_axes_shape
from ebd2n.campaign.confirmation import Confirm
from ebd2n.campaign.file import Campaign, validate_schema
from ebd2n.campaign.grid import grid_from_dict, grid_from_record
from ebd2n.campaign.horizons import check_branch_in_mode, check_horizons, check_horizons_growth
from ebd2n.campaign.plans import campaign_plans
from ebd2n.campaign.resolve import run_recipe
from ebd2n.campaign.resources import DEFAULT, PREPARE, scope_name
from ebd2n.campaign.runs import BASE, SYNCHRONOUS, Run, packed_models, split_base
from ebd2n.campaign.search import check_search
from ebd2n.config import Recipe
from ebd2n.config.checkpoint_policy import DEFAULT_CHECKPOINT_POLICY, epochs_past_budget
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.train.budget import budget_of
from ebd2n.train.pack_rules import pack_refusal
from ebd2n.yamlio import read_yaml_mapping


def load_campaign(path: str | Path) -> Campaign:
    """Read and check a campaign file."""
    return campaign_from_dict(read_yaml_mapping(path, "campaign file"), source=str(path))


def campaign_from_dict(raw: Any, source: str = "campaign") -> Campaign:
    """Check a parsed campaign (the schema, then consistency) and build the Campaign."""
    validate_schema(raw, source)
    check_axes_shape(raw["grid"].get("axes"), f"campaign file {source}")
    epochs = raw["epochs_per_slice"]
    campaign = Campaign(
        name=raw["campaign"],
        source=source,
        description=raw.get("description", ""),
        recipe=raw.get("recipe"),
        grid=grid_from_dict(raw["grid"], raw["seeds"], raw.get("search")),
        data=dict(raw.get("data", {})),
        overrides=dict(raw.get("overrides", {})),
        preset_overrides={preset: dict(keys) for preset, keys in raw.get("preset_overrides", {}).items()},
        epochs_per_slice=epochs if isinstance(epochs, int) else dict(epochs),
        checkpoint_policy=raw.get("checkpoint_policy", DEFAULT_CHECKPOINT_POLICY),
        checkpoint_epochs=_epoch_list(raw.get("checkpoint_epochs")),
        resources={scope: dict(values) for scope, values in raw.get("resources", {}).items()},
        cost_per_gpu_hour=raw.get("cost_per_gpu_hour"),
        signing_key=raw.get("signing_key"),
        pack=raw.get("execution", {}).get("pack", 1),
        confirm=Confirm(confirm["top"], tuple(confirm["seeds"])) if (confirm := raw.get("confirm")) else None,
    )
    _check_campaign(campaign)
    _check_confirm(campaign)
    if not campaign.grid.axes:
        return campaign
    return dataclasses.replace(campaign, grid=bind_axes(campaign.grid, campaign.current_bases))


def _check_confirm(campaign: Campaign) -> None:
    """Fresh seeds only, and (for now) a grid whose every run trains alone and from scratch."""
    confirm, grid, where = campaign.confirm, campaign.grid, f"campaign file {campaign.source}: confirm"
    if confirm is None:
        return
    if shared := sorted(set(confirm.seeds) & set(grid.seeds)):
        raise UserError(f"{where}.seeds: {shared} are seeds of the grid; a confirmation needs seeds no selection saw")
    unsupported = [
        name
        for name, used in (
            ("search (successive halving)", grid.search.halving),
            ("execution.pack", campaign.pack > 1),
            ("grid.horizons", bool(grid.horizons)),
        )
        if used
    ]
    if unsupported:
        raise UserError(f"{where}: not yet with {', '.join(unsupported)}; confirm a plain grid")


def _epoch_list(value: int | list[int] | None) -> list[int] | None:
    """`checkpoint_epochs: 2` as [2], as the recipe reads it."""
    return [value] if isinstance(value, int) else value


def _check_campaign(campaign: Campaign) -> None:
    """What the schema cannot say; the first problem, one line."""
    where, grid = f"campaign file {campaign.source}", campaign.grid
    if (campaign.recipe is None) == (grid.presets is None):
        raise UserError(
            f"{where}: set either recipe (the base recipe of every run) or grid.presets "
            "(a scaling campaign, one base recipe per preset), not both or neither"
        )
    for mode in grid.modes:
        if mode not in grid.learning_rates and not all(
            f"{scope}-{mode}" in grid.learning_rates for scope in grid.scopes
        ):
            raise UserError(
                f"{where}: grid.learning_rates: no list for mode {mode}; "
                "give each mode in grid.modes its learning rates"
            )
    scoped = {f"{preset}-{mode}" for preset in grid.presets or () for mode in grid.modes}
    for mode in grid.learning_rates:
        if mode in scoped:
            continue
        if mode not in grid.modes:
            raise UserError(f"{where}: grid.learning_rates.{mode}: mode {mode} is not in grid.modes {list(grid.modes)}")
    scopes = {DEFAULT, PREPARE, *grid.modes}
    if grid.presets:
        scopes |= {*grid.presets, *(f"{p}-{m}" for p in grid.presets for m in grid.modes)}
    if not isinstance(campaign.epochs_per_slice, int) and set(campaign.epochs_per_slice) != set(grid.presets or ()):
        raise UserError(
            f"{where}: epochs_per_slice: one value per preset needs exactly grid.presets {list(grid.presets or ())}, "
            f"got {list(campaign.epochs_per_slice)}"
        )
    for preset in campaign.preset_overrides:
        if preset not in (grid.presets or ()):
            raise UserError(f"{where}: preset_overrides.{preset}: not in grid.presets {list(grid.presets or ())}")
    for scope in campaign.resources:
        if scope not in scopes:
            raise UserError(
                f"{where}: resources.{scope}: not a scope of this campaign; use one of {', '.join(sorted(scopes))}"
            )
    _check_frozen(campaign)
    bases = campaign.current_bases
    caches = {recipe.data.cache_dir for recipe in bases.values()}
    if len(caches) > 1:
        raise UserError(
            f"{where}: the presets use different data caches ({', '.join(sorted(caches))}); set data.cache_dir"
        )
    if campaign.pack > 1 and grid.horizons:
        raise UserError(
            f"{where}: execution.pack: runs that branch from a shorter horizon's trunk (grid.horizons) do not pack; "
            "remove one of the two"
        )
    check_horizons(grid, bases, campaign.checkpoint_policy, where)
    _check_checkpoint_epochs(campaign, [budget_of(recipe).epochs for recipe in bases.values()], where)
    check_axes(grid, bases, campaign.pack, where, campaign.paths.runs.as_posix())
    for base, recipe in bases.items():
        epochs = budget_of(recipe).epochs
        scope, horizon = split_base(base)
        for mode in grid.modes:
            lr = grid.mode_learning_rates(scope, mode)[0]
            probe = Run(None if scope == BASE else scope, mode, lr, grid.beta2[0], grid.seeds[0], horizon)
            try:
                probed = run_recipe(recipe, probe, campaign.paths.run(probe.id).directory, source=where)
                probe_epochs = budget_of(probed).epochs
                check_branch_in_mode(grid, bases, probe, probed, where)
            except UserError as error:
                raise UserError(f"{where}: {probe.id}: {error}") from None
            if probe_epochs != epochs:
                # packed-K rounds derived budgets to whole blocks per model, which can change the epoch count
                raise UserError(
                    f"{where}: {base} in mode {mode} has a different number of epochs than its base recipe; "
                    "set training.max_tokens and training.epoch_tokens"
                )
            _check_resources(campaign, base, mode, recipe, where)
            if campaign.pack > 1 and mode == SYNCHRONOUS and (refusal := pack_refusal([probed])) is not None:
                raise UserError(f"{where}: execution.pack {campaign.pack}: {base}'s synchronous runs: {refusal}")
    check_search(grid.search, campaign_plans(campaign), grid.brackets(), where)


def _check_checkpoint_epochs(campaign: Campaign, budgets: list[int], where: str) -> None:
    """An explicit checkpoint epoch past every run's budget would silently keep nothing. The budgets of
    a scaling campaign's presets may differ: an epoch only the longer runs reach is theirs to keep, and
    the shorter ignore it. (A campaign with horizons keeps the final policy: check_horizons.)"""
    if campaign.checkpoint_epochs is None:
        return
    past = epochs_past_budget(campaign.checkpoint_policy, campaign.checkpoint_epochs, max(budgets))
    if past:
        epochs, verb, them = ("epochs", "are", "them") if len(past) > 1 else ("epoch", "is", "it")
        raise UserError(
            f"{where}: checkpoint_epochs: {epochs} {', '.join(map(str, past))} {verb} past every run's budget "
            f"(the longest is {max(budgets)} epochs), so no run would keep {them}; "
            f"remove {them}, or lengthen the budget"
        )


def campaign_warnings(campaign: Campaign) -> list[str]:
    """What a campaign file may mean to set but leaves empty or has no effect: one line each, for the
    workflow to print before it plans (dry runs included). A scope that names `account: null` is written for SLURM,
    where many clusters refuse a job without an account, and a dry run cannot tell."""
    warnings = [
        f"{campaign.source}: resources.{scope}.account is null, so its SLURM jobs go to your default account; "
        f"a cluster that requires an account refuses them at submission: set it (sbatch --account) or remove the key"
        for scope, fields in campaign.resources.items()
        if "account" in fields and fields["account"] is None
    ]
    if campaign.pack > 1 and SYNCHRONOUS not in campaign.grid.modes:
        warnings.append(
            f"{campaign.source}: execution.pack {campaign.pack}, but grid.modes has no synchronous mode: no run packs "
            "(packed-K runs train alone)"
        )
    return warnings


def _check_frozen(campaign: Campaign) -> None:
    """A started campaign may grow along its grid axes and seeds; its fixed settings must not change."""
    record_path = campaign.paths.freeze_record
    if not record_path.is_file():
        return
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        frozen, first_horizons = record["settings"], [float(h) for h in record.get("horizons") or ()]
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(
            f"{record_path}: damaged ({type(error).__name__}); it records how campaign {campaign.name} started"
        ) from None
    now = campaign.settings()
    # presets added after the start may bring their own overrides; those frozen must stay
    now["preset_overrides"] = {base: now["preset_overrides"].get(base, {}) for base in frozen["preset_overrides"]}
    # the horizons it started with (its base recipes freeze one by one, in any order) and since
    frozen_bases = [split_base(path.stem) for path in campaign.paths.frozen_recipes.glob("*.yaml")]
    started = sorted({*first_horizons, *(horizon for _scope, horizon in frozen_bases if horizon is not None)})
    check_horizons_growth(started, list(campaign.grid.horizons or ()), f"campaign file {campaign.source}")
    if campaign.grid.axes and campaign.paths.frozen_spec.is_dir():
        now_axes = bind_axes(campaign.grid, campaign.current_bases).axes
        for path in sorted(campaign.paths.frozen_spec.glob("*.json")):
            check_axes_kept(grid_from_record(read_json(path)).axes, now_axes, f"campaign file {campaign.source}")
    changed = [key for key in frozen if frozen[key] != now[key]]
    if changed:
        details = "; ".join(f"{key}: frozen {frozen.get(key)!r}, now {now[key]!r}" for key in changed)
        raise UserError(
            f"campaign file {campaign.source}: campaign {campaign.name} started with other settings ({details}). "
            "A started campaign can only gain learning rates, beta2 values, modes, presets, seeds, longer horizons, "
            "further axes and their values; "
            f"restore the settings, or give the changed campaign a new name (or remove {campaign.paths.frozen} "
            "and its runs to start over)"
        )


def _check_resources(campaign: Campaign, base: str, mode: str, recipe: Recipe, where: str) -> None:
    """Packed-K trains its K models on one device; a multi-GPU synchronous job needs a placement for every GPU."""
    resources = campaign.job_resources(base, mode)
    gpus = resources.job_gpus
    scope = scope_name(split_base(base)[0], mode)
    if resources.nodes > 1 and resources.gpus_per_node is None:
        raise UserError(
            f"{where}: resources for {scope}: nodes {resources.nodes} needs gpus_per_node (the GPUs of each node)"
        )
    parallel = recipe.parallel
    if resources.gpus_per_node is not None and parallel.pipeline_stages * parallel.data_parallel != gpus:
        raise UserError(
            f"{where}: resources for {scope}: nodes x gpus_per_node = "
            f"{resources.nodes} x {resources.gpus_per_node} GPUs, "
            f"but the recipe places the model on parallel.pipeline_stages x parallel.data_parallel = "
            f"{parallel.pipeline_stages} x {parallel.data_parallel} devices; make them equal"
        )
    if packed_models(mode) is not None and gpus > 1:
        raise UserError(
            f"{where}: resources for {scope}: gpus {gpus}, but packed-K mode trains its K models on one device; "
            "set gpus to 0 or 1"
        )
    if gpus >= 1 and parallel.pipeline_stages * parallel.data_parallel != gpus:
        raise UserError(
            f"{where}: resources for {scope}: gpus {gpus}, but the recipe places the model on "
            "parallel.pipeline_stages x parallel.data_parallel = "
            f"{parallel.pipeline_stages} x {parallel.data_parallel} devices; "
            "make them equal (overrides: parallel.data_parallel or parallel.pipeline_stages)"
        )
    if gpus == 0 and recipe.runtime.device.startswith("cuda"):
        raise UserError(
            f"{where}: resources for {scope}: gpus 0, but runtime.device is {recipe.runtime.device}; give the job a GPU"
        )
