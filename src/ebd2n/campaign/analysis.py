"""Selection over a finished (or partly finished) campaign: group runs, rank, pick, explain.

The rules follow the published 20M recipe sweep (`shared/reference/recipe_sweep_20m`), which this
module reproduces exactly: per mode, the winner is the grid point with the lowest mean final
full-validation loss over seeds; only points with every seed are eligible; exact ties go to the
lower LR, then the lower value of each further axis in the grid's order (beta2 first, then
`grid.axes` as the campaign file lists them); uncertainty is the sample SD (ddof = 1).

A grid point is its mode, LR and `axes` (runs-table columns: beta2 alone unless the grid has
further axes); the grouped table keeps them between `lr` and `seeds_completed`, where every
reader of it finds them (`point_axes`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import polars as pl

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.welch import welch
from ebd2n.errors import UserError
from ebd2n.layout import GROUPS_CSV, SELECTION_JSON
from ebd2n.outcomes import DIVERGED, POINT_PRECEDENCE, STOPPED, Outcome, PointOutcome
from ebd2n.quantities import loss_decimals

RUN_FIELDS: dict[str, type[pl.DataType]] = {
    "run": pl.String,
    "mode": pl.String,
    "lr": pl.Float64,
    "beta2": pl.Float64,
    "seed": pl.Int64,
    "status": pl.String,
    "loss": pl.Float64,
}
"""The per-run fields every runs table has (the reference's per-run records)."""
AXES = ("beta2",)
"""A grid point's axes besides mode and LR in a campaign without further axes (and the reference's)."""
_FACT_COLUMNS = ["seeds_completed", "eligible", "mean_loss", "std_loss", "rank", "outcome", "diverged_step", DIVERGED]
_SELECTION_KEYS = ["mean_loss", "std_loss", "seeds_completed"]
_ALPHA = 0.05  # Welch t-test level below which a margin is called more than seed noise
_NOT_ESTABLISHED = "the ranking alone does not establish a reliable improvement"
RESPONSE_FIELDS = {
    "mean_loss": pl.Float64,
    "std_loss": pl.Float64,
    "seeds_completed": pl.Int64,
    "diverged_step": pl.Int64,
}
"""The LR-response table's columns per mode (`<mode> <field>`), from the grouped table."""

Edge = Literal["lower", "upper"]


def load_runs(path: Path) -> pl.DataFrame:
    """Read the per-run table (CSV, JSON list, or JSON object with `runs`) and check its columns."""
    path = Path(path)
    table = _runs_table(path) if path.suffix.lower() == ".json" else _read_csv(path)
    missing = [name for name in RUN_FIELDS if name not in table.columns]
    if missing:
        names = ", ".join(repr(name) for name in missing)
        raise UserError(f"{path}: missing column {names}; a runs table needs {', '.join(RUN_FIELDS)}")
    if table.height == 0:
        raise UserError(f"{path}: holds no runs (a header and no rows)")
    return table.with_columns(_cast(table, path, name, dtype) for name, dtype in RUN_FIELDS.items())


def failed_runs(runs: pl.DataFrame) -> dict[str, str]:
    """Run -> why it does not count: failed, diverged, or marked complete without a finite loss (never
    dropped silently)."""
    finite = pl.col("loss").is_not_null() & pl.col("loss").is_finite()
    complete = pl.col("status") == Outcome.COMPLETE
    failed = runs.filter(pl.col("status").is_in([Outcome.FAILED, Outcome.DIVERGED]) | (complete & ~finite))
    return {
        row["run"]: row["status"] if row["status"] != Outcome.COMPLETE else f"complete with loss {row['loss']}"
        for row in failed.iter_rows(named=True)
    }


def group_runs(runs: pl.DataFrame, seeds: list[int] | None = None, axes: Sequence[str] = AXES) -> pl.DataFrame:
    """One row per grid point: seeds done, eligibility, mean and sample SD of loss, rank in mode,
    outcome (converged, diverged, stopped by successive halving, incomplete) and the first step any
    seed diverged at.

    Only complete runs with a finite loss count; retired runs and, given `seeds`, runs of other seeds
    (a confirmation's) are left out. A point is eligible when it has every expected seed (`seeds`, or
    else every seed the table mentions) and no seed diverged. Rank orders eligible points first, by
    mean loss, then lower LR, then each of `axes`; incomplete points follow, then diverged ones.
    """
    point = ["mode", "lr", *axes]
    runs = runs.filter(pl.col("status") != Outcome.RETIRED)
    if seeds is not None:  # a confirmation's fresh seeds are no part of what selects
        runs = runs.filter(pl.col("seed").is_in(list(seeds)))
    expected = sorted(set(seeds) if seeds is not None else set(runs["seed"].to_list()))
    done = completed_runs(runs, seeds, axes)
    summary = done.group_by(point).agg(
        seeds_completed=pl.col("seed").n_unique().cast(pl.Int64),
        mean_loss=pl.col("loss").mean(),
        std_loss=pl.col("loss").std(ddof=1),
    )
    step = pl.col("diverged_step") if "diverged_step" in runs.columns else pl.lit(None)
    diverged = (
        runs.filter(pl.col("status") == Outcome.DIVERGED)
        .group_by(point)
        .agg(diverged_step=step.cast(pl.Int64).min(), **{DIVERGED: pl.lit(True)})
    )
    stopped = (
        runs.filter(pl.col("status") == Outcome.STOPPED).select(point).unique().with_columns(**{STOPPED: pl.lit(True)})
    )
    modes = pl.Enum(runs["mode"].unique(maintain_order=True).to_list())
    groups = (
        runs.select(point)
        .unique()
        .join(summary, on=point, how="left", nulls_equal=True)
        .join(diverged, on=point, how="left", nulls_equal=True)
        .join(stopped, on=point, how="left", nulls_equal=True)
        .with_columns(pl.col("seeds_completed").fill_null(0), pl.col(DIVERGED, STOPPED).fill_null(False))
        .with_columns(
            eligible=(pl.col("seeds_completed") == len(expected)) & (len(expected) > 0) & ~pl.col(DIVERGED),
            mode=pl.col("mode").cast(modes),
        )
        .with_columns(outcome=_point_outcomes())
        .sort(
            ["mode", "eligible", DIVERGED, "mean_loss", "lr", *axes],
            descending=[False, True, False, False, False, *(False for _ in axes)],
            nulls_last=True,
        )
        .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("mode"))
        .sort(point, nulls_last=True)
        .with_columns(pl.col("mode").cast(pl.String))
        .select(*point, *_FACT_COLUMNS)
    )
    diverged_columns = [DIVERGED] if groups[DIVERGED].any() else [DIVERGED, "diverged_step"]
    return groups.drop(diverged_columns)  # diverged_step only where a point diverged: a CSV column of numbers


def table_axes(runs: pl.DataFrame) -> list[str]:
    """A runs table's axes besides mode and LR: its columns between `lr` and `seed`, as runs.csv
    writes them (beta2, then each further axis); beta2 alone in a table ordered otherwise."""
    columns = runs.columns
    between = columns[columns.index("lr") + 1 : columns.index("seed")]
    return between if "beta2" in between else list(AXES)


def point_axes(groups: pl.DataFrame) -> list[str]:
    """A grouped table's axes besides mode and LR: its columns between `lr` and `seeds_completed`."""
    columns = groups.columns
    return columns[columns.index("lr") + 1 : columns.index("seeds_completed")]


def point_name(point: dict[str, Any], axes: Sequence[str]) -> str:
    """`LR 0.004 (beta2 0.95)`, `LR 0.004 (beta2 0.95, beta1 0.9)`: a point of one mode, as sentences say it."""
    values = ", ".join(f"{axis} {value_text(point[axis])}" for axis in axes)
    return f"LR {point['lr']:g} ({values})" if values else f"LR {point['lr']:g}"


def point_key(row: dict[str, Any], axes: Sequence[str]) -> tuple:
    """A point's values on `axes` (a heatmap column, a response table)."""
    return tuple(row[axis] for axis in axes)


def values_label(values: Sequence[Any]) -> str:
    """`0.95`, `0.95 · 0.9 · 1024 · wsd`: a point's values on the axes besides mode and LR, as a column head."""
    return " · ".join(value_text(value) for value in values)


def column_labels(columns: Sequence[tuple], axes: Sequence[str], joiner: str) -> tuple[str, list[str]]:
    """A figure axis over points of several axes: its title and one label per point, naming only the
    axes whose value varies (each on its own line: `joiner`); a single axis is named as it is."""
    varying = [i for i in range(len(axes)) if len({column[i] for column in columns}) > 1] if len(axes) > 1 else [0]
    varying = varying or list(range(len(axes)))
    title = " · ".join(axes[i] for i in varying)
    return title, [joiner.join(value_text(column[i]) for i in varying) for column in columns]


def value_text(value: Any) -> str:
    """An axis value as sentences and keys write it: floats as %g, anything else as text (none: a run
    of an earlier recording without the axis)."""
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _point_outcomes() -> pl.Expr:
    """groups.csv's `outcome` column: ebd2n.outcomes.POINT_PRECEDENCE over the point's fact columns."""
    expression = pl.lit(PointOutcome.INCOMPLETE.value)
    for fact, outcome in reversed(POINT_PRECEDENCE):
        expression = pl.when(fact).then(pl.lit(outcome.value)).otherwise(expression)
    return expression


def outcome_text(point: dict[str, Any]) -> str:
    """How a grid point ended, in the words every table and sentence uses: "diverged at step k"."""
    if point.get("outcome") != PointOutcome.DIVERGED:
        return str(point.get("outcome") or "")
    step = point.get("diverged_step")
    return f"diverged at step {step}" if step is not None else PointOutcome.DIVERGED.value


def select(groups: pl.DataFrame) -> dict[str, dict]:
    """Per mode, the best eligible point; a mode with no eligible point has no entry."""
    return {
        mode: {
            key: value for key, value in ranked.row(0, named=True).items() if key not in ("outcome", "diverged_step")
        }  # a winner converged: its selection entry as before
        for mode in _modes(groups)
        if not (ranked := _ranked_eligible(groups, mode)).is_empty()
    }


def lr_response(groups: pl.DataFrame, at: dict[str, Any] | float) -> pl.DataFrame:
    """LR x mode table at one value of each other axis (`at`: axis -> value; a bare number is a
    beta2), numbers only: per mode `<mode> mean_loss`, `<mode> std_loss`, `<mode> seeds_completed`
    and, where a point diverged, `<mode> diverged_step` (the first step a seed diverged at) columns;
    all empty where a mode skipped an LR."""
    at = at if isinstance(at, dict) else {"beta2": at}
    for axis, value in at.items():
        if groups.filter(pl.col(axis).eq_missing(value)).is_empty():
            tested = ", ".join(value_text(v) for v in sorted(groups[axis].unique().to_list()))
            raise UserError(f"{axis} {value_text(value)} is not in the grid; choose one of: {tested}")
    at = groups.filter(*(pl.col(axis).eq_missing(value) for axis, value in at.items()))
    cells = {(row["mode"], row["lr"]): row for row in at.iter_rows(named=True)}
    lrs = sorted(at["lr"].unique().to_list())
    columns: dict[str, pl.Series] = {"lr": pl.Series(lrs, dtype=pl.Float64)}
    fields = {field: dtype for field, dtype in RESPONSE_FIELDS.items() if field in at.columns}
    for mode in _modes(groups):
        for field, dtype in fields.items():
            values = [cells[(mode, lr)][field] if (mode, lr) in cells else None for lr in lrs]
            columns[f"{mode} {field}"] = pl.Series(values, dtype=dtype)
    return pl.DataFrame(columns)


def lr_responses(groups: pl.DataFrame) -> pl.DataFrame:
    """`lr_response` at every value of the other axes, in long form: each row names its point's axes
    (beta2, the further axes) before its LR, so the file says every value it holds."""
    axes = point_axes(groups)
    points = groups.select(axes).unique().sort(axes, nulls_last=True).rows()
    tables = []
    for point in points:
        at = dict(zip(axes, point, strict=True))
        table = lr_response(groups, at)
        named = [pl.lit(value, dtype=groups.schema[axis]).alias(axis) for axis, value in at.items()]
        tables.append(table.select(*named, pl.all()))
    return pl.concat(tables, how="vertical")


def winner_notes(groups: pl.DataFrame, runs: pl.DataFrame, seeds: list[int] | None = None) -> dict[str, dict]:
    """Per mode with a winner: is it on the LR edge, does a diverged LR bound it from above, which
    points are still unfinished, and does it beat the runner-up beyond noise?

    Pass the same `seeds` given to `group_runs`, so the t-test sees the losses the means used.
    """
    done = completed_runs(runs, seeds, point_axes(groups))
    notes = {}
    for mode in _modes(groups):
        ranked = _ranked_eligible(groups, mode)
        if ranked.is_empty():
            continue
        notes[mode] = _notes(ranked, groups.filter(pl.col("mode") == mode), done)
    return notes


def diverged_above(winner: dict[str, Any], points: pl.DataFrame) -> dict[str, Any] | None:
    """The point at the next tested LR above the winner (at its other axes' values) when that point
    diverged: the evidence that bounds the optimum from above. None when the next LR converged or
    there is none."""
    axes = point_axes(points)
    same = [pl.col(axis).eq_missing(winner[axis]) for axis in axes]
    above = points.filter(*same, pl.col("lr") > winner["lr"]).sort("lr")
    if above.is_empty() or above["outcome"][0] != PointOutcome.DIVERGED:
        return None
    return {key: above.row(0, named=True)[key] for key in ("lr", *axes, "diverged_step")}


def write_selection(
    groups: pl.DataFrame, selection: dict[str, dict], out_dir: Path, optima: dict, confirmed: dict | None = None
) -> None:
    """Write `groups.csv` and `selection.json` atomically, so a reader never sees half a file;
    each mode's entry also holds its edge and fitted LR optimum (`optimum.lr_optima`) and, where
    the campaign confirms, its verdict (`confirmed`, by mode: ebd2n.campaign.verdict)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(
            f"--out {out_dir}: a file, not a directory; give a directory for {GROUPS_CSV} and {SELECTION_JSON}"
        )
    atomic_write_text(out_dir / GROUPS_CSV, groups.write_csv())
    keys = ["lr", *point_axes(groups), *_SELECTION_KEYS]
    chosen = {mode: {**{key: entry[key] for key in keys}, **optima[mode]} for mode, entry in selection.items()}
    for mode, verdict in (confirmed or {}).items():
        chosen[mode]["confirmation"] = verdict
    atomic_write_text(out_dir / SELECTION_JSON, json.dumps(chosen, indent=2) + "\n")


def _runs_table(path: Path) -> pl.DataFrame:
    """Accept a list of run records or a results file whose `runs` holds them."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: cannot read runs JSON ({error})") from error
    records = payload.get("runs") if isinstance(payload, dict) else payload
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path}: expected a list of run records or an object with a 'runs' list")
    if not records:
        raise UserError(f"{path}: holds no runs")
    try:
        return pl.from_dicts(records, infer_schema_length=None)
    except (pl.exceptions.PolarsError, TypeError, ValueError) as error:
        raise UserError(f"{path}: run records do not form a table ({error})") from error


def _read_csv(path: Path) -> pl.DataFrame:
    """Read a per-run CSV, turning any I/O or parse failure into a one-line user error."""
    try:
        return pl.read_csv(path)
    except (OSError, pl.exceptions.PolarsError) as error:
        raise UserError(f"{path}: cannot read runs CSV ({error})") from error


def _cast(table: pl.DataFrame, path: Path, name: str, dtype: type[pl.DataType]) -> pl.Series:
    """Give a required column its type; only `loss` may be empty (a failed run has none)."""
    try:
        column = table[name].cast(dtype)
    except pl.exceptions.PolarsError as error:
        raise UserError(f"{path}: column '{name}' is not {dtype.__name__} ({error})") from error
    if name != "loss" and column.null_count():
        raise UserError(f"{path}: column '{name}' has {column.null_count()} empty value(s)")
    return column


def completed_runs(runs: pl.DataFrame, seeds: list[int] | None, axes: Sequence[str] = AXES) -> pl.DataFrame:
    """Runs that count: complete, finite loss, an expected seed, at most one per point and seed."""
    done = runs.filter((pl.col("status") == Outcome.COMPLETE) & pl.col("loss").is_finite())
    if seeds is not None:
        done = done.filter(pl.col("seed").is_in(list(seeds)))
    twice = done.filter(pl.struct(["mode", "lr", *axes, "seed"]).is_duplicated())
    if not twice.is_empty():
        raise UserError(
            f"{twice.height} complete runs share a grid point and seed (first: "
            f"{twice['run'][0]}); keep one result per seed before selecting"
        )
    return done


def _modes(groups: pl.DataFrame) -> list[str]:
    """Modes in table order, which is the campaign's order."""
    return groups["mode"].unique(maintain_order=True).to_list()


def _ranked_eligible(groups: pl.DataFrame, mode: str) -> pl.DataFrame:
    """One mode's eligible points, best first, with the spec's tie-break."""
    return groups.filter((pl.col("mode") == mode) & pl.col("eligible")).sort(
        ["mean_loss", "lr", *point_axes(groups)], nulls_last=True
    )


def _notes(ranked: pl.DataFrame, points: pl.DataFrame, done: pl.DataFrame) -> dict[str, Any]:
    """Edge, divergence above, unfinished points, runner-up margin, its size against seed noise,
    and a sentence a reader can quote."""
    lrs = sorted(points["lr"].unique().to_list())
    axes = point_axes(points)
    winner = ranked.row(0, named=True)
    runner = ranked.row(1, named=True) if ranked.height > 1 else None
    edge = lr_edge(winner["lr"], lrs)
    margin = runner["mean_loss"] - winner["mean_loss"] if runner else None
    test = welch(point_losses(done, winner, axes), point_losses(done, runner, axes)) if runner else None
    notes = {
        "edge": edge,
        "runner_up": {key: runner[key] for key in ("lr", *axes, "mean_loss", "std_loss")} if runner else None,
        "margin": margin,
        "seed_sd": winner["std_loss"],
        "margin_se": test["se"] if test else None,  # Welch's: both points' SDs, as the p value uses them
        "margin_vs_se": margin / test["se"] if test else None,
        "p_value": test["p_value"] if test else None,
        "next_lrs": _next_lrs(edge, lrs),
        "diverged_above": diverged_above(winner, points),
        "unfinished": points.filter(pl.col("outcome") == PointOutcome.INCOMPLETE).select("lr", *axes).to_dicts(),
    }
    notes["verdict"] = _verdict(winner, runner, notes, axes)
    return notes


def point_losses(done: pl.DataFrame, point: dict[str, Any], axes: Sequence[str]) -> list[float]:
    """Per-seed losses behind one grid point's mean."""
    match = [pl.col(key).eq_missing(point[key]) for key in ("mode", "lr", *axes)]
    return done.filter(*match)["loss"].to_list()


def lr_edge(lr: float, lrs: list[float]) -> Edge | None:
    """Which end of the searched LR range the winner sits on; one LR tested has no range."""
    if len(lrs) < 2:
        return None
    if lr == lrs[-1]:
        return "upper"
    if lr == lrs[0]:
        return "lower"
    return None


def _next_lrs(edge: Edge | None, lrs: list[float], count: int = 2) -> list[float]:
    """LRs beyond the edge, continuing the grid's last geometric step there (4 significant digits)."""
    if edge is None:
        return []
    near, far = (lrs[-1], lrs[-2]) if edge == "upper" else (lrs[0], lrs[1])
    return [float(f"{near * (near / far) ** k:.4g}") for k in range(1, count + 1)]


def _verdict(winner: dict[str, Any], runner: dict[str, Any] | None, notes: dict[str, Any], axes: list[str]) -> str:
    """Plain-English summary: how much the winner wins by, whether that is noise, where next."""
    name = point_name(winner, axes)
    if runner is None:
        text = f"{name} is the only eligible recipe, so there is no runner-up to compare with."
    else:
        text = (
            f"{name} beats the runner-up {point_name(runner, axes)} "
            f"by {notes['margin']:.{loss_decimals(winner['std_loss'])}f} nats{_noise_clause(notes)}."
        )
    if notes["diverged_above"]:
        above = notes["diverged_above"]
        text += (
            f" The next LR, {above['lr']:g}, {outcome_text({'outcome': PointOutcome.DIVERGED, **above})}, so "
            "divergence bounds the optimum from above: the grid is bracketed by divergence."
        )
    if notes["unfinished"]:
        count = len(notes["unfinished"])
        lrs = ", ".join(f"{lr:g}" for lr in sorted({point["lr"] for point in notes["unfinished"]}))
        text += (
            f" {count} point{'' if count == 1 else 's'} of this mode {'is' if count == 1 else 'are'} not finished"
            f" (LR {lrs}), so the ranking may change."
        )
    if notes["edge"]:
        proposals = ", ".join(f"{lr:g}" for lr in notes["next_lrs"])
        text += (
            f" It lies on the {notes['edge']} edge of the searched LR range, so the grid does not"
            f" locate the optimum; extend it with LR {proposals}."
        )
    return text


def _noise_clause(notes: dict[str, Any]) -> str:
    """Margin in Welch standard errors and the t-test; says plainly when the win is not established."""
    ratio = notes["margin_vs_se"]
    size = f", {ratio:.2f} times its Welch standard error" if ratio is not None else ""
    p = notes["p_value"]
    if p is None:
        return f"{size}; with too few varying seeds for a t-test, {_NOT_ESTABLISHED}"
    if p < _ALPHA:
        return f"{size} (Welch t-test p = {p:.3g}); the difference is unlikely to be seed noise"
    return f"{size} (Welch t-test p = {p:.3g}); {_NOT_ESTABLISHED}"
