"""The one reader of a campaign on disk: its runs table, the grid, the cache manifest, the audit.

The collect step (`results/<campaign>/runs.csv`), the report and the audit all read a campaign
through `read_results`, so they see one runs table with one set of columns. A report is a pure
function of what the workflow left in `results/<campaign>`, so `ebd2n report` can redo it at any
time without training. Recipes and metrics are read only for the runs a report
shows in detail (winners, one run per mode, scaling points), which keeps large campaigns fast.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ebd2n.campaign.analysis import RUN_FIELDS
from ebd2n.campaign.grid import Grid, grid_from_dict
from ebd2n.campaign.job_logs import JobLogs, classify_run
from ebd2n.campaign.runs import packed_models, parse_run_id
from ebd2n.config import Recipe, load_recipe
from ebd2n.data.cache import MANIFEST
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import RESULTS_JSON, CampaignPaths, run_paths
from ebd2n.outcomes import STOPPED, Outcome
from ebd2n.train.pack_record import read_packs
from ebd2n.train.records import DIVERGENCE, Divergence, RunRecord, metrics

RUN_COLUMNS: dict[str, type[pl.DataType]] = {
    **RUN_FIELDS,
    "preset": pl.String,
    "perplexity": pl.Float64,
    "accuracy": pl.Float64,
    "targets": pl.Int64,
    "tokens": pl.Int64,
    "horizon_tpp": pl.Float64,
    "tokens_per_parameter": pl.Float64,
    "directory": pl.String,
    "recipe_identity": pl.String,
    "cache_identity": pl.String,
    "source_hash": pl.String,
    "job_ids": pl.String,
    "diverged_step": pl.Int64,
    "packed": pl.Int64,
}
"""Columns of the runs table (runs.csv); `directory` is relative to the campaign, `job_ids`
space-separated, `preset` empty outside scaling campaigns, `horizon_tpp` the run's `grid.horizons` value
(tokens per parameter; empty without horizons), `tokens_per_parameter` the tokens it trained over
its model's parameters (run.json's count), `diverged_step` the step a diverged
run stopped at, `packed` the most runs it trained a slice with in one pack (`execution.pack`;
empty: it trained alone). `status`: the run's outcome (ebd2n.outcomes.Outcome, `run_outcome`)."""


@dataclass(frozen=True)
class CampaignResults:
    """Everything the report and the audit read of a campaign, with the grid resolved."""

    directory: Path
    name: str
    repo_root: Path
    """Where training ran: the campaign sits at `<repo_root>/results/<name>`."""
    info: dict[str, Any] | None
    """campaign.json, or None for a tree built by hand."""
    runs: pl.DataFrame
    """One row per run directory (`RUN_COLUMNS`, each further axis's column after beta2), in mode,
    LR, axes, seed order."""
    results: dict[str, dict[str, Any]]
    """results.json of every complete run, keyed by `directory`."""
    modes: list[str]
    learning_rates: dict[str, list[float]]
    beta2: list[float]
    axes: list[str]
    """The grid's axes besides mode and learning rate, as runs-table columns: beta2, then the further
    axes (`grid.axes`) in the campaign file's order; selection breaks ties in this order."""
    axis_values: dict[str, list[Any]]
    """Each of `axes` with its values, lowest first: declared (campaign.json's grid) or run; a run
    of an earlier recording without a further axis adds None, last."""
    seeds: list[int]
    presets: dict[str, str]
    """The cell of each run (by `directory`): its model size in a scaling campaign, its horizon in one
    with horizons; empty otherwise."""
    manifest: dict[str, Any] | None
    manifest_path: Path
    audit: dict[str, Any] | None
    measured_date: str | None
    """Date of the last full validation (as recorded in results.json, never a file time)."""
    unresolved: dict[str, Outcome]
    """Runs of the campaign's grid without a resolved recipe (so not in `runs`), by outcome: missing
    (no job of theirs ran yet), incomplete (one starts or runs) or failed (one provably ended
    without its output; its log in `failures`)."""
    failures: dict[str, list[str]]
    """The last lines of the newest job log of each failed run, keyed by `directory`."""

    @property
    def further_axes(self) -> list[str]:
        """The axes of the campaign file's `grid.axes`: `axes` after beta2."""
        return self.axes[1:]

    @property
    def points(self) -> list[tuple]:
        """Every value of `axes` together, in order (`axis_values`): the columns of the LR heatmaps
        and response tables."""
        return list(itertools.product(*self.axis_values.values()))

    @property
    def missing(self) -> list[str]:
        """Runs of the grid no job of which has run yet."""
        return [run for run, outcome in self.unresolved.items() if outcome == Outcome.MISSING]

    def recipe(self, directory: str) -> Recipe:
        """The resolved recipe of one run."""
        return _recipe(run_paths(self.directory / directory).recipe)

    def epochs(self, directory: str) -> list[dict[str, Any]]:
        """The per-epoch records of one run's metrics.jsonl, in epoch order."""
        return _epoch_records(run_paths(self.directory / directory).metrics)


def read_results(directory: Path, info: dict[str, Any] | None = None) -> CampaignResults:
    """Read `results/<campaign>`; a directory without runs is a user error naming what to do.
    `info` stands in for campaign.json (the audit passes the record the campaign's sources make)."""
    paths = CampaignPaths(Path(directory))
    directory = paths.directory
    if not directory.is_dir():
        raise UserError(f"{directory}: no such campaign directory; pass results/<campaign>")
    run_dirs = run_directories(paths)
    if not run_dirs:
        raise UserError(f"{paths.runs}: no finished or resolved run; run the campaign first")
    info = read_json(paths.campaign_json) if info is None else info
    if info is not None and not (
        isinstance(info, dict)
        and isinstance(info.get("grid") or {}, dict)
        and isinstance(info.get("seeds") or [], list)
    ):
        raise UserError(
            f"{paths.campaign_json}: not a campaign record (grid or seeds of the wrong shape); collect it again"
        )
    records = {p.relative_to(directory).as_posix(): RunRecord(p) for p in run_dirs}
    results = {key: read_json(record.paths.results) for key, record in records.items()}
    stopped = ((info or {}).get("search") or {}).get(STOPPED) or {}  # successive halving: run id -> its rung
    retired = set((info or {}).get(Outcome.RETIRED) or [])  # runs the campaign file no longer declares
    failures, logs = {}, JobLogs(paths)
    rows = []
    for key, record in records.items():
        outcome, job = classify_run(record, logs, stopped=record.id in stopped, retired=record.id in retired)
        if outcome == Outcome.FAILED and job is not None:
            failures[key] = [f"{paths.relative(job.log)}:", *job.lines]
        rows.append(_row(directory, record, results[key], outcome))
    unresolved = {}  # grid runs without a resolved recipe: missing, or a job of them starts, runs or failed
    grid = _recorded_grid(info)
    for run_id in _missing(grid, {p.name for p in run_dirs}):
        record = RunRecord(paths.run(run_id).directory)
        outcome, job = classify_run(record, logs)
        unresolved[run_id] = Outcome.MISSING if job is None else outcome
        if outcome == Outcome.FAILED and job is not None:
            failures[record.directory.relative_to(directory).as_posix()] = [f"{paths.relative(job.log)}:", *job.lines]
    complete = {key: value for key, value in results.items() if value is not None}
    further = [axis.name for axis in grid.axes] if grid else []
    if grid and grid.axes:
        rows = [{**row, **_axis_columns(grid, row["run"])} for row in rows]
    try:  # typed first: everything below may trust the values
        table = pl.DataFrame(rows, schema=_columns(grid))
    except (pl.exceptions.PolarsError, TypeError, ValueError) as error:
        first = str(error).strip().splitlines()[0]
        raise UserError(f"{paths.runs}: a {RESULTS_JSON} holds a value of the wrong type ({first})") from None
    modes, learning_rates, beta2 = _grid(info, [row for row in table.to_dicts() if row["status"] != Outcome.RETIRED])
    order = {mode: index for index, mode in enumerate(modes)}
    mode_order = pl.col("mode").replace_strict(order, return_dtype=pl.Int64)
    runs = table.sort([mode_order, "lr", "beta2", *further, "seed", "run"], nulls_last=bool(further))
    seeds = sorted(info["seeds"]) if info and info.get("seeds") else sorted(set(runs["seed"].to_list()))
    repo_root = paths.repository
    manifest_path = _manifest_path(directory, runs["directory"][0], repo_root)
    return CampaignResults(
        directory=directory,
        name=str((info or {}).get("name") or (info or {}).get("campaign") or directory.name),
        repo_root=repo_root,
        info=info,
        runs=runs,
        results=complete,
        modes=modes,
        learning_rates=learning_rates,
        beta2=beta2,
        axes=["beta2", *further],
        axis_values={"beta2": beta2, **_further_values(grid, runs)},
        seeds=seeds,
        presets=_presets(info, [p.name for p in run_dirs]),
        manifest=read_json(manifest_path),
        manifest_path=manifest_path,
        audit=read_json(paths.audit_runs),
        measured_date=max((str(r["validated"])[:10] for r in complete.values() if r.get("validated")), default=None),
        unresolved=unresolved,
        failures=failures,
    )


def run_directories(paths: CampaignPaths) -> list[Path]:
    """The campaign's run directories with a full validation or at least a resolved recipe."""
    return sorted(p for p in paths.runs.glob("*") if run_paths(p).results.is_file() or run_paths(p).recipe.is_file())


def _mode_key(mode: str) -> tuple[int, int, str]:
    """synchronous first, then packed-K by K, then anything else by name."""
    if mode == "synchronous":
        return (0, 0, mode)
    match = re.fullmatch(r"packed-(\d+)", mode)
    return (1, int(match[1]), mode) if match else (2, 0, mode)


def _row(campaign: Path, record: RunRecord, results: dict[str, Any] | None, outcome: Outcome) -> dict[str, Any]:
    """runs.csv row, its status the run's `outcome`; a run without results.json is listed from its
    recipe (and its divergence decision, when it diverged)."""
    run_dir = record.directory
    directory = run_dir.relative_to(campaign).as_posix()
    preset = _preset(run_dir.name) or ""
    if results is None:
        recipe = _recipe(record.paths.recipe)
        divergence = record.divergence if outcome == Outcome.DIVERGED else None
        return {
            "run": run_dir.name,
            "mode": recipe.mode,
            "lr": recipe.optimizer.lr,
            "beta2": recipe.optimizer.beta2,
            "seed": recipe.runtime.seed,
            "status": outcome.value,
            "preset": preset,
            "directory": directory,
            "job_ids": "",
            "horizon_tpp": _horizon(run_dir.name),
            "diverged_step": None if divergence is None else divergence.step,
            "packed": _packed(record),
        }
    missing = [key for key in ("mode", "lr", "beta2", "seed", "status") if key not in results]
    if missing:
        raise UserError(f"{record.paths.results}: missing {', '.join(missing)}; re-run `ebd2n validate {run_dir}`")
    own = ("preset", "horizon_tpp", "tokens_per_parameter", "directory", "job_ids", "packed")
    row = {key: results.get(key) for key in RUN_COLUMNS if key not in own}
    row["run"] = str(results.get("run") or run_dir.name)
    row["status"] = outcome.value
    row["preset"] = preset
    row["directory"] = directory
    row["job_ids"] = " ".join(str(job) for job in results.get("job_ids") or [])
    row["horizon_tpp"] = _horizon(run_dir.name)
    models = packed_models(row["mode"]) or 1
    row["tokens_per_parameter"] = _tokens_per_parameter(results.get("tokens"), record.run_json, models)
    divergence = Divergence.of(results.get(DIVERGENCE))
    row["diverged_step"] = None if divergence is None else divergence.step
    row["packed"] = _packed(record)
    return row


def _horizon(run_id: str) -> float | None:
    """The tokens per parameter of a run id's horizon (`-tpp80.0-`); None without one."""
    try:
        return parse_run_id(run_id).horizon
    except UserError:
        return None


def _tokens_per_parameter(tokens: Any, run: dict[str, Any] | None, models: int) -> float | None:
    """Tokens trained over one model's parameters (run.json counts all `models` of a packed run, the
    budget one's); None where either is not recorded."""
    parameters = (run or {}).get("parameters")
    valid = isinstance(tokens, int) and isinstance(parameters, int) and parameters > 0
    return tokens * models / parameters if valid else None


def _packed(record: RunRecord) -> int | None:
    """The most runs a run trained a slice with in one pack (ebd2n.train.pack_record); None: alone."""
    return max(map(len, read_packs(record.directory).values()), default=None)


def _missing(grid: Grid | None, present: set[str]) -> list[str]:
    """Runs of the recorded grid without a directory; [] for a tree without a recorded grid."""
    return [run.id for run in grid.runs() if run.id not in present] if grid else []


def _recorded_grid(info: dict[str, Any] | None) -> Grid | None:
    """campaign.json's grid; None for a tree without one (or with one of another shape)."""
    if not info or "grid" not in info or "seeds" not in info:
        return None
    try:
        return grid_from_dict(info["grid"], info["seeds"], None)
    except (AttributeError, KeyError, TypeError, ValueError, UserError):
        return None


def _further_values(grid: Grid | None, runs: pl.DataFrame) -> dict[str, list[Any]]:
    """Each further axis's declared and run values, lowest first, None last where a run has none."""
    values = {}
    for axis in grid.axes if grid else ():
        column = runs[axis.name]
        declared = {axis.column(label) for label in axis.values}
        values[axis.name] = sorted(declared | set(column.drop_nulls().to_list())) + ([None] * column.has_nulls())
    return values


_DTYPES = {int: pl.Int64, float: pl.Float64, bool: pl.Boolean, str: pl.String}


def _columns(grid: Grid | None) -> dict[str, type[pl.DataType]]:
    """The runs table's columns: `RUN_COLUMNS`, with each further axis's after beta2."""
    if not grid or not grid.axes:
        return RUN_COLUMNS
    columns = list(RUN_COLUMNS.items())
    at = [name for name, _ in columns].index("beta2") + 1
    axes = [(axis.name, _DTYPES[axis.dtype]) for axis in grid.axes]
    return dict(columns[:at] + axes + columns[at:])


def _axis_columns(grid: Grid, run_id: str) -> dict[str, Any]:
    """Each further axis's value at a run (`Grid.columns`); empty for an id of no grid run."""
    try:
        return grid.columns(parse_run_id(run_id))
    except UserError:
        return {}


def _grid(
    info: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[str], dict[str, list[float]], list[float]]:
    """The searched grid: campaign.json's when present, widened by whatever the runs hold."""
    grid = (info or {}).get("grid") or {}
    modes = list(grid.get("modes") or [])
    modes += sorted({row["mode"] for row in rows} - set(modes), key=_mode_key)
    declared = grid.get("learning_rates") or {}
    learning_rates = {
        mode: sorted(set(declared.get(mode, [])) | {row["lr"] for row in rows if row["mode"] == mode}) for mode in modes
    }
    beta2 = sorted(set(grid.get("beta2") or []) | {row["beta2"] for row in rows})
    return modes, learning_rates, beta2


def _presets(info: dict[str, Any] | None, run_ids: list[str]) -> dict[str, str]:
    """The cell of each run of a scaling or horizons campaign, its model size and horizon (grid.presets
    or grid.horizons declared, or run ids carry them)."""
    grid = (info or {}).get("grid") or {}
    declared = bool(grid.get("presets") or grid.get("horizons"))
    sizes = {f"runs/{run_id}": cell for run_id in run_ids if (cell := _cell(run_id))}
    return sizes if sizes and (declared or len(sizes) == len(run_ids)) else {}


def _cell(run_id: str) -> str | None:
    """`20m`, `20m · 80 tokens/param` or `80 tokens/param` of a canonical run id; None for other ids."""
    try:
        run = parse_run_id(run_id)
    except UserError:
        return None
    horizon = f"{run.horizon:g} tokens/param" if run.horizon is not None else None
    return " · ".join(part for part in (run.preset, horizon) if part) or None


def _preset(run_id: str) -> str | None:
    """The preset prefix of a canonical run id (`254m-synchronous-lr...`); None for other ids."""
    try:
        return parse_run_id(run_id).preset
    except UserError:
        return None


def _manifest_path(campaign: Path, directory: str, repo_root: Path) -> Path:
    """The cache manifest named by the first run's recipe; a relative cache_dir is relative to the repository."""
    cache_dir = Path(_recipe(run_paths(campaign / directory).recipe).data.cache_dir)
    return (cache_dir if cache_dir.is_absolute() else repo_root / cache_dir) / MANIFEST


def _recipe(path: Path) -> Recipe:
    if not path.is_file():
        raise UserError(f"{path}: missing; every run directory keeps its resolved recipe")
    return load_recipe(path)


def _epoch_records(path: Path) -> list[dict[str, Any]]:
    return metrics(path).epochs
