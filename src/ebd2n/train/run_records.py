"""What a training job writes besides checkpoints and metrics: train.log's header, a slice's
record, and at the end of a run best.json and run.json."""

from __future__ import annotations

import json
from pathlib import Path

from ebd2n.atomic import atomic_write_text, remove_temporaries
from ebd2n.config import dump_recipe, hf_identity
from ebd2n.layout import RECIPE, RunPaths
from ebd2n.provenance import environment, timestamp
from ebd2n.train.accounting import unit_table
from ebd2n.train.job import Parts, Slice
from ebd2n.train.output import RunOutput, SilentOutput
from ebd2n.train.records import DIVERGENCE
from ebd2n.train.state import Progress
from ebd2n.train.step import bf16_autocast


def write_slice_record(run_dir: Path, epoch: int, epochs: int) -> None:
    """A slice job's output: the run has reached `epoch` (the same bytes whoever writes it). The
    temporaries of records whose killed writers never renamed them go first (this is their only writer)."""
    path = RunPaths(run_dir).slice_record(epoch)
    remove_temporaries(path.parent)
    atomic_write_text(path, json.dumps({"epoch": epoch, "epochs": epochs}) + "\n")


def write_best(job: Slice, counters: Progress, output: RunOutput | SilentOutput) -> None:
    """best.json, whose `weights` name the kept checkpoint of the best epoch (null under the final
    policy, which keeps none)."""
    if counters.best is None and counters.diverged is None:  # another process of the job: it measured no epoch
        return
    if counters.best is None:  # diverged before its first epoch ended: no epoch was measured
        output.write_json(
            RunPaths(job.run_dir).best,
            {"epoch": None, "step": None, "tokens": None, "val_loss": None, "val_accuracy": None, "weights": None},
        )
        output.write(f"best subset epoch: none, the run diverged in epoch 1 ({RunPaths(job.run_dir).best.name})")
        return
    best = dict(counters.best, weights=job.retention.best_weights(counters.best["epoch"]))
    path = RunPaths(job.run_dir).best
    output.write_json(path, best)
    output.write(f"best subset epoch {best['epoch']}: val loss {best['val_loss']:.4f} ({path.name})")


def write_run_record(job: Slice, parts: Parts, output: RunOutput | SilentOutput) -> None:
    """run.json: who trained what, where and how, unit by unit (the dashboard's source)."""
    output.write_json(RunPaths(job.run_dir).record, run_record(job, parts))


def run_record(job: Slice, parts: Parts) -> dict:
    """What run.json holds, as the run stands now (a live dashboard's source while it trains)."""
    recipe, context, counters, provenance = job.recipe, job.context, parts.progress, job.provenance
    steps = parts.data.step
    env = environment()
    device = context.device
    units = unit_table(recipe, str(device), steps, counters.skipped_steps)
    devices = context.unit_devices()  # the device(s) holding each unit
    for unit in units:
        unit["device"] = devices[unit["name"]]
    record = {
        "run_id": job.run_dir.name,
        "purpose": recipe.runtime.purpose,
        "config_path": str(job.config_path or ""),
        "recipe_identity": provenance.recipe_identity,
        "cache_identity": provenance.cache_identity,
        "source_hash": provenance.source_hash,
        "mode": recipe.mode,
        "host": env["host"],
        "devices": env["devices"],
        "visible_devices": env["visible_devices"],
        "python": env["python"],
        "torch": env["torch"],
        "cuda": env["cuda"],
        "job_ids": counters.job_ids,
        "started": timestamp(counters.started),
        "ended": timestamp(),
        "parameters": sum(u["parameters"] for u in units),
        "trainable_parameters": sum(u["trainable"] for u in units),
        "steps": steps,
        "skipped_steps": counters.skipped_steps,
        "tokens": job.budget.tokens_after(steps),
        "numerics": {
            "dtype": "bf16" if bf16_autocast(recipe, device) else "fp32",
            "compile": recipe.runtime.compile,
            "deterministic": recipe.runtime.deterministic,
        },
        "placement": context.placement_record(),
        "units": units,
    }
    if counters.diverged is not None:
        record[DIVERGENCE] = counters.diverged
    if recipe.model.source == "huggingface":  # which model was fine-tuned, for the dashboard's identity section
        record["model"] = {"path": recipe.model.path, **hf_identity(recipe.model)}
    return record


def log_header(output: RunOutput | SilentOutput, job: Slice) -> None:
    """train.log's header: where, with what and from which checkpoint the slice trains."""
    recipe, budget, provenance, device = job.recipe, job.budget, job.provenance, job.context.device
    env = environment()
    output.write(f"config {job.config_path or '-'} | purpose: {recipe.runtime.purpose or '-'}")
    output.write(
        f"host {env['host']} | python {env['python']} | torch {env['torch']} | cuda {env['cuda'] or '-'} | "
        f"devices {', '.join(env['devices'])}"
    )
    if env["visible_devices"] is not None:
        output.write(f"gpu slots CUDA_VISIBLE_DEVICES={env['visible_devices']}")
    output.write(
        f"recipe identity {provenance.recipe_identity} | cache {provenance.cache_identity} | "
        f"source {provenance.source_hash}"
    )
    output.write(
        f"mode {recipe.mode} | parameters {budget.parameters:,} | budget {budget.total_tokens:,} tokens in "
        f"{budget.epochs} epochs, {budget.total_steps:,} steps of up to {budget.tokens_per_step:,} tokens | "
        f"lr {recipe.optimizer.lr} beta2 {recipe.optimizer.beta2} | seed {recipe.runtime.seed}"
    )
    dtype = "bf16 autocast" if bf16_autocast(recipe, device) else "fp32"
    output.write(f"numerics {dtype} | compile {recipe.runtime.compile} | deterministic {recipe.runtime.deterministic}")
    if job.resume is None:  # the whole recipe once; later slices resume the same recipe (same identity)
        for line in dump_recipe(recipe).splitlines():
            output.write(f"  {line}")
    else:
        output.write(f"recipe as in the first slice ({RECIPE}, identity {provenance.recipe_identity})")
    for line in job.context.placement_lines():  # one line per stage in multi-process jobs
        output.write(line)
    action = f"resume from {job.resume} at epoch {job.start_epoch}" if job.resume else "start"
    output.write(f"slice: {action}, train to epoch {job.end_epoch}")
