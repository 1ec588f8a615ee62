"""Grid axes over any recipe key: a key with a list of values, or named variants of a few keys.

A campaign file's `grid.axes` adds axes to modes x learning rates x beta2, each held the same
way: named values, each the recipe settings it applies. `optimizer.beta1: [0.9, 0.95]` is the
axis `beta1` with values `0.9` and `0.95`; `schedule: {wsd: {optimizer.schedule: wsd, ...}}` is
the axis `schedule` with the variant `wsd`. The value the campaign's base recipes already have
(the axis's `base`) adds nothing to a run id, so adding an axis whose values include it to a
started campaign keeps every run trained so far as that point of the new axis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

GRID_KEYS = {
    "optimizer.lr": "grid.learning_rates",
    "optimizer.beta2": "grid.beta2",
    "runtime.seed": "seeds",
    "decentralized.num_models": "grid.modes",
    "runtime.output_dir": "the run's own directory",
}
"""Recipe keys the grid already sets, so no further axis may: where each is set instead."""
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""A value's text in a run id: `0.95`, `65536`, `wsd`, `cosine-to-zero`."""
AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An axis's name in run ids and table columns (a key axis's is its key's last part)."""


@dataclass(frozen=True)
class Axis:
    """One further grid axis: its name, its values' settings in order, and the one the base has."""

    name: str
    values: Mapping[str, Mapping[str, Any]]
    """Label -> the recipe settings (dotted key -> value) it applies."""
    key: str | None = None
    """A key axis's recipe key (its table column holds the value); None: named variants (the name)."""
    base: str | None = None
    """The label whose settings every base recipe already has: left out of run ids; None: no such value."""

    @property
    def keys(self) -> set[str]:
        return {key for settings in self.values.values() for key in settings}

    def column(self, label: str) -> Any:
        """What a table holds for this axis at `label`: a key axis's value (a label of a value no
        longer declared read as its values' type), a variant's name."""
        if self.key is None:
            return label
        if label in self.values:
            return self.values[label][self.key]
        kind = type(next(iter(self.values.values()))[self.key])
        return label == "true" if kind is bool else kind(label)

    @property
    def dtype(self) -> type:
        """The Python type of the axis's table column: a key axis's values' (int, float, bool, str), else str."""
        kinds = {type(settings[self.key]) for settings in self.values.values()} if self.key else {str}
        return float if kinds == {int, float} else kinds.pop() if len(kinds) == 1 else str

    def record(self) -> dict[str, Any]:
        settings = {label: dict(values) for label, values in self.values.items()}
        return {"name": self.name, "key": self.key, "values": settings, "base": self.base}

    def union(self, later: Axis) -> Axis:
        """Both recordings' values, earlier first (a value's settings never change: the check refuses it)."""
        values = {**self.values, **{label: s for label, s in later.values.items() if label not in self.values}}
        return replace(self, values=values)


def axes_from_dict(raw: Mapping[str, Any] | None) -> tuple[Axis, ...]:
    """A campaign file's `grid.axes` (the schema checked its shape): a dotted key with a list of
    values, or a name with a mapping of named variants."""
    axes = []
    for name, values in (raw or {}).items():
        if isinstance(values, Mapping):
            variants = {str(label): dict(settings) for label, settings in values.items()}
            axes.append(Axis(str(name), variants))
        else:
            axes.append(Axis(str(name).rsplit(".", 1)[-1], {value_label(v): {name: v} for v in values}, key=str(name)))
    return tuple(axes)


def axis_from_record(raw: Mapping[str, Any]) -> Axis:
    """An axis as `Axis.record` wrote it (frozen/spec, campaign.json)."""
    values = {str(label): dict(settings) for label, settings in raw["values"].items()}
    return Axis(str(raw["name"]), values, raw.get("key"), raw.get("base"))


def value_label(value: Any) -> str:
    """A key axis value as run ids write it: floats as Python's repr (the shortest text that reads
    back as the same float), booleans as YAML does, anything else as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def with_bases(axes: Sequence[Axis], bases: Sequence[Mapping[str, Any]]) -> tuple[Axis, ...]:
    """Each axis with its `base`: the value whose settings each base recipe (as JSON) already has."""
    return tuple(replace(axis, base=_base_label(axis, bases)) for axis in axes)


def _base_label(axis: Axis, bases: Sequence[Mapping[str, Any]]) -> str | None:
    for label, settings in axis.values.items():
        if all(recipe_value(base, key) == value for base in bases for key, value in settings.items()):
            return label
    return None


def recipe_value(recipe: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key of a recipe as JSON; None where a section or key is absent."""
    value: Any = recipe
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value
