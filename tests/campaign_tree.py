"""Write a finished campaign's directory tree by hand, as the workflow would leave it.

Report tests and the report benchmark need realistic `results/<campaign>` trees without training
anything; this module writes one from a list of run specs (grid point, seed, final loss).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebd2n.config import Recipe, load_recipe, recipe_from_dict, save_recipe
from ebd2n.layout import JOB_RECORDS, CampaignPaths, run_paths

SOURCE_HASH = "a" * 64
CACHE_IDENTITY = "c" * 64
EPOCH_TOKENS = 24576
TARGETS = 98_304
VALIDATED = "2026-09-02T10:00:00+0000"
ENVIRONMENT = {
    "host": "node01",
    "python": "3.12.13",
    "torch": "2.13.0",
    "cuda": None,
    "devices": ["cpu"],
    "platform": "Linux-x86_64",
}
MANIFEST = {
    "source": {"name": "synthetic", "config": None, "revision": "embedded-v1"},
    "tokenizer": {"name": "bpe-synthetic", "revision": "trained", "vocab_size": 512},
    "seeds": {"shuffle": 42, "synthetic": 0},
    "splits": {
        "train": {
            "tokens": 1_000_000,
            "documents": 2_000,
            "shards": [{"file": "train-00000.bin", "sha256": "d" * 64, "tokens": 1_000_000}],
        },
        "validation": {
            "tokens": TARGETS + 1_000,
            "documents": 200,
            "targets": TARGETS + 999,
            "shards": [{"file": "validation-00000.bin", "sha256": "e" * 64, "tokens": TARGETS + 1_000}],
        },
    },
}


@dataclass(frozen=True)
class RunSpec:
    """One run of the tree: its grid point, seed and final full-validation loss."""

    mode: str
    lr: float
    beta2: float
    seed: int
    loss: float
    preset: str | None = None
    """Model size of a scaling campaign's run; it prefixes the run id."""
    display_name: str | None = None
    """The `run` field of results.json when it should differ from the directory name."""
    overrides: tuple[tuple[str, Any], ...] = field(default=())
    """Extra (dotted key, value) overrides of this run's recipe."""
    diverged_at: int | None = None
    """The step this run diverged at (its record as the trainer leaves it); None: it converged."""
    failed: bool = False
    """Its job failed: the run directory holds its recipe, metrics up to the crash and a job log, no result."""

    @property
    def run_id(self) -> str:
        prefix = f"{self.preset}-" if self.preset else ""
        return f"{prefix}{self.mode}-lr{self.lr!r}-beta2{self.beta2!r}-seed{self.seed}"


def synthetic_loss(mode: str, lr: float, beta2: float, seed: int) -> float:
    """A smooth loss surface with its optimum inside the grid and a little seed noise."""
    k = 1 if mode == "synchronous" else int(mode.rsplit("-", 1)[1])
    optimum = 0.002 * math.sqrt(k)
    return 3.6 + 0.05 * math.log(lr / optimum) ** 2 + 0.5 * (1 - beta2) + 0.004 * math.sin(seed * 7.3 + k)


def grid_runs(
    modes: Sequence[str], lrs: Sequence[float], beta2s: Sequence[float], seeds: Sequence[int]
) -> list[RunSpec]:
    """Every point of a full grid with `synthetic_loss` losses."""
    return [
        RunSpec(mode, lr, beta2, seed, synthetic_loss(mode, lr, beta2, seed))
        for mode in modes
        for lr in lrs
        for beta2 in beta2s
        for seed in seeds
    ]


REPORT_MODES = ("synchronous", "packed-4")
REPORT_LRS = (0.001, 0.003)
REPORT_BETA2 = (0.95, 0.999)
REPORT_SEEDS = (42, 43, 44)
HOSTILE = "<script>alert(1)</script>"
"""A run name, purpose and description that must show up as text, never run."""


def report_runs() -> list[RunSpec]:
    """The report tests' grid (2 modes x 2 LRs x 2 beta2 x 3 seeds); the first run has a hostile name."""
    runs = grid_runs(REPORT_MODES, REPORT_LRS, REPORT_BETA2, REPORT_SEEDS)
    first = runs[0]
    runs[0] = RunSpec(first.mode, first.lr, first.beta2, first.seed, first.loss, display_name=f"run {HOSTILE}")
    return runs


def write_campaign(
    repo: Path,
    name: str,
    runs: Iterable[RunSpec],
    *,
    epochs: int = 4,
    campaign_json: bool = True,
    manifest: bool = True,
    audit: bool | None = None,
    absolute_paths: bool = True,
    purpose: str = "report test",
    description: str = "a synthetic campaign",
    presets: Sequence[str] = (),
    steps_per_epoch: int = 0,
) -> Path:
    """Write `repo/results/<name>` (and the cache manifest) and return the campaign directory.

    `audit` None writes no audit record; True or False writes one (of the runs stage, which the
    report shows) that passed or failed. `steps_per_epoch` 0 records one step per run; more
    records every step, a falling loss curve, as the trainer does.
    """
    campaign = repo / "results" / name
    paths = CampaignPaths(campaign)
    cache_dir = repo / "results" / "caches" / "synthetic"
    runs = list(runs)
    for spec in runs:
        run_dir = paths.run(spec.run_id).directory
        _write_run(run_dir, spec, epochs, repo, cache_dir, absolute_paths, purpose, steps_per_epoch)
    if manifest:
        cache_dir.mkdir(parents=True, exist_ok=True)
        (cache_dir / "manifest.json").write_text(json.dumps(MANIFEST, indent=2))
    if campaign_json:
        paths.campaign_json.write_text(json.dumps(_campaign_info(name, runs, presets, description), indent=2))
    if audit is not None:
        paths.audit_runs.write_text(json.dumps(_audit(audit), indent=2))
    return campaign


def _recipe(spec: RunSpec, run_dir: Path, cache_dir: Path, repo: Path, absolute: bool, purpose: str) -> Recipe:
    """The demo preset at this run's grid point, with the paths the workflow would give it."""
    base = load_recipe("demo")
    overrides: list[tuple[str, Any]] = [
        ("optimizer.lr", spec.lr),
        ("optimizer.beta2", spec.beta2),
        ("runtime.seed", spec.seed),
        ("runtime.purpose", purpose),
        ("data.cache_dir", str(cache_dir if absolute else cache_dir.relative_to(repo))),
        ("runtime.output_dir", str(run_dir if absolute else run_dir.relative_to(repo))),
    ]
    if spec.mode.startswith("packed-"):
        overrides.append(("decentralized", {"num_models": int(spec.mode.rsplit("-", 1)[1])}))
    return recipe_from_dict(base.model_dump(mode="json"), [*overrides, *spec.overrides])


FAILED_LOG = "RuntimeError: CUDA out of memory (a fabricated crash)"
"""The last line of a failed run's job log."""
STEPS_PER_EPOCH = 24


def diverged_record(spec: RunSpec) -> dict[str, Any]:
    """The `diverged` object of a diverged run's results.json and last metrics record (the trainer's contract)."""
    step = spec.diverged_at
    return {
        "step": step,
        "tokens": step * EPOCH_TOKENS // STEPS_PER_EPOCH,
        "epoch": (step - 1) // STEPS_PER_EPOCH + 1,
        "rule": "non-finite",
        "last_finite_loss": 7.5,
        "detail": f"10 consecutive steps had non-finite loss up to step {step}",
    }


def _write_run(
    run_dir: Path,
    spec: RunSpec,
    epochs: int,
    repo: Path,
    cache_dir: Path,
    absolute: bool,
    purpose: str,
    steps_per_epoch: int = 0,
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    files = run_paths(run_dir)
    save_recipe(_recipe(spec, run_dir, cache_dir, repo, absolute, purpose), files.recipe)
    if spec.diverged_at is not None:
        epochs = (spec.diverged_at - 1) // STEPS_PER_EPOCH  # the epochs it finished before diverging
    if spec.failed:
        epochs = 1
    records = [_epoch_record(spec, epoch, epochs, steps_per_epoch or STEPS_PER_EPOCH) for epoch in range(1, epochs + 1)]
    if steps_per_epoch:
        lines = [
            json.dumps(record)
            for epoch in records
            for record in [*_step_records(spec, epoch["epoch"], steps_per_epoch, epochs), epoch]
        ]
    else:
        steps = [
            {
                "type": "step",
                "step": 1,
                "loss": spec.loss + 3,
                "accuracy": 0.05,
                "lr": spec.lr,
                "grad_norm": 1.0,
                "skipped": False,
            }
        ]
        lines = [json.dumps(record) for record in steps + records]
    if spec.diverged_at is not None:
        lines.append(json.dumps({"type": "diverged", **diverged_record(spec)}))
    files.metrics.write_text("\n".join(lines) + "\n")
    jobs = [_job(spec, "train", epoch, 0.5) for epoch in range(1, epochs + 1)]
    if not spec.failed:
        jobs.append(_job(spec, "validate", None, 1.5 if spec.diverged_at is None else 0.1))
    (run_dir / JOB_RECORDS).write_text("".join(json.dumps(job) + "\n" for job in jobs))
    if spec.failed:
        log = run_dir.parents[1] / "logs" / "runs" / spec.run_id / "slices" / "epoch-2.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"training {spec.run_id}\nTraceback (most recent call last):\n{FAILED_LOG}\n")
        return
    if spec.diverged_at is not None:
        files.results.write_text(
            json.dumps(
                _results(spec, epochs)
                | {
                    "status": "diverged",
                    "loss": None,
                    "perplexity": None,
                    "accuracy": None,
                    "targets": None,
                    "diverged": diverged_record(spec),
                    "validation": "not run: the run diverged",
                    "validated": None,
                },
                indent=2,
            )
        )
        return
    best = min(records, key=lambda record: record["val_loss"])
    keys = ("epoch", "step", "tokens", "val_loss", "val_accuracy")
    files.best.write_text(json.dumps({**{k: best[k] for k in keys}, "weights": None}))
    files.train_log.write_text(f"########## job local-{spec.seed} ##########\n")
    files.results.write_text(json.dumps(_results(spec, epochs), indent=2))


def _job(spec: RunSpec, kind: str, epoch: int | None, seconds: float) -> dict[str, Any]:
    """A jobs.jsonl line as ebd2n.job_time writes it."""
    return {
        "job": f"local-{spec.seed}-{kind}-{epoch}",
        "kind": kind,
        "epoch": epoch,
        "started": VALIDATED,
        "seconds": seconds,
    }


def _results(spec: RunSpec, epochs: int) -> dict[str, Any]:
    return {
        "run": spec.display_name or spec.run_id,
        "mode": spec.mode,
        "lr": spec.lr,
        "beta2": spec.beta2,
        "seed": spec.seed,
        "status": "complete",
        "loss": spec.loss,
        "perplexity": math.exp(spec.loss),
        "accuracy": 0.3,
        "targets": TARGETS,
        "tokens": epochs * EPOCH_TOKENS,
        "recipe_identity": hashlib.sha256(spec.run_id.encode()).hexdigest(),
        "cache_identity": CACHE_IDENTITY,
        "source_hash": SOURCE_HASH,
        "job_ids": [f"local-{spec.seed}-a", f"local-{spec.seed}-b"],
        "environment": ENVIRONMENT,
        "validated": VALIDATED,
        "wall_seconds": 1.5,
    }


def _step_records(spec: RunSpec, epoch: int, per_epoch: int, epochs: int) -> list[dict[str, Any]]:
    """One epoch's step records: a noisy loss falling towards the final loss, a warmed-up, decaying LR."""
    total = per_epoch * epochs
    records = []
    for step in range((epoch - 1) * per_epoch + 1, epoch * per_epoch + 1):
        done = step / total
        records.append(
            {
                "type": "step",
                "step": step,
                "loss": spec.loss + 3.0 * (1 - done) ** 2 + 0.05 * math.sin(step * 1.7 + spec.seed),
                "accuracy": 0.05 + 0.25 * done,
                "lr": spec.lr * min(1.0, 10 * done) * (1 - 0.9 * done),
                "grad_norm": 1.0 + 0.5 * math.cos(step),
                "skipped": False,
            }
        )
    return records


def _epoch_record(spec: RunSpec, epoch: int, epochs: int, per_epoch: int = 24) -> dict[str, Any]:
    """Subset validation falling towards the final loss, with plausible throughput and memory."""
    val_loss = spec.loss + 2.0 * (1 - epoch / epochs) ** 2 + 0.01 * math.cos(spec.seed + epoch)
    return {
        "type": "epoch",
        "epoch": epoch,
        "step": epoch * per_epoch,
        "tokens": epoch * EPOCH_TOKENS,
        "train_loss": val_loss + 0.02,
        "val_loss": val_loss,
        "val_accuracy": 0.1 + 0.2 * epoch / epochs,
        "lr": spec.lr,
        "tokens_per_s": 50_000.0 + epoch,
        "batches_per_s": 48.0,
        "wall_s": 0.5,
        "memory": {"cpu": {"allocated": 200_000_000, "peak": 250_000_000 + epoch}},
        "skipped_steps": 0,
    }


def _campaign_info(name: str, runs: list[RunSpec], presets: Sequence[str], description: str) -> dict[str, Any]:
    """campaign.json as `ebd2n collect` writes it."""
    modes = list(dict.fromkeys(spec.mode for spec in runs))
    return {
        "campaign": name,
        "description": description,
        "grid": {
            "presets": list(presets) or None,
            "modes": modes,
            "learning_rates": {m: sorted({s.lr for s in runs if s.mode == m}) for m in modes},
            "beta2": sorted({spec.beta2 for spec in runs}),
        },
        "seeds": sorted({spec.seed for spec in runs}),
        "runs_planned": len(runs),
        "runs_finished": len(runs),
        "source_hash": SOURCE_HASH,
        "cache_identities": [CACHE_IDENTITY],
        "base_recipes": {
            base: {"path": f"frozen/recipes/{base}.yaml", "identity": "b" * 64} for base in presets or ["base"]
        },
        "created": "2026-09-01T10:00:00Z",
    }


def _audit(passed: bool) -> dict[str, Any]:
    violations = [] if passed else ["runs/x: no finished run"]
    return {
        "passed": passed,
        "checks": [
            {
                "name": "every grid point has every seed",
                "scope": "campaign",
                "passed": passed,
                "violations": violations,
            },
            {"name": "run files present and readable", "scope": "runs", "passed": True, "violations": []},
        ],
    }
