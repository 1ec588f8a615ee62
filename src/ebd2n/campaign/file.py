"""The campaign file: its JSON Schema and the `Campaign` it describes.

The schema is `campaign.schema.yaml` beside this module (package data). `ebd2n campaign check` and
the workflow (`workflow/rules/common.smk`) both read a campaign file through
`ebd2n.campaign.check.load_campaign`, which checks it here first, so they refuse a bad file with
the same one-line message.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from ebd2n.campaign.confirmation import Confirm
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.horizons import horizon_overrides
from ebd2n.campaign.resources import PREPARE, Resources, scope_name, scope_resources
from ebd2n.campaign.runs import BASE, SYNCHRONOUS, split_base, unknown_mode
from ebd2n.campaign.schema_words import plain_error
from ebd2n.config import INT_RANGE, Recipe, load_recipe, recipe_from_dict, resolve_recipe_path
from ebd2n.errors import UserError
from ebd2n.layout import CampaignPaths, named_campaign
from ebd2n.provenance import software_versions
from ebd2n.yamlio import load_yaml, read_yaml_mapping

SCHEMA_PATH = files(__package__) / "campaign.schema.yaml"
"""The campaign file's JSON Schema, shipped in this package (Snakemake's workflow reads it through here)."""
FROZEN_SETTINGS = ("recipe", "data", "overrides", "checkpoint_policy", "checkpoint_epochs", "epochs_per_slice")
"""Settings fixed when a campaign starts: changing them would change runs already trained."""


@dataclass(frozen=True)
class Campaign:
    """A checked campaign file."""

    name: str
    source: str
    description: str
    recipe: str | None
    grid: Grid
    data: Mapping[str, Any]
    overrides: Mapping[str, Any]
    preset_overrides: Mapping[str, Mapping[str, Any]]
    epochs_per_slice: int | Mapping[str, int]
    """One value, or one per preset of a scaling campaign (see slice_epochs)."""
    checkpoint_policy: str
    resources: Mapping[str, Mapping[str, Any]]
    checkpoint_epochs: list[int] | None = None
    """The interval policy's K or the explicit policy's epochs; None: the recipe's own."""
    cost_per_gpu_hour: float | None = None
    """Price of a GPU-hour; the report turns GPU-hours into money with it."""
    signing_key: str | None = None
    """Private key the passing audit signs with (EBD2N_SIGNING_KEY overrides it; ebd2n.signing)."""
    pack: int = 1
    """`execution.pack`: synchronous runs of one base recipe train up to this many in one job."""
    confirm: Confirm | None = None
    """`confirm`: the points trained again on fresh seeds after selection (None: no confirmation)."""

    @property
    def paths(self) -> CampaignPaths:
        return named_campaign(self.name)

    @property
    def directory(self) -> Path:
        return self.paths.directory

    @functools.cached_property
    def current_bases(self) -> dict[str, Recipe]:
        """Each base recipe: the frozen one once written, else as it would be frozen now (resolved once
        per Campaign: the workflow, its checks and its plans all ask)."""
        return {
            base: load_recipe(path) if (path := self.paths.base_recipe(base)).is_file() else self.base_recipe(base)
            for base in self.grid.bases
        }

    def settings(self) -> dict[str, Any]:
        """The settings a started campaign must keep (recorded in frozen/freeze.json)."""
        settings = {key: _plain(getattr(self, key)) for key in FROZEN_SETTINGS}
        presets = self.grid.presets or ()
        settings["preset_overrides"] = {base: _plain(self.preset_overrides.get(base, {})) for base in presets}
        return settings

    def job_resources(self, base: str, mode: str | None) -> Resources:
        """Resources of a job of `base` in `mode` (None: the data-cache job); see scope_resources."""
        return scope_resources(self.resources, split_base(base)[0], mode)

    def slice_epochs(self, base: str) -> int:
        """Epochs one job of this base recipe's runs trains (given per preset: at each horizon alike)."""
        if isinstance(self.epochs_per_slice, int):
            return self.epochs_per_slice
        return self.epochs_per_slice[split_base(base)[0]]

    def pack_job_resources(self, base: str) -> Resources:
        """A pack job's: its runs' scope's, with K times their time limit (a pack trains K runs'
        slices in one job; on a CPU about K times as long, on a GPU less): one GPU, one run's memory and CPUs."""
        resources = self.job_resources(base, SYNCHRONOUS)
        return dataclasses.replace(resources, minutes=resources.minutes * self.pack)

    def execution_record(self, max_jobs: int | None) -> dict[str, Any]:
        """How the campaign's jobs ran, for its results record: at most `max_jobs` at once (the
        profile's `jobs`), runs per pack, each job scope's time limit, partition and account (a
        pack job's as `<scope> pack`), and the software."""
        scopes = {PREPARE: self.job_resources(BASE, None)}
        for scope in self.grid.scopes:
            for mode in self.grid.modes:
                scopes[scope_name(scope, mode)] = self.job_resources(scope, mode)
            if self.pack > 1 and SYNCHRONOUS in self.grid.modes:
                scopes[f"{scope_name(scope, SYNCHRONOUS)} pack"] = self.pack_job_resources(scope)
        return {
            "max_concurrent_jobs": max_jobs,
            "runs_per_pack": self.pack,
            "jobs": {
                scope: {
                    "gpus": r.job_gpus,
                    "time_limit_minutes": r.minutes,
                    "partition": r.partition,
                    "account": r.account,
                }
                for scope, r in scopes.items()
            },
            "versions": software_versions(),
        }

    def base_recipe(self, base: str) -> Recipe:
        """A base recipe as it is now: preset or file, then the campaign's data, overrides, policy and
        horizon (ebd2n.campaign.horizons)."""
        scope = split_base(base)[0]
        reference = self.recipe if scope == BASE else scope
        path = resolve_recipe_path(reference)
        raw = read_yaml_mapping(path, "recipe")
        purpose = f"campaign {self.name}" + (f": {self.description}" if self.description else "")
        overrides = [
            *((f"data.{key}", value) for key, value in self.data.items()),
            *self.overrides.items(),
            *self.preset_overrides.get(scope, {}).items(),
            *horizon_overrides(base),
            ("training.checkpoint_policy", self.checkpoint_policy),
            *([("training.checkpoint_epochs", self.checkpoint_epochs)] if self.checkpoint_epochs is not None else []),
            ("runtime.purpose", purpose),
        ]
        return recipe_from_dict(raw, overrides, source=f"{self.source}: base recipe {reference}")


def validate_schema(raw: Any, source: str = "campaign") -> None:
    """JSON Schema check, then the integer range: the first error in plain words (ebd2n.campaign.schema_words),
    naming the key."""
    errors = list(_validator().iter_errors(raw))
    if errors:
        error = errors[0]
        mode = list(error.absolute_path)[:2] in (["grid", "modes"], ["grid", "learning_rates"])
        if mode and error.validator in ("pattern", "anyOf") and isinstance(error.instance, str):
            where, message = ".".join(str(part) for part in error.absolute_path), unknown_mode(error.instance)
        else:
            where, message = plain_error(errors, _validator())
        raise UserError(f"campaign file {source}: {where}: {message}")
    for where, value in _integers(raw):
        low, high = INT_RANGE
        if not low <= value <= high:
            raise UserError(
                f"campaign file {source}: {where}: {value} is outside the integers the trainer can use "
                f"({low} .. {high}, int64)"
            )


def _integers(value: Any, where: str = "") -> list[tuple[str, int]]:
    """Every integer of a parsed campaign file, with its dotted key."""
    if isinstance(value, Mapping):
        return [
            pair for key, item in value.items() for pair in _integers(item, f"{where}.{key}" if where else str(key))
        ]
    if isinstance(value, list):
        return [pair for index, item in enumerate(value) for pair in _integers(item, f"{where}.{index}")]
    return [(where, value)] if isinstance(value, int) and not isinstance(value, bool) else []


@functools.cache
def _validator():
    from jsonschema import Draft202012Validator, validators

    schema = load_yaml(SCHEMA_PATH.read_text(encoding="utf-8"))
    return validators.extend(Draft202012Validator, {"pattern": _whole_string_pattern})(schema)


def _whole_string_pattern(validator, pattern: str, instance: Any, schema: Any):
    """The schema's `pattern` as JSON Schema means it (ECMA-262): `$` is the end of the string.
    Python's `$` also matches before a trailing newline, which would let `campaign: "small\n"`
    through and plan results/small\n/; every name the schema checks is matched as a whole string."""
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not re.search(_END.sub(r"\\Z", pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_END = re.compile(r"(?<!\\)\$")
"""An unescaped `$` of a schema pattern."""


def _plain(value: Any) -> Any:
    """JSON-like copy (tuples to lists) so settings compare equal to what freeze.json holds."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
