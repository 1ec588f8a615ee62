"""Campaign files: read, check against the JSON Schema and for consistency, expand into runs.

The schema is `campaign.schema.yaml` beside this module (package data). `ebd2n campaign check` and the workflow
(`workflow/rules/common.smk`) both check a campaign file here, so they refuse a bad file with the
same one-line message. The checks a schema cannot express (every mode has learning rates, presets exist, resources fit the
mode, the base recipe accepts the overrides) follow here.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from ebd2n.campaign.resolve import run_recipe
from ebd2n.campaign.runs import BASE, Run, grid_runs, packed_models, point_learning_rates
from ebd2n.campaign.search import Halving, Search, brackets, campaign_halving, check_search, search_from_dict
from ebd2n.config import INT_RANGE, Recipe, load_recipe, recipe_from_dict, resolve_recipe_path
from ebd2n.errors import UserError
from ebd2n.atomic import atomic_write_text
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths, named_campaign
from ebd2n.provenance import software_versions
from ebd2n.train.budget import budget_of
from ebd2n.train.plan import SlicePlan, parse_plan, read_slice_plan, recipe_plan
from ebd2n.yamlio import load_yaml, read_yaml_mapping

SCHEMA_PATH = files(__package__) / "campaign.schema.yaml"
"""The campaign file's JSON Schema, shipped in this package (Snakemake's workflow reads it through here)."""
PREPARE = "prepare"
DEFAULT = "default"
FROZEN_SETTINGS = ("recipe", "data", "overrides", "checkpoint_policy", "epochs_per_slice")
"""Settings fixed when a campaign starts: changing them would change runs already trained."""


@dataclass(frozen=True)
class Resources:
    """What one job asks the scheduler for."""

    gpus: int = 0
    """GPUs per job (0: CPU only); a job that sets gpus_per_node has nodes x gpus_per_node instead."""
    nodes: int = 1
    """Nodes the job spans (SLURM --nodes); above 1 needs gpus_per_node."""
    gpus_per_node: int | None = None
    """GPUs on each of the job's nodes (SLURM --gres=gpu:<n>); None: the job asks for `gpus` on one node."""
    minutes: int = 30
    """Wall-time limit of one job."""
    mem_mb: int = 4000
    """Memory per job in MB."""
    cpus: int = 1
    """CPU cores per job."""
    partition: str | None = None
    """SLURM partition (None: the cluster's default)."""
    account: str | None = None
    """SLURM account (None: the user's default)."""

    @property
    def job_gpus(self) -> int:
        """Every GPU of the job, over all its nodes (the local slots it takes, the processes it may start)."""
        return self.gpus if self.gpus_per_node is None else self.nodes * self.gpus_per_node

    @property
    def slurm(self) -> dict[str, Any]:
        """This job's resources in the SLURM executor plugin's names (the workflow's `resources:`).

        A job with gpus_per_node asks for its nodes and `gres` (per node) instead of `gpus` (per job,
        which SLURM may spread unevenly); one over several nodes is an `mpi` job to the plugin, whose
        command runs in the batch script, not in a one-task step, so that `ebd2n.launch` can `srun`
        one torchrun agent on each node."""
        names: dict[str, Any] = {"runtime": self.minutes, "mem_mb": self.mem_mb}
        if self.gpus_per_node is None and self.gpus:
            names["gpu"] = self.gpus
        if self.gpus_per_node is not None:
            names |= {"nodes": self.nodes, "gres": f"gpu:{self.gpus_per_node}"}
        if self.nodes > 1:
            # one task (a torchrun agent) per node; tasks_per_gpu 0 keeps the plugin from asking
            # for `tasks` tasks per GPU
            names |= {"mpi": "srun", "tasks": self.nodes, "tasks_per_gpu": 0}
        names |= {name: value for name, value in (("slurm_partition", self.partition), ("slurm_account", self.account)) if value}
        return names


@dataclass(frozen=True)
class Campaign:
    """A checked campaign file."""

    name: str
    source: str
    description: str
    recipe: str | None
    presets: tuple[str, ...] | None
    data: Mapping[str, Any]
    overrides: Mapping[str, Any]
    preset_overrides: Mapping[str, Mapping[str, Any]]
    modes: tuple[str, ...]
    learning_rates: Mapping[str, tuple[float, ...]]
    beta2: tuple[float, ...]
    seeds: tuple[int, ...]
    epochs_per_slice: int | Mapping[str, int]
    """One value, or one per preset of a scaling campaign (see slice_epochs)."""
    checkpoint_policy: str
    resources: Mapping[str, Mapping[str, Any]]
    cost_per_gpu_hour: float | None = None
    """Price of a GPU-hour; the report turns GPU-hours into money with it."""
    signing_key: str | None = None
    """Private key the passing audit signs with (EBD2N_SIGNING_KEY overrides it; ebd2n.signing)."""
    search: Search = Search()
    """How the grid is searched: every point to the end, or successive halving (ebd2n.campaign.search)."""

    @property
    def paths(self) -> CampaignPaths:
        return named_campaign(self.name)

    @property
    def directory(self) -> Path:
        return self.paths.directory

    @property
    def bases(self) -> tuple[str, ...]:
        """Base recipe names: the presets of a scaling campaign, else the single `base`."""
        return self.presets or (BASE,)

    @functools.cached_property
    def current_bases(self) -> dict[str, Recipe]:
        """See `current_bases`."""
        return {
            base: load_recipe(path) if (path := self.paths.base_recipe(base)).is_file() else self.base_recipe(base)
            for base in self.bases
        }

    def runs(self) -> list[Run]:
        """Every run of the grid, ordered by preset, mode, learning rate, beta2, seed."""
        return grid_runs(self.presets, self.modes, self.learning_rates, self.beta2, self.seeds)

    def settings(self) -> dict[str, Any]:
        """The settings a started campaign must keep (recorded in frozen/freeze.json)."""
        settings = {key: _plain(getattr(self, key)) for key in FROZEN_SETTINGS}
        settings["preset_overrides"] = {base: _plain(self.preset_overrides.get(base, {})) for base in self.presets or ()}
        return settings

    def job_resources(self, base: str, mode: str | None) -> Resources:
        """Resources of a job: each field from the most specific scope that sets it.

        Scopes, most specific first: `<preset>-<mode>`, `<preset>`, `<mode>`, `default`; the
        data-cache job (mode None) reads `prepare`, then `default`.
        """
        if mode is None:
            scopes = [PREPARE, DEFAULT]
        else:
            preset = [] if base == BASE else [f"{base}-{mode}", base]
            scopes = [*preset, mode, DEFAULT]
        merged: dict[str, Any] = {}
        for scope in reversed(scopes):
            merged.update(self.resources.get(scope, {}))
        return Resources(**merged)

    def mode_learning_rates(self, base: str, mode: str) -> tuple[float, ...]:
        """The learning rates of one preset's runs in one mode: its `<preset>-<mode>` list, else the mode's."""
        return point_learning_rates(self.learning_rates, None if base == BASE else base, mode)

    def slice_epochs(self, base: str) -> int:
        """Epochs one job of this base recipe's runs trains."""
        if isinstance(self.epochs_per_slice, int):
            return self.epochs_per_slice
        return self.epochs_per_slice[base]

    def execution_record(self, max_jobs: int | None) -> dict[str, Any]:
        """How the campaign's jobs ran, for its results record: at most `max_jobs` at once (the
        profile's `jobs`), each job scope's time limit, partition and account, and the software."""
        scopes = {PREPARE: self.job_resources(BASE, None)}
        for base in self.bases:
            for mode in self.modes:
                scopes[mode if base == BASE else f"{base}-{mode}"] = self.job_resources(base, mode)
        return {
            "max_concurrent_jobs": max_jobs,
            "jobs": {
                scope: {"gpus": r.job_gpus, "time_limit_minutes": r.minutes, "partition": r.partition, "account": r.account}
                for scope, r in scopes.items()
            },
            "versions": software_versions(),
        }

    def base_recipe(self, base: str) -> Recipe:
        """A base recipe as it is now: preset or file, then the campaign's data, overrides, policy."""
        reference = self.recipe if base == BASE else base
        path = resolve_recipe_path(reference)
        raw = read_yaml_mapping(path, "recipe")
        purpose = f"campaign {self.name}" + (f": {self.description}" if self.description else "")
        overrides = [
            *((f"data.{key}", value) for key, value in self.data.items()),
            *self.overrides.items(),
            *self.preset_overrides.get(base, {}).items(),
            ("training.checkpoint_policy", self.checkpoint_policy),
            ("runtime.purpose", purpose),
        ]
        return recipe_from_dict(raw, overrides, source=f"{self.source}: base recipe {reference}")


def load_campaign(path: str | Path) -> Campaign:
    """Read and check a campaign file."""
    return campaign_from_dict(read_yaml_mapping(path, "campaign file"), source=str(path))


def campaign_from_dict(raw: Any, source: str = "campaign") -> Campaign:
    """Check a parsed campaign (the schema, then consistency) and build the Campaign."""
    validate_schema(raw, source)
    grid = raw["grid"]
    campaign = Campaign(
        name=raw["campaign"],
        source=source,
        description=raw.get("description", ""),
        recipe=raw.get("recipe"),
        presets=tuple(grid["presets"]) if "presets" in grid else None,
        data=dict(raw.get("data", {})),
        overrides=dict(raw.get("overrides", {})),
        preset_overrides={preset: dict(keys) for preset, keys in raw.get("preset_overrides", {}).items()},
        modes=tuple(grid["modes"]),
        learning_rates={mode: tuple(float(lr) for lr in lrs) for mode, lrs in grid["learning_rates"].items()},
        beta2=tuple(float(b) for b in grid["beta2"]),
        seeds=tuple(raw["seeds"]),
        epochs_per_slice=raw["epochs_per_slice"] if isinstance(raw["epochs_per_slice"], int) else dict(raw["epochs_per_slice"]),
        checkpoint_policy=raw.get("checkpoint_policy", "final"),
        resources={scope: dict(values) for scope, values in raw.get("resources", {}).items()},
        cost_per_gpu_hour=raw.get("cost_per_gpu_hour"),
        signing_key=raw.get("signing_key"),
        search=search_from_dict(raw.get("search")),
    )
    _check(campaign)
    return campaign


def validate_schema(raw: Any, source: str = "campaign") -> None:
    """JSON Schema check, then the integer range: the first error, naming the key."""
    error = next(_validator().iter_errors(raw), None)
    if error is not None:
        where = ".".join(str(part) for part in error.absolute_path) or "top level"
        raise UserError(f"campaign file {source}: {where}: {error.message}")
    for where, value in _integers(raw):
        low, high = INT_RANGE
        if not low <= value <= high:
            raise UserError(f"campaign file {source}: {where}: {value} is outside the integers the trainer can use ({low} .. {high}, int64)")


def _integers(value: Any, where: str = "") -> list[tuple[str, int]]:
    """Every integer of a parsed campaign file, with its dotted key."""
    if isinstance(value, Mapping):
        return [pair for key, item in value.items() for pair in _integers(item, f"{where}.{key}" if where else str(key))]
    if isinstance(value, list):
        return [pair for index, item in enumerate(value) for pair in _integers(item, f"{where}.{index}")]
    return [(where, value)] if isinstance(value, int) and not isinstance(value, bool) else []


def current_bases(campaign: Campaign) -> dict[str, Recipe]:
    """Each base recipe: the frozen one once written, else as it would be frozen now (resolved once
    per Campaign: the workflow, its checks and its plans all ask)."""
    return campaign.current_bases


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


def _check(campaign: Campaign) -> None:
    """What the schema cannot say."""
    where = f"campaign file {campaign.source}"
    if (campaign.recipe is None) == (campaign.presets is None):
        raise UserError(
            f"{where}: set either recipe (the base recipe of every run) or grid.presets "
            "(a scaling campaign, one base recipe per preset), not both or neither"
        )
    for mode in campaign.modes:
        if mode not in campaign.learning_rates and not all(f"{base}-{mode}" in campaign.learning_rates for base in campaign.bases):
            raise UserError(f"{where}: grid.learning_rates: no list for mode {mode}; give each mode in grid.modes its learning rates")
    scoped = {f"{preset}-{mode}" for preset in campaign.presets or () for mode in campaign.modes}
    for mode in campaign.learning_rates:
        if mode in scoped:
            continue
        if mode not in campaign.modes:
            raise UserError(f"{where}: grid.learning_rates.{mode}: mode {mode} is not in grid.modes {list(campaign.modes)}")
    scopes = {DEFAULT, PREPARE, *campaign.modes}
    if campaign.presets:
        scopes |= {*campaign.presets, *(f"{p}-{m}" for p in campaign.presets for m in campaign.modes)}
    if not isinstance(campaign.epochs_per_slice, int) and set(campaign.epochs_per_slice) != set(campaign.presets or ()):
        raise UserError(
            f"{where}: epochs_per_slice: one value per preset needs exactly grid.presets {list(campaign.presets or ())}, "
            f"got {list(campaign.epochs_per_slice)}"
        )
    for preset in campaign.preset_overrides:
        if preset not in (campaign.presets or ()):
            raise UserError(f"{where}: preset_overrides.{preset}: not in grid.presets {list(campaign.presets or ())}")
    for scope in campaign.resources:
        if scope not in scopes:
            raise UserError(
                f"{where}: resources.{scope}: not a scope of this campaign; use one of {', '.join(sorted(scopes))}"
            )
    _check_frozen(campaign)
    bases = current_bases(campaign)
    caches = {recipe.data.cache_dir for recipe in bases.values()}
    if len(caches) > 1:
        raise UserError(f"{where}: the presets use different data caches ({', '.join(sorted(caches))}); set data.cache_dir")
    for base, recipe in bases.items():
        epochs = budget_of(recipe).epochs
        for mode in campaign.modes:
            lr = campaign.mode_learning_rates(base, mode)[0]
            probe = Run(None if base == BASE else base, mode, lr, campaign.beta2[0], campaign.seeds[0])
            try:
                probe_epochs = budget_of(run_recipe(recipe, probe, campaign.paths.run(probe.id).directory, source=where)).epochs
            except UserError as error:
                raise UserError(f"{where}: {probe.id}: {error}") from None
            if probe_epochs != epochs:
                # packed-K rounds derived budgets to whole blocks per model, which can change the epoch count
                raise UserError(
                    f"{where}: {base} in mode {mode} has a different number of epochs than its base recipe; "
                    "set training.max_tokens and training.epoch_tokens"
                )
            _check_resources(campaign, base, mode, recipe, where)
    check_search(campaign.search, {base: recipe_plan(recipe, campaign.slice_epochs(base)) for base, recipe in bases.items()},
                 brackets(campaign.runs()), where)


def campaign_warnings(campaign: Campaign) -> list[str]:
    """What a campaign file may mean to set but leaves empty: one line each, for the workflow to print
    before it plans (dry runs included). A scope that names `account: null` is written for SLURM,
    where many clusters refuse a job without an account, and a dry run cannot tell."""
    return [
        f"{campaign.source}: resources.{scope}.account is null, so its SLURM jobs go to your default account; "
        f"a cluster that requires an account refuses them at submission: set it (sbatch --account) or remove the key"
        for scope, fields in campaign.resources.items()
        if "account" in fields and fields["account"] is None
    ]


def _check_frozen(campaign: Campaign) -> None:
    """A started campaign may grow along its grid axes and seeds; its fixed settings must not change."""
    record_path = campaign.paths.freeze_record
    if not record_path.is_file():
        return
    try:
        frozen = json.loads(record_path.read_text(encoding="utf-8"))["settings"]
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{record_path}: damaged ({type(error).__name__}); it records how campaign {campaign.name} started") from None
    now = campaign.settings()
    # presets added after the start may bring their own overrides; those frozen must stay
    now["preset_overrides"] = {base: now["preset_overrides"].get(base, {}) for base in frozen["preset_overrides"]}
    changed = [key for key in frozen if frozen[key] != now[key]]
    if changed:
        details = "; ".join(f"{key}: frozen {frozen.get(key)!r}, now {now[key]!r}" for key in changed)
        raise UserError(
            f"campaign file {campaign.source}: campaign {campaign.name} started with other settings ({details}). "
            "A started campaign can only gain learning rates, beta2 values, modes, presets and seeds; "
            f"restore the settings, or give the changed campaign a new name (or remove {campaign.paths.frozen} "
            "and its runs to start over)"
        )


def _check_resources(campaign: Campaign, base: str, mode: str, recipe: Recipe, where: str) -> None:
    """Packed-K trains its K models on one device; a multi-GPU synchronous job needs a placement for every GPU."""
    resources = campaign.job_resources(base, mode)
    gpus = resources.job_gpus
    scope = mode if base == BASE else f"{base}-{mode}"
    if resources.nodes > 1 and resources.gpus_per_node is None:
        raise UserError(f"{where}: resources for {scope}: nodes {resources.nodes} needs gpus_per_node (the GPUs of each node)")
    parallel = recipe.parallel
    if resources.gpus_per_node is not None and parallel.pipeline_stages * parallel.data_parallel != gpus:
        raise UserError(
            f"{where}: resources for {scope}: nodes x gpus_per_node = {resources.nodes} x {resources.gpus_per_node} GPUs, "
            f"but the recipe places the model on parallel.pipeline_stages x parallel.data_parallel = "
            f"{parallel.pipeline_stages} x {parallel.data_parallel} devices; make them equal"
        )
    if packed_models(mode) is not None and gpus > 1:
        raise UserError(
            f"{where}: resources for {scope}: gpus {gpus}, but packed-K mode trains its K models on one device; set gpus to 0 or 1"
        )
    if gpus >= 1 and parallel.pipeline_stages * parallel.data_parallel != gpus:
        raise UserError(
            f"{where}: resources for {scope}: gpus {gpus}, but the recipe places the model on "
            f"parallel.pipeline_stages x parallel.data_parallel = {parallel.pipeline_stages} x {parallel.data_parallel} devices; "
            "make them equal (overrides: parallel.data_parallel or parallel.pipeline_stages)"
        )
    if gpus == 0 and recipe.runtime.device.startswith("cuda"):
        raise UserError(f"{where}: resources for {scope}: gpus 0, but runtime.device is {recipe.runtime.device}; give the job a GPU")


def _plain(value: Any) -> Any:
    """JSON-like copy (tuples to lists) so settings compare equal to what freeze.json holds."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value



def base_plans(campaign: Campaign) -> dict[str, SlicePlan]:
    """The slices of every run, per base recipe (the budget depends on the base, not the grid point):
    the plan file the campaign's frozen trainer wrote (frozen/plans/<base>.json, `ebd2n plan`)
    once it is there, else this checkout's plan, which the frozen trainer must confirm (`ebd2n plan
    --expect`) before any run of the base trains."""
    plans = {}
    for base, recipe in current_bases(campaign).items():
        plan = read_slice_plan(campaign.paths.slice_plan(base))
        if plan is None and campaign.paths.source_hash.is_file():
            _refuse_older_frozen_trainer(campaign.paths)
        plans[base] = plan or recipe_plan(recipe, campaign.slice_epochs(base))
    return plans


def campaign_search(campaign: Campaign) -> Halving:
    """The campaign's successive halving as its files stand (see ebd2n.campaign.search)."""
    return campaign_halving(campaign.paths, campaign.search, campaign.runs(), base_plans(campaign))


def spec_search(paths: CampaignPaths, spec: Mapping[str, Any]) -> Halving | None:
    """A recorded spec's successive halving, over the frozen slice plans; None for the full grid
    (what collect and the audit read: the campaign's sources, not its file)."""
    search = search_from_dict(spec.get("search"))
    if not search.halving:
        return None
    bases = spec["grid"]["presets"] or [BASE]
    plans = {base: read_slice_plan(paths.slice_plan(base)) for base in bases}
    missing = [base for base, plan in plans.items() if plan is None]
    if missing:
        raise UserError(f"{paths.slice_plan(missing[0])}: missing; the rungs of a successive-halving campaign are its slice ends")
    return campaign_halving(paths, search, spec_runs(spec), plans)


def frozen_trainer_plan(paths: CampaignPaths, base: str, epochs_per_slice: int) -> SlicePlan:
    """The slices of frozen base recipe `base`, as the campaign's frozen trainer plans them
    (`ebd2n plan --json` run from frozen/src): what the audit holds a plan file to."""
    _refuse_older_frozen_trainer(paths)
    command = [sys.executable, "-m", "ebd2n", "plan", str(paths.base_recipe(base)),
               "--epochs-per-slice", str(epochs_per_slice), "--json"]
    shown = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(paths.frozen_src)}, capture_output=True, text=True)
    if shown.returncode:
        raise UserError(f"{paths.frozen_src}: the frozen trainer could not plan base recipe {base}: {shown.stderr.strip()}")
    try:
        return parse_plan(json.loads(shown.stdout), f"the frozen trainer's plan of {base}")
    except json.JSONDecodeError:
        raise UserError(f"{paths.frozen_src}: the frozen trainer's plan of {base} is not JSON: {shown.stdout[:200]!r}") from None


def _refuse_older_frozen_trainer(paths: CampaignPaths) -> None:
    """A campaign frozen before its trainer could plan slices (`ebd2n plan`, train/plan.py): that
    copy also predates the launcher the jobs start through (`python -m ebd2n.launch train ...`), and
    run by this workflow it would plan nothing and train nothing."""
    if (paths.frozen_package / "train" / "plan.py").is_file() and (paths.frozen_package / "launch.py").is_file():
        return
    record = read_json(paths.freeze_record)
    when = f", frozen {record.get('created')}" if isinstance(record, dict) else ""
    raise UserError(
        f"{paths.frozen_src}: frozen by an older ebd2n (source {paths.source_hash.read_text().strip()}{when}), "
        "whose trainer cannot plan slices nor run under this workflow's launcher: finish the campaign with "
        f"the ebd2n checkout that froze it (its source hash is in {paths.freeze_record}), or start a new campaign"
    )


def record_spec(campaign: Campaign) -> dict[str, Any]:
    """Record the grid and seeds the campaign file declares and return the campaign's spec.

    Each change is its own file, frozen/spec/<n>.json, written once and never changed (the ledger
    protects it like every frozen file): the first collect writes 1.json, an extension the next.
    The spec is their union, axis by axis (a campaign only gains grid points). The audit expects
    exactly the runs of the spec, so a run directory of any other grid point (copied in from
    another campaign of the same name) is named, whatever campaign.json says."""
    paths = campaign.paths
    declared = {
        "campaign": campaign.name,
        "description": campaign.description,
        "grid": {
            "presets": list(campaign.presets) if campaign.presets else None,
            "modes": list(campaign.modes),
            "learning_rates": {mode: list(lrs) for mode, lrs in campaign.learning_rates.items()},
            "beta2": list(campaign.beta2),
        },
        "seeds": list(campaign.seeds),
        **({"search": campaign.search.record()} if campaign.search.halving else {}),  # a grid campaign's spec as before
    }
    versions = _spec_versions(paths)
    if versions:
        spec = read_spec(paths)
        if _merged(spec, declared) == spec:
            return spec
    atomic_write_text(paths.spec_version(len(versions) + 1), json.dumps(declared, indent=2) + "\n")
    return read_spec(paths)


def read_spec(paths: CampaignPaths) -> dict[str, Any]:
    """The campaign's spec: every frozen/spec/<n>.json merged in order (see record_spec); none, or
    a damaged one, is a user error naming it."""
    return spec_history(paths)[-1]


def spec_history(paths: CampaignPaths) -> list[dict[str, Any]]:
    """The campaign's spec as each recording left it, oldest first: what a successive-halving
    decision made under an earlier grid or share is held to."""
    versions = _spec_versions(paths)
    if not versions:
        raise UserError(f"{paths.frozen_spec}: missing; it records the campaign's grid: collect the campaign (ebd2n collect CAMPAIGN_FILE)")
    history: list[dict[str, Any]] = []
    for path in versions:
        version = read_json(path)
        try:
            spec_runs(version)
            search_from_dict(version.get("search"))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise UserError(f"{path}: not a campaign spec ({type(error).__name__}: {error})") from None
        history.append(version if not history else _merged(history[-1], version))
    return history


def spec_runs(spec: Mapping[str, Any]) -> list[Run]:
    """Every run of a recorded spec, in grid order."""
    grid = spec["grid"]
    if not (isinstance(spec["seeds"], list) and all(isinstance(seed, int) for seed in spec["seeds"])):
        raise TypeError("seeds are not a list of integers")
    return grid_runs(grid["presets"], grid["modes"], grid["learning_rates"], grid["beta2"], spec["seeds"])


def _spec_versions(paths: CampaignPaths) -> list[Path]:
    """frozen/spec/<n>.json in order; any other file there is a user error naming it."""
    files = sorted(paths.frozen_spec.iterdir()) if paths.frozen_spec.is_dir() else []
    stray = [path for path in files if not (path.suffix == ".json" and path.stem.isdigit())]
    if stray:
        raise UserError(f"{stray[0]}: not a recording of the campaign's grid (frozen/spec/<n>.json)")
    return sorted(files, key=lambda path: int(path.stem))


def _merged(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
    """Two recordings as one spec: every axis the union (earlier values first), the later name and description."""
    before, now = earlier["grid"], later["grid"]
    rates = {key: _union(before["learning_rates"].get(key, []), now["learning_rates"].get(key, []))
             for key in _union(list(before["learning_rates"]), list(now["learning_rates"]))}
    return {
        "campaign": later["campaign"],
        "description": later["description"],
        "grid": {
            "presets": _union(before["presets"] or [], now["presets"] or []) or None,
            "modes": _union(before["modes"], now["modes"]),
            "learning_rates": rates,
            "beta2": _union(before["beta2"], now["beta2"]),
        },
        "seeds": _union(earlier["seeds"], later["seeds"]),
        **({"search": later["search"]} if later.get("search") else {}),
    }


def _union(earlier: list, now: list) -> list:
    return [*earlier, *(value for value in now if value not in earlier)]


def describe_campaign(campaign: Campaign) -> str:
    """A few lines saying what the campaign will train."""
    runs = campaign.runs()
    lines = [f"campaign {campaign.name}: {len(runs)} runs -> {campaign.directory}"]
    for base, plan in base_plans(campaign).items():
        epochs, slices = plan.epochs, len(plan.ends)
        for mode in campaign.modes:
            count = sum(1 for run in runs if run.base == base and run.mode == mode)
            resources = campaign.job_resources(base, mode)
            scope = mode if base == BASE else f"{base}-{mode}"
            lines.append(
                f"  {scope}: {count} runs x {slices} slice(s) of <= {campaign.slice_epochs(base)} of {epochs} epochs; "
                f"per job {_gpus_of(resources)}, {resources.minutes} min, {resources.mem_mb} MB, {resources.cpus} CPU(s)"
            )
        if campaign.search.halving:
            lines.append(f"  successive halving: at epochs {list(campaign.search.rung_epochs(plan))} each preset x mode keeps "
                         f"{campaign.search.keep:g} of its points (at least one); the others stop at that rung")
    return "\n".join(lines)


def _gpus_of(resources: Resources) -> str:
    """'4 GPU(s)', or '2 node(s) x 4 GPU(s)' for a job laid out over nodes."""
    if resources.gpus_per_node is None:
        return f"{resources.gpus} GPU(s)"
    return f"{resources.nodes} node(s) x {resources.gpus_per_node} GPU(s)"


def prepare_campaign_cache(campaign: Campaign, progress: bool = False) -> str:
    """Build (or reuse) the campaign's data cache, defined by its base recipe's data section."""
    from ebd2n.data import prepare_cache

    recipe = next(iter(current_bases(campaign).values()))
    cache = prepare_cache(recipe.data, recipe.model.vocab_size, progress=progress, context_length=recipe.model.context_length)
    return "\n".join([f"cache {cache.directory}  identity {cache.identity}", *cache.record_counts()])
