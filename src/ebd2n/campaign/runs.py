"""Run ids: a grid point and a seed, written so that the id alone says how to train the run.

`packed-4-lr0.0012-beta20.999-seed42`; scaling campaigns prefix the preset:
`254m-synchronous-lr0.0008-beta20.95-seed42`; campaigns with training horizons (tokens per
parameter) name the run's before its seed: `synchronous-lr0.001-beta20.95-tpp80.0-seed42`; further
axes (`grid.axes`, ebd2n.campaign.axes) name each value but their base's, after beta2:
`synchronous-lr0.01-beta20.95-beta1=0.98-schedule=wsd-seed42`. Floats are written as Python's repr,
the shortest text that reads back as the same float, so an id maps to exactly one grid point and back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ebd2n.campaign.axes import AXIS_NAME, LABEL
from ebd2n.errors import UserError

BASE = "base"
"""Name of the single base recipe of a campaign without a presets axis (frozen/recipes/base.yaml)."""

SYNCHRONOUS = "synchronous"
"""The mode whose runs pack (`execution.pack`): one model each, so K of them make one packed model."""
_NUMBER = r"[0-9][0-9.e+-]*?"
_PRESET = r"[A-Za-z0-9][A-Za-z0-9._]*"
_PACKED_MODE = r"packed-[0-9]+"
_SHORTEST_LABEL = f"{LABEL.pattern}?"
"""An axis value's label, as short as the rest of the id allows (a label may hold `-`)."""
_RUN_ID = re.compile(
    rf"^(?:(?P<preset>{_PRESET})-)?(?P<mode>{SYNCHRONOUS}|{_PACKED_MODE})"
    rf"-lr(?P<lr>{_NUMBER})-beta2(?P<beta2>{_NUMBER})(?P<axes>(?:-{AXIS_NAME.pattern}={_SHORTEST_LABEL})*)"
    rf"(?:-tpp(?P<horizon>{_NUMBER}))?-seed(?P<seed>[0-9]+)$"
)
_AXIS_VALUE = re.compile(rf"-({AXIS_NAME.pattern})=({_SHORTEST_LABEL})(?=-{AXIS_NAME.pattern}=|$)")
_HORIZON_SUFFIX = "-tpp"


@dataclass(frozen=True)
class Run:
    """One run of a campaign: model preset (scaling campaigns), mode, learning rate, beta2, seed."""

    preset: str | None
    mode: str
    lr: float
    beta2: float
    seed: int
    horizon: float | None = None
    """Training horizon in tokens per parameter (a campaign's `grid.horizons`); None: the recipe's budget."""
    axes: tuple[tuple[str, str], ...] = ()
    """(axis, value label) of each further axis not at its base value, in the grid's order."""

    @property
    def id(self) -> str:
        prefix = f"{self.preset}-" if self.preset else ""
        axes = "".join(f"-{name}={label}" for name, label in self.axes)
        horizon = f"-tpp{self.horizon!r}" if self.horizon is not None else ""
        return f"{prefix}{self.mode}-lr{self.lr!r}-beta2{self.beta2!r}{axes}{horizon}-seed{self.seed}"

    @property
    def label(self) -> str:
        """The id as a page shows it: `packed-4 · lr 0.0012 · β2 0.999 · seed 42` (`beta20.999` reads as a number)."""
        prefix = f"{self.preset} · " if self.preset else ""
        axes = "".join(f" · {name} {label}" for name, label in self.axes)
        horizon = f" · {self.horizon:g} tokens/param" if self.horizon is not None else ""
        return f"{prefix}{self.mode} · lr {self.lr!r} · β2 {self.beta2!r}{axes}{horizon} · seed {self.seed}"

    @property
    def scope(self) -> str:
        """The preset (or `BASE`) whose settings the run takes: learning-rate lists, resources, slices."""
        return self.preset or BASE

    @property
    def base(self) -> str:
        """Which frozen base recipe the run starts from: its scope's, at its horizon."""
        return base_name(self.scope, self.horizon)


def base_name(scope: str, horizon: float | None) -> str:
    """The frozen base recipe of a preset (or `BASE`) at a horizon: `20m`, `20m-tpp80.0`."""
    return scope if horizon is None else f"{scope}{_HORIZON_SUFFIX}{horizon!r}"


def split_base(base: str) -> tuple[str, float | None]:
    """(scope, horizon) of a base recipe name (`base_name`'s inverse; preset names hold no `-`)."""
    scope, suffix, horizon = base.partition(_HORIZON_SUFFIX)
    return (scope, float(horizon)) if suffix else (base, None)


def unknown_mode(mode: str) -> str:
    """What a misspelt mode is told (the schema's pattern would say a regular expression)."""
    return f"unknown mode {mode!r} (modes: synchronous, packed-K for K >= 2)"


def packed_models(mode: str) -> int | None:
    """K of `packed-K`; None for synchronous."""
    return None if mode == SYNCHRONOUS else int(mode.removeprefix("packed-"))


def run_id_pattern(synchronous: bool) -> str:
    """A regular expression of the ids of synchronous runs, or of every other mode's: the workflow
    trains the first in packs under `execution.pack` and the others alone (the mode is followed by
    `-lr`, so no id matches both)."""
    return rf"(?:{_PRESET}-)?{SYNCHRONOUS if synchronous else _PACKED_MODE}-lr[^/]+"


def parse_run_id(run_id: str) -> Run:
    """The run an id names; ids not in canonical form are refused (two ids would name one run)."""
    match = _RUN_ID.fullmatch(run_id)
    if match is None:
        raise UserError(
            f"run id {run_id!r}: expected [<preset>-]<mode>-lr<float>-beta2<float>[-<axis>=<value>...][-tpp<float>]"
            "-seed<int>, "
            "e.g. packed-4-lr0.0012-beta20.999-seed42"
        )
    try:
        horizon = float(match["horizon"]) if match["horizon"] is not None else None
        axes = tuple((name, label) for name, label in _AXIS_VALUE.findall(match["axes"]))
        run = Run(
            match["preset"], match["mode"], float(match["lr"]), float(match["beta2"]), int(match["seed"]), horizon, axes
        )
    except ValueError:
        raise UserError(f"run id {run_id!r}: learning rate or beta2 is not a number") from None
    if run.id != run_id:
        raise UserError(f"run id {run_id!r}: not in canonical form; the run with these values is {run.id!r}")
    return run


def run_label(run_id: str) -> str | None:
    """The grid point of a run id, readable (`Run.label`); None for an id of no grid run."""
    try:
        return parse_run_id(run_id).label
    except UserError:
        return None
