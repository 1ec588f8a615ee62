"""The run dashboard: `report.html`, one page written at the end of a run.

A run of a campaign loads plotly.js from the campaign's shared copy (report/assets/); a run
trained on its own, and an exported page (`ebd2n dashboard RUN --self-contained OUT`), inline it.

It shows what the training process itself recorded (run.json, recipe.yaml, metrics.jsonl):
identity, hyper-parameters, metrics, interactive curves with a table view each, the placement of
units over devices and every unit's state. Full-validation scores are computed later from
final.pt and are not on this page. Per-batch series are down-sampled for plotting only; each
per-batch table view holds every batch, so the page alone carries all the data.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ebd2n.atomic import atomic_write_text
from ebd2n.quantities import format_duration
from ebd2n.config import Recipe, count_parameters, hf_architecture, load_recipe
from ebd2n.config.schema import FROZEN_BASE, FROZEN_PREFIX, FULL_RANK, LORA
from ebd2n.errors import UserError
from ebd2n.jsonio import read_jsonl
from ebd2n.layout import DASHBOARD, METRICS, RECIPE, RUN_RECORD, campaign_of_run
from ebd2n.report import html
from ebd2n.report.html import DASH, percent
from ebd2n.report.plotly_embed import MODEBAR_BAND, figure_json, plotly_tag

MAX_POINTS = 2000
"""Most points a per-batch curve draws; more would slow the page without showing more."""
TREND_STRETCHES = 200
"""A per-batch curve of more batches than twice this also draws its mean over this many stretches."""
_SLURM_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
STATE_CLASSES = {FROZEN_PREFIX: "frozen-prefix", FROZEN_BASE: "frozen-base", LORA: "lora", FULL_RANK: "full-rank"}
"""CSS class of each unit state (its colour in the placement strip)."""


def write_dashboard(run_dir: Path, out: Path | None = None, self_contained: bool = False) -> Path:
    """Write the run's page (default `run_dir/report.html`) from its own records and return its path.

    Self-contained when asked or when the run belongs to no campaign; else plotly.js is the
    campaign's shared copy."""
    run_dir = Path(run_dir)
    run = json.loads(_required(run_dir / RUN_RECORD).read_text(encoding="utf-8"))
    recipe = load_recipe(_required(run_dir / RECIPE))
    _required(run_dir / METRICS)
    path = Path(out) if out is not None else run_dir / DASHBOARD
    campaign = None if self_contained else campaign_of_run(run_dir)
    plotly = plotly_tag(path, campaign.report if campaign else None)
    atomic_write_text(path, render_dashboard(run, recipe, read_jsonl(run_dir / METRICS), plotly))
    return path


def render_dashboard(run: dict[str, Any], recipe: Recipe, records: list[dict[str, Any]], plotly: Markup) -> str:
    """The page's HTML for a run record, its recipe and its metrics records; `plotly` loads plotly.js."""
    steps = [record for record in records if record["type"] == "step"]
    epochs = [record for record in records if record["type"] == "epoch"]
    memory = _memory(epochs)
    context = {
        "run": run,
        "identity": _identity(run),
        "cards": _cards(run, epochs, memory),
        "settings": _settings(recipe, run),
        "epochs": _epoch_table(epochs),
        "memory": memory,
        "figures": [_loss_figure(steps), _accuracy_figure(steps), _validation_figure(epochs), _throughput_figure(epochs)],
        "placement": _placement(run),
        "units": _unit_rows(run["units"]),
        "state_classes": STATE_CLASSES,
        "job_label": job_label(run["job_ids"]),
        "plotly": plotly,
    }
    return html.template_environment().get_template("dashboard.html.j2").render(context)


def downsample(points: list[tuple[int, float]], limit: int = MAX_POINTS) -> list[tuple[int, float]]:
    """At most `limit` points, in order: each bucket keeps its lowest and highest, so spikes stay visible."""
    if len(points) <= limit:
        return points
    size = math.ceil(len(points) / (limit // 2))
    kept: list[tuple[int, float]] = []
    for start in range(0, len(points), size):
        bucket = points[start : start + size]
        extremes = {min(bucket, key=lambda point: point[1]), max(bucket, key=lambda point: point[1])}
        kept.extend(sorted(extremes))
    return kept


def stretch_means(points: list[tuple[int, float]], size: int) -> list[tuple[float, float]]:
    """Mean position and value of each run of `size` points: the trend under per-batch noise."""
    return [
        (sum(x for x, _ in chunk) / len(chunk), sum(y for _, y in chunk) / len(chunk))
        for chunk in (points[start : start + size] for start in range(0, len(points), size))
    ]


def _required(path: Path) -> Path:
    if not path.is_file():
        raise UserError(
            f"{path}: no such file; the run dashboard is written from a finished run's records "
            f"({RUN_RECORD}, {RECIPE}, {METRICS}) - finish the run's final slice first"
        )
    return path


# --- identity, summary and settings ---


def _identity(run: dict[str, Any]) -> list[tuple[str, str]]:
    """Who, what and where: every value as text (the template escapes it)."""
    return [
        ("Purpose", run["purpose"] or DASH),
        ("Run id", run["run_id"]),
        ("Mode", run["mode"]),
        ("Configuration file", run["config_path"] or DASH),
        ("Recipe identity", run["recipe_identity"]),
        ("Cache identity", run["cache_identity"]),
        ("Trainer source hash", run["source_hash"]),
        *_model_identity(run.get("model")),
        ("Host", run["host"]),
        ("Devices", _devices(run)),
        ("GPU slots (CUDA_VISIBLE_DEVICES)", run.get("visible_devices") or DASH),
        ("Python", run["python"]),
        ("PyTorch", run["torch"]),
        ("CUDA", run["cuda"] or "none (CPU)"),
        ("Started", _time(run["started"])),
        ("Ended", f"{_time(run['ended'])} ({_duration(run['started'], run['ended'])})"),
    ]


def _model_identity(model: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The fine-tuned Hugging Face model: name and revision (or its directory), config and weights hashes."""
    if model is None:
        return []
    return [
        ("Hugging Face model", model["name"] or model["path"]),
        ("Model revision", model["revision"] or DASH),
        ("Model config SHA-256", model["config_sha256"]),
        ("Model weights SHA-256", model["weights_sha256"]),
    ]


def _architecture(model) -> list[tuple[str, str]]:
    """A Hugging Face model's family, attention heads and experts, from its config.json."""
    if model.source != "huggingface":
        return []
    arch = hf_architecture(model)
    rows = [("Family", arch.family), ("Key/value heads", str(arch.kv_heads))]
    if arch.experts:
        rows.append(("Experts", f"{arch.experts}, {arch.experts_per_token} per token, MLP width {arch.expert_ffn_width:,}; "
                                f"shared expert {arch.shared_ffn_width:,}; {len(arch.sparse_layers)} sparse layers"))
    return rows


def _pretrained(model) -> str | None:
    """A Hugging Face model's name@revision (or directory): where a fine-tune's weights start."""
    if model.source != "huggingface":
        return None
    return f"{model.name}@{model.revision}" if model.name else model.path


def job_label(job_ids: list[str]) -> str:
    """'SLURM job ids' when every slice ran under SLURM (numeric ids, array jobs `123_4`), else 'Job ids'."""
    slurm = bool(job_ids) and all(_SLURM_ID.fullmatch(str(job)) for job in job_ids)
    return "SLURM job ids" if slurm else "Job ids"


def _devices(run: dict[str, Any]) -> str:
    """'4 × NVIDIA H200', or 'CPU' for a run without CUDA."""
    if run["cuda"] is None:
        return "CPU"
    return ", ".join(f"{count} × {name}" for name, count in Counter(run["devices"]).items())


def _time(stamp: str) -> str:
    return datetime.fromisoformat(stamp).isoformat(sep=" ")


def _duration(started: str, ended: str) -> str:
    return format_duration((datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds())


def _cards(run: dict[str, Any], epochs: list[dict[str, Any]], memory: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline numbers: (value, label) pairs."""
    last = epochs[-1] if epochs else None
    wall = sum(epoch["wall_s"] for epoch in epochs)
    busiest = memory["busiest"]
    where = f" ({busiest['device']})" if busiest else ""
    return [
        (percent(last["val_accuracy"]) if last else DASH, f"validation token accuracy (epoch subset, epoch {last['epoch'] if last else DASH})"),
        (_fixed(last["val_loss"], 4) if last else DASH, f"validation loss, nats (epoch subset, epoch {last['epoch'] if last else DASH})"),
        (f"{run['steps']:,}", f"batches (optimizer steps); {run['skipped_steps']:,} skipped"),
        (f"{run['tokens']:,}", "training tokens"),
        (f"{run['tokens'] / wall:,.0f}" if wall else DASH, "tokens/s (training time)"),
        (f"{run['steps'] / wall:,.2f}" if wall else DASH, "batches/s (training time)"),
        (busiest["peak"] if busiest else DASH, f"peak memory on the most loaded device{where}"),
        (f"{run['trainable_parameters']:,}", f"trainable parameters of {run['parameters']:,}"),
    ]


def _settings(recipe: Recipe, run: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Hyper-parameters in groups of (label, value)."""
    model, optimizer, training, parallel = recipe.model, recipe.optimizer, recipe.training, recipe.parallel
    numerics = run["numerics"]
    return [
        ("Model", [
            ("Blocks", str(model.layers)), ("Width", str(model.width)), ("Heads", str(model.heads)),
            ("MLP width", str(model.ffn_width)), ("Context length", str(model.context_length)),
            ("Vocabulary", f"{model.vocab_size:,}"), ("Parameters (one model)", f"{count_parameters(model):,}"),
            *_architecture(model),
        ]),
        ("Optimisation", [
            ("Optimizer", f"AdamW, beta1 {optimizer.beta1:g}, beta2 {optimizer.beta2:g}, eps {optimizer.eps:g}"),
            ("Peak learning rate", f"{optimizer.lr:g}"),
            ("Schedule", f"{optimizer.warmup_fraction:g} warm-up, cosine to {optimizer.min_lr_ratio:g} of peak"),
            ("Weight decay", f"{optimizer.weight_decay:g}"), ("Gradient clip", f"{optimizer.grad_clip:g}"),
            ("Tokens per step", f"{training.batch_tokens:,}"), ("Token budget", _budget(recipe)),
            ("Seed", str(recipe.runtime.seed)),
            ("Initial weights", training.init_from or _pretrained(model) or "random initialisation"),
        ]),
        ("Numerics", [
            ("Compute dtype", numerics["dtype"]), ("torch.compile", _yes(numerics["compile"])),
            ("Deterministic", _yes(numerics["deterministic"])),
        ]),
        ("Pipeline", [
            ("Pipeline stages", str(parallel.pipeline_stages)), ("Data-parallel replicas", str(parallel.data_parallel)),
            ("Pipeline depth", f"{parallel.pipeline_depth} (micro-batches in flight)"), ("Schedule", parallel.schedule),
            ("Micro-batch", f"{training.micro_batch_size} sequences"),
        ]),
        ("Freeze and LoRA", [
            ("Frozen prefix", _frozen(parallel.freeze_prefix)),
            ("LoRA", _lora(recipe)),
        ]),
        ("Decentralized", _decentralized(recipe)),
    ]


def _budget(recipe: Recipe) -> str:
    training = recipe.training
    total = f"{training.max_tokens:,}" if training.max_tokens else f"{training.tokens_per_parameter:g} per parameter"
    epoch = f"{training.epoch_tokens:,}" if training.epoch_tokens else f"{training.epoch_tokens_per_parameter:g} per parameter"
    return f"{total} tokens, epochs of {epoch}"


def _frozen(prefix: int) -> str:
    return "none" if prefix == 0 else "block 0" if prefix == 1 else f"blocks 0–{prefix - 1}"


def _lora(recipe: Recipe) -> str:
    lora = recipe.parallel.lora
    if lora is None:
        return "none (full-rank training)"
    norms = "; norms full rank" if lora.train_norms else ""
    return f"rank {lora.rank}, alpha {lora.alpha:g}, dropout {lora.dropout:g}, on {', '.join(lora.targets)}{norms}"


def _decentralized(recipe: Recipe) -> list[tuple[str, str]]:
    settings = recipe.decentralized
    if settings is None:
        return [("Training", "synchronous (one model)")]
    return [("Local models", str(settings.num_models)), ("Topology", settings.topology), ("Scheme", settings.scheme)]


# --- metrics ---


def _epoch_table(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every epoch record; a consensus-distance column only for runs that record it."""
    consensus = any("consensus_distance" in epoch for epoch in epochs)
    columns = ["Epoch", "Step", "Tokens", "Train loss", "Subset val loss", "Subset val acc.", "LR", "Tokens/s", "Batches/s",
               "Wall (s)", "Skipped"] + (["Consensus dist."] if consensus else [])
    rows = [
        [str(e["epoch"]), f"{e['step']:,}", f"{e['tokens']:,}", _fixed(e["train_loss"], 4), _fixed(e["val_loss"], 4),
         percent(e["val_accuracy"]), _sci(e["lr"]), f"{e['tokens_per_s']:,.0f}", f"{e['batches_per_s']:,.2f}",
         f"{e['wall_s']:,.1f}", f"{e['skipped_steps']:,}"]
        + ([_sci(e.get("consensus_distance"))] if consensus else [])
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
        {"device": device, "allocated": _bytes(allocated[device]["allocated"]) if device in allocated else DASH,
         "peak": _bytes(peak), "busiest": device == busiest}
        for device, peak in peaks.items()
    ]
    return {"rows": rows, "busiest": {"device": busiest, "peak": _bytes(peaks[busiest])} if busiest else None}


# --- figures: Plotly specs plus the table each one's "Table view" shows ---


def _figure(key: str, title: str, note: str, data: list[dict[str, Any]], layout: dict[str, Any],
            columns: list[str], rows: list[list[str]], packed: bool = False) -> dict[str, Any]:
    """A figure and its table view; `packed` tables (one row per batch) travel compressed, see `pack_rows`."""
    # the legend goes under the plot: the band above it is the toolbar's (MODEBAR_BAND)
    base = {"height": 400, "margin": {"l": 70, "r": 70, "t": MODEBAR_BAND, "b": 50}, "hovermode": "x unified",
            "legend": {"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"}}
    return {"id": key, "title": title, "note": note, "json": figure_json({"data": data, "layout": base | layout}),
            "columns": columns, "rows": [] if packed else rows, "packed": pack_rows(rows) if packed else None}


def pack_rows(rows: list[list[str]]) -> str:
    """Table rows as base64 of gzip-compressed JSON, unpacked by the page when its table is first shown.

    A per-batch table holds every batch: as HTML rows it would make each page of a 12,000-batch
    run 1.7 MB, packed it takes about a seventh of that. No timestamp in the gzip header, so an
    unchanged run gives the same page."""
    text = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
    return base64.b64encode(gzip.compress(text.encode("utf-8"), mtime=0)).decode("ascii")


def _series(steps: list[dict[str, Any]], field: str) -> list[tuple[int, float]]:
    return [(step["step"], step[field]) for step in steps if _finite(step[field])]


def _line(points: list[tuple[float, float]], name: str, color: str, width: float = 1) -> dict[str, Any]:
    """A curve, its values to 6 significant digits (more than a plot or its hover shows; the table has the data)."""
    return {"type": "scatter", "mode": "lines", "name": name, "line": {"color": color, "width": width},
            "x": [_short(x) for x, _ in points], "y": [_short(y) for _, y in points]}


def _short(value: float) -> float:
    return value if isinstance(value, int) else float(f"{value:.6g}")


def _batch_traces(points: list[tuple[int, float]], name: str, colors: tuple[str, str]) -> list[dict[str, Any]]:
    """Every batch (down-sampled), light under a dark trend line when the series is long enough to be noisy."""
    if len(points) <= 2 * TREND_STRETCHES:
        return [_line(points, name, colors[1])]
    size = math.ceil(len(points) / TREND_STRETCHES)
    return [
        _line(downsample(points), name, colors[0]),
        _line(stretch_means(points, size), f"mean over {size:,} batches", colors[1], width=2),
    ]


def _sampling_note(count: int) -> str:
    if count <= MAX_POINTS:
        return f"All {count:,} batches are drawn."
    return (f"{count:,} batches, drawn as {MAX_POINTS:,} points that keep each stretch's lowest and highest value; "
            "the table view lists every batch.")


def _loss_figure(steps: list[dict[str, Any]]) -> dict[str, Any]:
    points = _series(steps, "loss")
    skipped = [step["step"] for step in steps if step["skipped"]]
    data = _batch_traces(points, "training loss", ("#a6c8e6", "#1f5fa8"))
    layout = {"xaxis": {"title": {"text": "batch (optimizer step)"}}, "yaxis": {"title": {"text": "loss (nats)"}},
              "shapes": [_marker_line(step) for step in skipped]}
    note = _sampling_note(len(steps)) + (f" Red dotted lines mark the {len(skipped):,} skipped step(s)." if skipped else "")
    rows = [
        [f"{s['step']:,}", _fixed(s["loss"], 4), _sci(s["lr"]), _fixed(s["grad_norm"], 3), "skipped" if s["skipped"] else ""]
        for s in steps
    ]
    return _figure("batch-loss", "Per-batch training loss", note, data, layout,
                   ["Step", "Loss", "LR", "Gradient norm", "Skipped"], rows, packed=True)


def _marker_line(step: int) -> dict[str, Any]:
    """A full-height vertical line at a skipped step (its loss may be NaN, so no point can mark it)."""
    return {"type": "line", "x0": step, "x1": step, "yref": "paper", "y0": 0, "y1": 1,
            "line": {"color": "#d62728", "width": 1, "dash": "dot"}}


def _accuracy_figure(steps: list[dict[str, Any]]) -> dict[str, Any]:
    points = [(step, 100 * value) for step, value in _series(steps, "accuracy")]
    data = _batch_traces(points, "token accuracy", ("#b5dfb0", "#1e7a3c"))
    layout = {"xaxis": {"title": {"text": "batch (optimizer step)"}}, "yaxis": {"title": {"text": "token accuracy (%)"}}}
    rows = [[f"{s['step']:,}", percent(s["accuracy"])] for s in steps]
    return _figure("batch-accuracy", "Per-batch token accuracy", _sampling_note(len(steps)), data, layout,
                   ["Step", "Token accuracy"], rows, packed=True)


def _validation_figure(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    x = [e["epoch"] for e in epochs]
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "train loss (epoch mean)", "x": x,
         "y": [_finite_or_none(e["train_loss"]) for e in epochs], "line": {"color": "#9ecae1", "dash": "dot"}},
        {"type": "scatter", "mode": "lines+markers", "name": "subset validation loss", "x": x,
         "y": [_finite_or_none(e["val_loss"]) for e in epochs], "line": {"color": "#1f77b4"}},
        {"type": "scatter", "mode": "lines+markers", "name": "subset validation accuracy", "x": x, "yaxis": "y2",
         "y": [100 * e["val_accuracy"] for e in epochs], "line": {"color": "#2ca02c"}},
    ]
    layout = {"xaxis": {"title": {"text": "epoch"}, "dtick": 1},
              "yaxis": {"title": {"text": "loss (nats)"}},
              "yaxis2": {"title": {"text": "token accuracy (%)"}, "overlaying": "y", "side": "right", "showgrid": False,
                         "tickmode": "auto"}}
    rows = [[str(e["epoch"]), f"{e['tokens']:,}", _fixed(e["train_loss"], 4), _fixed(e["val_loss"], 4), percent(e["val_accuracy"])]
            for e in epochs]
    return _figure("epoch-validation", "Validation after each epoch",
                   "Loss and token accuracy on the fixed validation subset, after each epoch.", data, layout,
                   ["Epoch", "Tokens", "Train loss", "Subset val loss", "Subset val accuracy"], rows)


def _throughput_figure(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens/s as a line, batches/s as dots; both axes start at zero with the same headroom, so with a fixed
    batch size the dots sit on the line and either axis reads the same curve."""
    x = [e["epoch"] for e in epochs]
    tokens, batches = [e["tokens_per_s"] for e in epochs], [e["batches_per_s"] for e in epochs]
    data = [
        {"type": "scatter", "mode": "lines", "name": "tokens/s", "x": x, "y": tokens, "line": {"color": "#7b4fa6", "width": 2}},
        {"type": "scatter", "mode": "markers", "name": "batches/s", "x": x, "yaxis": "y2", "y": batches,
         "marker": {"color": "#e07b00", "size": 9}},
    ]
    layout = {"xaxis": {"title": {"text": "epoch"}, "dtick": 1},
              "yaxis": {"title": {"text": "tokens/s"}, "range": _headroom(tokens), "tickformat": ",.0f"},
              "yaxis2": {"title": {"text": "batches/s"}, "overlaying": "y", "side": "right", "range": _headroom(batches),
                         "showgrid": False, "tickmode": "auto"}}
    rows = [[str(e["epoch"]), f"{e['tokens_per_s']:,.0f}", f"{e['batches_per_s']:,.2f}", f"{e['wall_s']:,.1f}"] for e in epochs]
    return _figure("throughput", "Throughput per epoch",
                   "Training time only (validation excluded): tokens/s on the left axis, batches/s on the right.", data, layout,
                   ["Epoch", "Tokens/s", "Batches/s", "Wall (s)"], rows)


def _headroom(values: list[float]) -> list[float]:
    return [0, 1.1 * max(values, default=1.0)]


# --- units and placement ---


def _placement(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per device: its unit rows in order, the span they cover and the parameters they hold."""
    units = {unit["name"]: unit for unit in run["units"]}
    placement = []
    for entry in run["placement"]:
        placed = [units[name] for name in entry["units"]]
        placement.append({
            "device": entry["device"],
            "role": f"node {entry['node']}, stage {entry['stage']}, replica {entry['replica']}" if "stage" in entry else "",
            "units": _unit_rows(placed),
            "span": f"{placed[0]['name']} … {placed[-1]['name']}" if placed else DASH,
            "parameters": f"{sum(unit['parameters'] for unit in placed):,}",
            "trainable": f"{sum(unit['trainable'] for unit in placed):,}",
        })
    return placement


def _unit_rows(units: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Units as text, with the CSS class of their state."""
    return [
        {"name": u["name"], "state": u["state"], "class": STATE_CLASSES.get(u["state"], "other"),
         "parameters": f"{u['parameters']:,}", "trainable": f"{u['trainable']:,}", "device": u["device"],
         "steps_taken": f"{u['steps_taken']:,}", "steps_skipped": f"{u['steps_skipped']:,}"}
        for u in units
    ]


# --- formatting ---


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _finite_or_none(value: float | None) -> float | None:
    """Plotly JSON has no NaN or infinity: such points become gaps."""
    return value if _finite(value) else None


def _fixed(value: float | None, digits: int) -> str:
    return f"{value:.{digits}f}" if _finite(value) else str(value) if value is not None else DASH


def _sci(value: float | None) -> str:
    return f"{value:.3e}" if _finite(value) else DASH


def _bytes(count: int) -> str:
    return f"{count / 1e9:.2f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
