"""Tables a report derives from a campaign: winners' curves, settings, data facts, scaling points.

Each returns plain rows or a polars frame, so the CSV files, the JSON results, the figures and the
page all show the same numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ebd2n.campaign.analysis import point_axes
from ebd2n.campaign.results import CampaignResults
from ebd2n.config import Recipe, count_parameters
from ebd2n.config.checkpoint_policy import policy_label
from ebd2n.jsonio import read_json
from ebd2n.layout import run_paths
from ebd2n.outcomes import Outcome
from ebd2n.train.schedule import describe_schedule

CURVE_COLUMNS: dict[str, type[pl.DataType]] = {
    "mode": pl.String,
    "lr": pl.Float64,
    "beta2": pl.Float64,
    "tokens": pl.Int64,
    "split": pl.String,
    "seeds": pl.Int64,
    "mean_loss": pl.Float64,
    "std_loss": pl.Float64,
}
"""Columns of curves.csv, as in the reference validation_curves.csv."""


def response_point(groups: pl.DataFrame, selection: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Where the LR-response table is drawn: on each axis besides mode and LR (beta2, the further
    axes), the value every winner shares, else the largest tested."""
    point = {}
    for axis in point_axes(groups):
        chosen = {entry[axis] for entry in selection.values()}
        point[axis] = chosen.pop() if len(chosen) == 1 else max(groups[axis].drop_nulls().to_list())
    return point


def point_runs(campaign: CampaignResults, point: dict[str, Any]) -> pl.DataFrame:
    """The complete runs behind one grid point, on the campaign's seeds, in seed order."""
    return campaign.runs.filter(
        pl.col("mode") == point["mode"],
        pl.col("lr") == point["lr"],
        *(pl.col(axis).eq_missing(point[axis]) for axis in campaign.axes),
        pl.col("status") == Outcome.COMPLETE,
        pl.col("seed").is_in(campaign.seeds),
    ).sort("seed")


def curve_table(campaign: CampaignResults, selection: dict[str, dict[str, Any]]) -> pl.DataFrame:
    """Winners' epoch-subset validation loss per token count: seeds, mean and sample SD (each
    further axis's column after beta2)."""
    columns = curve_columns(campaign)
    records = [
        {
            "mode": mode,
            "lr": point["lr"],
            **{axis: point[axis] for axis in campaign.axes},
            "tokens": record["tokens"],
            "loss": record["val_loss"],
        }
        for mode, point in selection.items()
        for directory in point_runs(campaign, point)["directory"]
        for record in campaign.epochs(directory)
    ]
    if not records:
        return pl.DataFrame(schema=columns)
    order = {mode: index for index, mode in enumerate(selection)}
    return (
        pl.DataFrame(records)
        .group_by(["mode", "lr", *campaign.axes, "tokens"])
        .agg(seeds=pl.len().cast(pl.Int64), mean_loss=pl.col("loss").mean(), std_loss=pl.col("loss").std(ddof=1))
        .with_columns(split=pl.lit("subset"))
        .sort([pl.col("mode").replace_strict(order, return_dtype=pl.Int64), "tokens"])
        .select(list(columns))
        .cast(columns)
    )


def curve_columns(campaign: CampaignResults) -> dict[str, type[pl.DataType]]:
    """curves.csv's columns: the reference's, with each further axis's after beta2 (its runs-table type)."""
    further = {axis: campaign.runs.schema[axis] for axis in campaign.axes if axis not in CURVE_COLUMNS}
    columns = list(CURVE_COLUMNS.items())
    return dict(columns[:3] + list(further.items()) + columns[3:])


def settings_rows(settings: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Fixed settings as table rows: label, one value per mode, and whether all modes agree."""
    rows = []
    for label in next(iter(settings.values()), {}):
        values = [facts.get(label, "—") for facts in settings.values()]
        rows.append({"label": label, "values": values, "shared": len(set(values)) == 1})
    return rows


def data_facts(campaign: CampaignResults, recipe: Recipe) -> list[tuple[str, str]]:
    """Data, evaluation and retention facts; the manifest wins over the recipe where it exists."""
    manifest = campaign.manifest or {}
    source = manifest.get("source") or {}
    tokenizer = manifest.get("tokenizer") or {}
    data, evaluation = recipe.data, recipe.evaluation
    targets = sorted({r.get("targets") for r in campaign.results.values() if r.get("targets") is not None})
    caches = sorted({r.get("cache_identity") for r in campaign.results.values() if r.get("cache_identity")})
    seeds = manifest.get("seeds")
    return [
        (
            "Source",
            _join(source.get("name") or data.dataset or data.source, source.get("config") or data.dataset_config),
        ),
        ("Source revision", str(source.get("revision") or data.revision or "not recorded")),
        ("Tokenizer", str(tokenizer.get("name") or data.tokenizer or "BPE trained on the train split")),
        ("Tokenizer revision", str(tokenizer.get("revision") or data.tokenizer_revision or "not recorded")),
        ("Vocabulary", f"{tokenizer.get('vocab_size') or recipe.model.vocab_size:,}"),
        ("Preprocessing seeds", _seeds(seeds) if isinstance(seeds, dict) else f"shuffle {data.shuffle_seed}"),
        ("Validation subset seed", str(evaluation.seed)),
        ("Epoch subset", f"{evaluation.subset_blocks:,} blocks of {recipe.model.context_length + 1:,} tokens"),
        ("Full-validation targets", ", ".join(f"{t:,}" for t in targets) or "no complete run yet"),
        ("Cache identity", ", ".join(caches) or "not recorded"),
        ("Cache directory", data.cache_dir),
        ("Checkpoint policy", policy_label(recipe.training.checkpoint_policy, recipe.training.checkpoint_epochs)),
    ]


def split_rows(campaign: CampaignResults) -> list[tuple[str, str]]:
    """Per-split token and document counts from the manifest."""
    splits = (campaign.manifest or {}).get("splits") or {}
    return [(name, _counts(counts)) for name, counts in splits.items()]


def scaling_rows(campaign: CampaignResults) -> list[dict[str, Any]]:
    """One row per run of a scaling campaign, smallest model first: size, cost and accuracy per epoch."""
    rows = []
    for directory, size in campaign.presets.items():
        recipe = campaign.recipe(directory)
        records = campaign.epochs(directory)
        results = campaign.results.get(directory) or {}
        devices = (results.get("environment") or {}).get("devices") or []
        gpus = 0 if devices in ([], ["cpu"]) else len(devices)
        peaks = [device["peak"] for record in records for device in (record.get("memory") or {}).values()]
        trunk = _trunk_epochs(campaign.directory / directory)
        seconds = sum(record.get("wall_s", 0.0) for record in records[trunk:])
        rows.append(
            {
                "size": size,
                "run": campaign.runs.filter(pl.col("directory") == directory)["run"][0],
                "parameters": count_parameters(recipe.model),
                "gpus": gpus,
                "epochs": len(records),
                "val_accuracy": [record["val_accuracy"] for record in records],
                "tokens_per_s": sum(r["tokens_per_s"] for r in records) / len(records) if records else None,
                "peak_memory_bytes": max(peaks) if peaks else None,
                "gpu_hours": gpus * seconds / 3600 if gpus else None,
                "loss": results.get("loss"),
                "job_ids": list(results.get("job_ids") or []),
            }
        )
    return sorted(rows, key=lambda row: (row["parameters"], row["run"]))


def _trunk_epochs(run_dir: Path) -> int:
    """The epochs a branched run took from its parent's trunk (ebd2n.train.branch): timed there."""
    lineage = read_json(run_paths(run_dir).lineage) if run_paths(run_dir).lineage.is_file() else None
    epoch = lineage.get("epoch") if isinstance(lineage, dict) else None
    return epoch if isinstance(epoch, int) and epoch > 0 else 0


def settings(recipe: Recipe, epochs: int | None) -> dict[str, str]:
    """One run's fixed settings in words: model shape, optimizer, schedule, batch, numerics, topology."""
    model, opt, training, runtime = recipe.model, recipe.optimizer, recipe.training, recipe.runtime
    packed = recipe.decentralized
    parallel = recipe.parallel
    return {
        "Parameters per model": f"{count_parameters(model):,}",
        "Model": (
            f"{model.layers} layers, width {model.width}, {model.heads} heads, FFN {model.ffn_width}, "
            f"vocabulary {model.vocab_size:,}, context {model.context_length:,}"
        ),
        "Optimizer": (
            f"AdamW, beta1 {opt.beta1:g}, eps {opt.eps:g}, weight decay {opt.weight_decay:g} (matrices), "
            f"gradient clip {opt.grad_clip:g}"
        ),
        "Schedule": describe_schedule(opt),
        "Batch": f"{training.batch_tokens:,} tokens per step, micro-batch {training.micro_batch_size}",
        "Epochs": str(epochs) if epochs is not None else "no epoch recorded",
        "Numerics": (
            f"{'BF16 autocast' if runtime.amp else 'FP32'}, {'torch.compile' if runtime.compile else 'eager'}, "
            f"deterministic={str(runtime.deterministic).lower()}, device {runtime.device}"
        ),
        "Topology": f"{packed.num_models} local models, {packed.topology}, {packed.scheme}" if packed else "one model",
        "Placement": f"{parallel.pipeline_stages} pipeline stage(s) x {parallel.data_parallel} data-parallel",
        "Checkpoint policy": policy_label(training.checkpoint_policy, training.checkpoint_epochs),
        "Purpose": runtime.purpose or "none given",
    }


def _join(*parts: Any) -> str:
    return " / ".join(str(part) for part in parts if part)


def _seeds(seeds: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in seeds.items())


def _counts(counts: Any) -> str:
    """ "132,171 tokens, 298 documents, 1 shard": the counts of a split; its shard records only counted."""
    if not isinstance(counts, dict):
        return str(counts)
    parts = [
        f"{value:,} {name}" for name, value in counts.items() if isinstance(value, int) and not isinstance(value, bool)
    ]
    if isinstance(counts.get("shards"), list):
        shards = len(counts["shards"])
        parts.append(f"{shards:,} shard{'s' if shards != 1 else ''}")
    return ", ".join(parts)
