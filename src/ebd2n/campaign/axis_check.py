"""What a campaign file's further axes (`grid.axes`) must satisfy before anything runs.

Each problem is one line naming the axis: a list of values without a dotted recipe key, two axes
with one name or one key, a key the grid already sets, a value the recipe schema refuses, a key the
mode has no section for, a value that changes a base recipe's epochs (its slice plan), a key the
members of a pack share, and a variant redefined after the campaign ran it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ebd2n.campaign.axes import GRID_KEYS, LABEL, Axis, recipe_value, value_label, with_bases
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.horizons import horizon_overrides
from ebd2n.campaign.resolve import run_recipe
from ebd2n.campaign.runs import BASE, SYNCHRONOUS, Run, base_name, split_base
from ebd2n.config import Recipe
from ebd2n.errors import UserError
from ebd2n.outcomes import DIVERGED
from ebd2n.train.budget import budget_of
from ebd2n.train.pack_rules import MEMBER_FIELDS

TABLE_COLUMNS = {
    *("run", "mode", "lr", "beta2", "seed", "status", "loss", "preset", "perplexity", "accuracy", "targets"),
    *("tokens", "horizon_tpp", "tokens_per_parameter", "directory", "recipe_identity", "cache_identity", "source_hash"),
    *("job_ids", "diverged_step", "packed"),
}
RESERVED = {
    *TABLE_COLUMNS,
    *("seeds_completed", "eligible", "mean_loss", "std_loss", "rank", "outcome", DIVERGED, "split", "seeds"),
    *("estimate", "low", "high", "points_used", "method", "open", "reason", "shift", "shift_low", "shift_high"),
    *("value", "gpus", "cpus", "jobs", "final", "curves", "at", "axis", "law", "point"),
    *("checked", "check", "bracket", "misfit"),
}
"""Runs-table columns an axis's name may not take (its column sits beside them; the table's schema,
ebd2n.campaign.results.RUN_COLUMNS, imports polars, which a campaign check does not need)."""


def check_axes_shape(raw: Mapping[str, Any] | None, where: str) -> None:
    """The file's `grid.axes` as written: a dotted key takes a list, a name takes named variants."""
    for name, values in (raw or {}).items():
        dotted = "." in name
        if isinstance(values, list) and not dotted:
            raise UserError(
                f"{where}: grid.axes.{name}: a list of values needs a dotted recipe key (optimizer.beta1: [...]); "
                "named variants are a mapping ({wsd: {optimizer.schedule: wsd}})"
            )
        if isinstance(values, Mapping) and dotted:
            raise UserError(
                f"{where}: grid.axes.{name}: a dotted recipe key takes a list of values; "
                "give named variants a name without dots (schedule: {wsd: {optimizer.schedule: wsd}})"
            )
        labels = [value_label(value) for value in values] if isinstance(values, list) else [str(v) for v in values]
        for label in labels:
            if not LABEL.fullmatch(label) or re.search(r"-(tpp|seed)[0-9]", label):
                raise UserError(
                    f"{where}: grid.axes.{name}: value {label!r} cannot name a run (a letter or digit first, then "
                    "letters, digits and ._+-; no -tpp or -seed before a digit)"
                )
        kinds = {type(value) for value in values} if isinstance(values, list) else set()
        if len(kinds) > 1 and kinds != {int, float}:
            raise UserError(f"{where}: grid.axes.{name}: values of one type, please (numbers, or text, or yes/no)")


def bind_axes(grid: Grid, bases: Mapping[str, Recipe]) -> Grid:
    """The grid with each axis's base value: the one every base recipe has (not named in run ids)."""
    if not grid.axes:
        return grid
    return replace(grid, axes=with_bases(grid.axes, [recipe.model_dump(mode="json") for recipe in bases.values()]))


def check_axes(grid: Grid, bases: Mapping[str, Recipe], pack: int, where: str, output_dir: str) -> None:
    """Every further axis's names and keys, then each of its values on every base recipe and mode."""
    if not grid.axes:
        return
    if grid.search.halving:
        raise UserError(
            f"{where}: grid.axes: successive halving over further axes is not supported yet; search the whole grid"
        )
    _check_names(grid.axes, grid, where)
    for base, recipe in bases.items():
        scope, horizon = split_base(base)
        for mode in grid.modes:
            lr = grid.mode_learning_rates(scope, mode)[0]
            probe = Run(None if scope == BASE else scope, mode, lr, grid.beta2[0], grid.seeds[0], horizon)
            plain = run_recipe(recipe, probe, output_dir, where).model_dump(mode="json")
            for axis in grid.axes:
                _check_values(axis, recipe, probe, plain, where, output_dir, bool(grid.horizons))
                if pack > 1 and mode == SYNCHRONOUS:
                    _check_packable(axis, pack, where)


def check_axes_kept(started: Iterable[Axis], now: Iterable[Axis], where: str) -> None:
    """A value a started campaign ran keeps its settings, and an axis its base value (else its runs'
    ids would name other recipes); `now` bound to the base recipes (`bind_axes`)."""
    before = {axis.name: axis for axis in started}
    for axis in now:
        if axis.name in before and before[axis.name].base != axis.base:
            raise UserError(
                f"{where}: grid.axes.{_written(axis)}: the campaign ran with {before[axis.name].base} as the value its "
                f"base recipes have, now {axis.base}; restore the base recipes (or presets) it started with"
            )
        for label, settings in axis.values.items():
            old = before[axis.name].values.get(label) if axis.name in before else None
            if old is not None and dict(old) != dict(settings):
                raise UserError(
                    f"{where}: grid.axes.{_written(axis)}: value {label} was run with {dict(old)}, "
                    f"now {dict(settings)}; give the changed value a new name"
                )


def _check_names(axes: Iterable[Axis], grid: Grid, where: str) -> None:
    names: dict[str, Axis] = {}
    keys: dict[str, Axis] = {}
    horizons = horizon_overrides(base_name(BASE, grid.horizons[0])) if grid.horizons else []
    fixed = {**GRID_KEYS, **{key: "grid.horizons" for key, _value in horizons}}
    for axis in axes:
        for key in sorted(axis.keys):
            if key in fixed:
                raise UserError(f"{where}: grid.axes.{_written(axis)}: {key} is set by {fixed[key]}, not by an axis")
            if key in keys and keys[key] is not axis:
                raise UserError(
                    f"{where}: grid.axes.{_written(axis)}: {key} is also set by grid.axes.{_written(keys[key])}; "
                    "one axis per key"
                )
            keys[key] = axis
        if axis.name in names or axis.name in RESERVED:
            other = (
                f"grid.axes.{_written(names[axis.name])}"
                if axis.name in names
                else "a column or field of the campaign's tables"
            )
            raise UserError(
                f"{where}: grid.axes.{_written(axis)}: its name {axis.name} is also {other}; "
                "write one of them as named variants under another name"
            )
        names[axis.name] = axis


def _check_values(
    axis: Axis, base: Recipe, probe: Run, plain: Mapping[str, Any], where: str, output_dir: str, horizons: bool
) -> None:
    """Each value on this base recipe in this mode: schema-valid, in a section the mode has, same
    epochs, and under grid.horizons still a wsd schedule (a longer horizon branches off its trunk)."""
    for key in sorted(axis.keys):
        if recipe_value(plain, key.split(".")[0]) is None:
            raise UserError(
                f"{where}: grid.axes.{_written(axis)}: {key} does not apply to mode {probe.mode} "
                f"(its recipe has no {key.split('.')[0]} section)"
            )
    epochs = budget_of(base).epochs
    for label, settings in axis.values.items():
        try:
            recipe = run_recipe(base, probe, output_dir, where, settings.items())
        except UserError as error:
            reason = str(error).removeprefix(f"{where} for run {probe.id}: ")
            raise UserError(f"{where}: grid.axes.{_written(axis)}: {label}: {reason}") from None
        if horizons and recipe.optimizer.schedule != "wsd":
            raise UserError(
                f"{where}: grid.axes.{_written(axis)}: {label}: grid.horizons branch wsd runs off a shorter "
                f"horizon's trunk, and {label} is a {recipe.optimizer.schedule} schedule; to train each horizon "
                "from scratch, make the budget an axis of named variants instead of grid.horizons"
            )
        if (trained := budget_of(recipe).epochs) != epochs:
            raise UserError(
                f"{where}: grid.axes.{_written(axis)}: {label} trains {trained} epochs, its base recipe {epochs}: "
                "the runs of one base share a slice plan (scale the epoch length with the budget)"
            )


def _check_packable(axis: Axis, pack: int, where: str) -> None:
    held = sorted(f"{section}.{key}" for section, keys in MEMBER_FIELDS.items() for key in keys)
    shared = sorted(key for key in axis.keys if key.split(".", 1)[-1] not in MEMBER_FIELDS.get(key.split(".")[0], ()))
    if shared:
        raise UserError(
            f"{where}: grid.axes.{_written(axis)}: execution.pack {pack}: {shared[0]} is shared by a pack's members "
            f"(they differ only in {', '.join(held)}); remove the axis or execution.pack"
        )


def _written(axis: Axis) -> str:
    """The axis as the campaign file names it: a key axis by its key, named variants by their name."""
    return axis.key or axis.name
