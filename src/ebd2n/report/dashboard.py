"""The run dashboard: `report.html`, one page written at the end of a run.

A run of a campaign loads plotly.js from the campaign's shared copy (report/assets/); a run
trained on its own, and an exported page (`ebd2n dashboard RUN --self-contained OUT`), inline it.

It shows what the training process itself recorded (run.json, recipe.yaml, metrics.jsonl):
identity, hyper-parameters, metrics, interactive curves with a table view each, the placement of
units over devices and every unit's state. The full validation of final.pt, the loss a campaign
ranks by, leads the page once measured: the validation job writes the page again with it.
Per-batch series are down-sampled for plotting only; each
per-batch table view holds every batch, so the page alone carries all the data. This module
assembles the page; report.dashboard_settings writes its identity and settings tables,
report.dashboard_figures its figures.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ebd2n.atomic import atomic_write_text
from ebd2n.config import Recipe, load_recipe
from ebd2n.config.parallelism import FROZEN_BASE, FROZEN_PREFIX, FULL_RANK, LORA
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json, read_jsonl
from ebd2n.layout import DASHBOARD, FINAL, METRICS, RECIPE, RESULTS_JSON, RUN_RECORD, campaign_of_run
from ebd2n.report import html
from ebd2n.report.dashboard_figures import run_figures
from ebd2n.report.dashboard_settings import identity_rows, settings_groups
from ebd2n.report.html import DASH, fixed, percent, scientific
from ebd2n.report.plotly_embed import plotly_tag
from ebd2n.train.pack_record import read_packs
from ebd2n.train.records import TYPE, RecordType

_SLURM_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
STATE_CLASSES = {FROZEN_PREFIX: "frozen-prefix", FROZEN_BASE: "frozen-base", LORA: "lora", FULL_RANK: "full-rank"}
"""CSS class of each unit state (its colour in the placement strip)."""


def write_dashboard(
    run_dir: Path,
    out: Path | None = None,
    self_contained: bool = False,
    run: dict[str, Any] | None = None,
    results: dict[str, Any] | None = None,
) -> Path:
    """Write the run's page (default `run_dir/report.html`) from its own records and return its path.

    Self-contained when asked or when the run belongs to no campaign; else plotly.js is the
    campaign's shared copy. `run`: the run record of a run still training (its `state` says how
    far it is), instead of its run.json; `results`: its full validation being written, instead of
    its results.json."""
    run_dir = Path(run_dir)
    if run is None:
        run = json.loads(_required(run_dir / RUN_RECORD).read_text(encoding="utf-8"))
    recipe = load_recipe(_required(run_dir / RECIPE))
    _required(run_dir / METRICS)
    path = Path(out) if out is not None else run_dir / DASHBOARD
    campaign = None if self_contained else campaign_of_run(run_dir)
    plotly = plotly_tag(path, campaign.report if campaign else None)
    # the campaign page, by relative path (it exists once the campaign's report is built)
    back = os.path.relpath(campaign.report_index.absolute(), path.absolute().parent) if campaign else None
    back = Path(back).as_posix() if back else None
    if results is None:
        results = read_json(run_dir / RESULTS_JSON)
    packs = read_packs(run_dir)
    page = render_dashboard(run, recipe, read_jsonl(run_dir / METRICS), plotly, results, back, packs)
    atomic_write_text(path, page)
    return path


def render_dashboard(
    run: dict[str, Any],
    recipe: Recipe,
    records: list[dict[str, Any]],
    plotly: Markup,
    results: dict[str, Any] | None = None,
    campaign_page: str | None = None,
    packs: dict[int, list[str]] | None = None,
) -> str:
    """The page's HTML for a run record, its recipe and its metrics records; `plotly` loads plotly.js.
    `results` (the run's full validation, once done) gives the headline loss; `campaign_page` links back;
    `packs` (packs.json) names the runs it trained with in packs."""
    steps = [record for record in records if record[TYPE] == RecordType.STEP]
    epochs = [record for record in records if record[TYPE] == RecordType.EPOCH]
    memory = _memory(epochs)
    context = {
        "run": run,
        "identity": identity_rows(run, packs),
        "cards": _cards(run, epochs, memory, _full_validation(results)),
        "full_validation": _full_validation(results),
        "campaign_page": campaign_page,
        "settings": settings_groups(recipe, run),
        "epochs": _epoch_table(epochs),
        "memory": memory,
        "figures": run_figures(steps, epochs),
        "placement": _placement(run),
        "units": _unit_rows(run["units"]),
        "state_classes": STATE_CLASSES,
        "job_label": job_label(run["job_ids"]),
        "plotly": plotly,
    }
    return html.template_environment().get_template("dashboard.html.j2").render(context)


def _required(path: Path) -> Path:
    if not path.is_file():
        raise UserError(
            f"{path}: no such file; the run dashboard is written from a finished run's records "
            f"({RUN_RECORD}, {RECIPE}, {METRICS}) - finish the run's final slice first (while it trains, "
            f"its trainer keeps its {DASHBOARD} up to date)"
        )
    return path


def job_label(job_ids: list[str]) -> str:
    """'SLURM job ids' when every slice ran under SLURM (numeric ids, array jobs `123_4`), else 'Job ids'."""
    slurm = bool(job_ids) and all(_SLURM_ID.fullmatch(str(job)) for job in job_ids)
    return "SLURM job ids" if slurm else "Job ids"


def _full_validation(results: dict[str, Any] | None) -> dict[str, str] | None:
    """The full validation of the final checkpoint as the page shows it; None before it ran or when it failed."""
    if not results or not isinstance(results.get("loss"), (int, float)) or not math.isfinite(results["loss"]):
        return None
    targets = results.get("targets")
    return {
        "loss": fixed(results["loss"], 4),
        "accuracy": percent(results.get("accuracy")),
        "targets": f"{targets:,}" if isinstance(targets, int) else DASH,
    }


def _cards(
    run: dict[str, Any], epochs: list[dict[str, Any]], memory: dict[str, Any], full: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """The headline numbers: (value, label) pairs; the full-validation loss first, once measured."""
    last = epochs[-1] if epochs else None
    headline = (
        [(full["loss"], f"ranking loss: full validation, nats ({FINAL}, all {full['targets']} targets)")]
        if full
        else []
    )
    wall = sum(epoch["wall_s"] for epoch in epochs)
    busiest = memory["busiest"]
    where = f" ({busiest['device']})" if busiest else ""
    return headline + [
        (
            percent(last["val_accuracy"]) if last else DASH,
            f"validation token accuracy (epoch subset, epoch {last['epoch'] if last else DASH})",
        ),
        (
            fixed(last["val_loss"], 4) if last else DASH,
            f"validation loss, nats (epoch subset, epoch {last['epoch'] if last else DASH})",
        ),
        (f"{run['steps']:,}", f"batches (optimizer steps); {run['skipped_steps']:,} skipped"),
        (f"{run['tokens']:,}", "training tokens"),
        (f"{run['tokens'] / wall:,.0f}" if wall else DASH, "tokens/s (training time)"),
        (f"{run['steps'] / wall:,.2f}" if wall else DASH, "batches/s (training time)"),
        (busiest["peak"] if busiest else DASH, f"peak memory on the most loaded device{where}"),
        (f"{run['trainable_parameters']:,}", f"trainable parameters of {run['parameters']:,}"),
    ]


# --- metrics ---


def _epoch_table(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every epoch record; a consensus-distance column only for runs that record it."""
    consensus = any("consensus_distance" in epoch for epoch in epochs)
    columns = [
        "Epoch",
        "Step",
        "Tokens",
        "Train loss",
        "Subset val loss",
        "Subset val acc.",
        "LR",
        "Tokens/s",
        "Batches/s",
        "Wall (s)",
        "Skipped",
    ] + (["Consensus dist."] if consensus else [])
    rows = [
        [
            str(e["epoch"]),
            f"{e['step']:,}",
            f"{e['tokens']:,}",
            fixed(e["train_loss"], 4),
            fixed(e["val_loss"], 4),
            percent(e["val_accuracy"]),
            scientific(e["lr"]),
            f"{e['tokens_per_s']:,.0f}",
            f"{e['batches_per_s']:,.2f}",
            f"{e['wall_s']:,.1f}",
            f"{e['skipped_steps']:,}",
        ]
        + ([scientific(e.get("consensus_distance"))] if consensus else [])
        for e in epochs
    ]
    return {"columns": columns, "rows": rows}


def _memory(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per device: allocated at the last epoch and the peak over all epochs; the busiest device by peak."""
    peaks: dict[str, int] = {}
    for epoch in epochs:
        for device, numbers in epoch["memory"].items():
            peaks[device] = max(peaks.get(device, 0), numbers["peak"])
    allocated = epochs[-1]["memory"] if epochs else {}
    busiest = max(peaks, key=lambda device: peaks[device], default=None)
    rows = [
        {
            "device": device,
            "allocated": _bytes(allocated[device]["allocated"]) if device in allocated else DASH,
            "peak": _bytes(peak),
            "busiest": device == busiest,
        }
        for device, peak in peaks.items()
    ]
    return {"rows": rows, "busiest": {"device": busiest, "peak": _bytes(peaks[busiest])} if busiest else None}


# --- units and placement ---


def _placement(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per device: its unit rows in order, the span they cover and the parameters they hold."""
    units = {unit["name"]: unit for unit in run["units"]}
    placement = []
    for entry in run["placement"]:
        placed = [units[name] for name in entry["units"]]
        placement.append(
            {
                "device": entry["device"],
                "role": f"node {entry['node']}, stage {entry['stage']}, replica {entry['replica']}"
                if "stage" in entry
                else "",
                "units": _unit_rows(placed),
                "span": f"{placed[0]['name']} … {placed[-1]['name']}" if placed else DASH,
                "parameters": f"{sum(unit['parameters'] for unit in placed):,}",
                "trainable": f"{sum(unit['trainable'] for unit in placed):,}",
            }
        )
    return placement


def _unit_rows(units: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Units as text, with the CSS class of their state."""
    return [
        {
            "name": u["name"],
            "state": u["state"],
            "class": STATE_CLASSES.get(u["state"], "other"),
            "parameters": f"{u['parameters']:,}",
            "trainable": f"{u['trainable']:,}",
            "device": u["device"],
            "steps_taken": f"{u['steps_taken']:,}",
            "steps_skipped": f"{u['steps_skipped']:,}",
        }
        for u in units
    ]


def _bytes(count: int) -> str:
    return f"{count / 1e9:.2f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB"
