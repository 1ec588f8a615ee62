"""The audit's checks. Each says what it examined; a check that examined nothing is "not applicable".

Run checks need no ledger: a run's own records (final.pt's embedded run id and recipe identity,
checkpoints.json, results.json's hashes of every artifact) must agree with each other and with
the files, so a swapped, edited, truncated or deleted artifact is caught on a first audit too.
"""

from __future__ import annotations

import filecmp
import math
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ebd2n.audit.runs import RunView, metric_records
from ebd2n.campaign.plans import frozen_trainer_plan
from ebd2n.campaign.resolve import run_recipe
from ebd2n.campaign.runs import Run, parse_run_id
from ebd2n.config import Recipe, load_recipe, recipe_identity
from ebd2n.data import verify_cache
from ebd2n.errors import UserError
from ebd2n.layout import (
    BEST,
    CHECKPOINT_LEDGER,
    FINAL,
    METRICS,
    REPORT_ASSETS,
    RESULTS_JSON,
    RUN_ARTIFACTS,
    SOURCE_HASH,
    TRAIN_LOG,
    TRAINING_ARTIFACTS,
    CampaignPaths,
    checkpoint_epoch,
    named_campaign,
    slice_record,
)
from ebd2n.provenance import source_hash
from ebd2n.report.campaign_report import build_report
from ebd2n.report.publish import report_files
from ebd2n.train.budget import budget_of
from ebd2n.train.plan import SlicePlan, plan_json
from ebd2n.train.retention import Retention
from ebd2n.train.runlog import CLOSING_LINES

GRID_AXES = {
    "optimizer.lr": "learning rate",
    "optimizer.beta2": "beta2",
    "runtime.seed": "seed",
    "decentralized.num_models": "mode",
}
"""Recipe keys a run id fixes: a difference there contradicts the run id, not the frozen base."""
_JOB_HEADER = "########## job "
_COUNTED = re.compile(r"(step|epoch) (\d+)[/:]")
"""A train.log line counting steps (`step 8/64 | ...`, `step 9: non-finite ...`) or epochs (`epoch 1/2 | ...`)."""


@dataclass
class Check:
    """One audit check: what it covered and what it found wrong."""

    name: str
    examined: int = 0
    unit: str = "runs"
    violations: list[str] = field(default_factory=list)
    reason: str | None = None
    """Why the check examined nothing (it is then "not applicable")."""
    notes: list[str] = field(default_factory=list)
    """What it accepted and a reader should know (a run trained again)."""

    @property
    def status(self) -> str:
        if self.violations:
            return "failed"
        return "passed" if self.examined else "not applicable"

    @property
    def scope(self) -> str:
        return f"{self.examined} {self.unit}" if self.examined else (self.reason or f"no {self.unit}")

    def record(self) -> dict:
        return {
            "name": self.name,
            "scope": self.scope,
            "examined": self.examined,
            "status": self.status,
            "passed": self.status != "failed",
            "violations": self.violations,
            "notes": self.notes,
        }


def each_run(name: str, views: Iterable[RunView], problem: Callable[[RunView], Iterable[str]]) -> Check:
    """A check applied to every finished run; `problem` yields that run's violations."""
    check = Check(name)
    for view in views:
        if not view.finished:
            continue
        check.examined += 1
        check.violations += [f"{view.id}: {p}" for p in problem(view)]
    return check


def check_grid(expected: list[Run], views: dict[str, RunView]) -> Check:
    check = Check("every grid point has every seed", len(expected))
    check.violations = [
        f"{run.id}: no finished run" for run in expected if not (run.id in views and views[run.id].finished)
    ]
    return check


def check_members(paths: CampaignPaths, expected: list[Run]) -> Check:
    """Every run directory is a run of the frozen grid (frozen/spec/): a run of another grid,
    copied in under the same campaign name, is named, whatever campaign.json says."""
    check = Check(
        f"every run directory is a run of the campaign's grid ({_where(paths, paths.frozen_spec)}/)",
        unit="run directories",
    )
    grid = {run.id for run in expected}
    for directory in sorted(paths.runs.glob("*")) if paths.runs.is_dir() else []:
        check.examined += 1
        where = _where(paths, directory)
        try:
            parse_run_id(directory.name)
        except UserError as error:
            check.violations.append(f"{where}: {error}")
            continue
        if directory.name not in grid:
            check.violations.append(
                f"{where}: not a run of the campaign's grid (no such grid point and seed in {_where(paths, paths.frozen_spec)}/)"
            )
    return check


def check_plans(paths: CampaignPaths, bases: Iterable[str], epochs_per_slice: int | dict | None) -> Check:
    """Each base's slice plan (what every job's --until-epoch came from) is the frozen trainer's
    plan of its frozen base recipe in the frozen number of epochs per slice (the frozen trainer's,
    not this checkout's: the budget code may have changed since the campaign started)."""
    check = Check("slice plans equal the frozen trainer's plan of the frozen base recipes", unit="plans")
    for base in bases:
        path, where = paths.slice_plan(base), _where(paths, paths.slice_plan(base))
        check.examined += 1
        per_slice = epochs_per_slice.get(base) if isinstance(epochs_per_slice, dict) else epochs_per_slice
        if not isinstance(per_slice, int):
            check.violations.append(f"{_where(paths, paths.freeze_record)}: records no epochs_per_slice for {base}")
            continue
        if not path.is_file():
            check.violations.append(f"{where}: missing")
            continue
        try:
            expected = plan_json(frozen_trainer_plan(paths, base, per_slice))
        except UserError as error:
            check.violations.append(f"{where}: cannot be recomputed ({error})")
            continue
        if path.read_text(encoding="utf-8", errors="replace") != expected:
            check.violations.append(
                f"{where}: differs from the frozen trainer's plan of {_where(paths, paths.base_recipe(base))} "
                f"in slices of {per_slice} epoch(s) (edited)"
            )
    return check


def _where(paths: CampaignPaths, path: Path) -> str:
    """A path of the campaign as its records name it: relative to the campaign directory."""
    return path.relative_to(paths.directory).as_posix()


def check_files(views: list[RunView]) -> Check:
    return each_run("run files present and readable", views, lambda v: v.problems)


def check_validation(views: list[RunView], cache_identity: str | None, targets: int | None) -> Check:
    def problem(view: RunView) -> Iterable[str]:
        results = view.results
        if results.get("status") == "diverged":  # an outcome, not validated (ebd2n.audit.outcomes checks the claim)
            if cache_identity is None or results.get("cache_identity") != cache_identity:
                yield f"cache identity {str(results.get('cache_identity'))[:12]}… is not the campaign's cache"
            return
        if results.get("status") != "complete":
            reason = results.get("reason")
            yield f"full validation {results.get('status', 'missing')}" + (f" ({reason})" if reason else "")
            return
        loss = results.get("loss")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss):
            yield f"full validation loss {loss!r} is not a finite number"
        if cache_identity is None or results.get("cache_identity") != cache_identity:
            yield f"cache identity {str(results.get('cache_identity'))[:12]}… is not the campaign's cache"
        if results.get("targets") != targets:
            yield f"{results.get('targets')} validation targets, the cache has {targets}"

    return each_run("complete full validation on the campaign cache", views, problem)


def check_recipes(paths: CampaignPaths, views: list[RunView], campaign: str) -> Check:
    """Each run's recipe is its frozen base at its grid point, trained in its own directory
    (results/<campaign>/runs/<run-id>, however the campaign is reached now)."""
    bases: dict[str, Recipe | str] = {}

    def problem(view: RunView) -> Iterable[str]:
        if view.recipe is None:
            return
        base = view.run.base
        if base not in bases:
            try:
                bases[base] = load_recipe(paths.base_recipe(base))
            except UserError as error:
                bases[base] = str(error)
        if isinstance(bases[base], str):
            yield f"frozen base recipe unreadable: {bases[base]}"
            return
        own, trained_in = (
            named_campaign(campaign).run(view.id).directory.as_posix(),
            paths.relative(view.recipe.runtime.output_dir),
        )
        if trained_in != own:
            yield f"runtime.output_dir {trained_in} is not the run's directory {own} (a run trained elsewhere)"
        expected = run_recipe(bases[base], view.run, view.recipe.runtime.output_dir)
        diff = _differences(expected.model_dump(mode="json"), view.recipe.model_dump(mode="json"))
        axes = [key for key in diff if key in GRID_AXES]
        others = [key for key in diff if key not in GRID_AXES]
        if axes:
            yield f"{', '.join(axes)} differ from the run id's grid point ({view.run.id})"
        if others:
            yield f"recipe differs from the frozen base outside the grid axes: {', '.join(others)}"

    return each_run("recipes equal the frozen base except grid axes, seed and paths", views, problem)


def _differences(expected: dict, actual: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(expected) | set(actual)):
        a, b = expected.get(key), actual.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def check_trainer(paths: CampaignPaths, frozen_hash: str | None, views: list[RunView]) -> Check:
    """The frozen tree still hashes to SOURCE_HASH, and every run was trained by it."""
    check = Check("every run used the frozen trainer, which is unchanged")
    if frozen_hash is None:
        check.violations.append(f"{paths.source_hash.relative_to(paths.directory)}: missing or unreadable")
    elif not paths.frozen_package.is_dir():
        check.violations.append(f"{paths.frozen_package.relative_to(paths.directory)}: missing")
    elif (actual := source_hash(paths.frozen_package)) != frozen_hash:
        check.violations.append(
            f"frozen trainer source hashes to {actual[:12]}…, not its {SOURCE_HASH} {frozen_hash[:12]}… (edited)"
        )
    for view in views:
        if view.finished:
            check.examined += 1
            used = view.results.get("source_hash")
            if used != frozen_hash:
                check.violations.append(f"{view.id}: trained by source {str(used)[:12]}…, not the frozen trainer")
    return check


def check_final(views: list[RunView], cache_identity: str | None, final_states: dict[str, dict]) -> Check:
    """final.pt names its own run and recipe, and its hash is the one its run recorded twice."""

    def problem(view: RunView) -> Iterable[str]:
        actual = view.hashes.get(FINAL)
        if actual is None:
            return  # run files check
        if (view.checkpoints or {}).get(FINAL) != actual:
            yield f"{FINAL} does not match its SHA-256 in {CHECKPOINT_LEDGER} (altered or replaced)"
        if view.recorded.get(FINAL) != actual:
            yield f"{FINAL} is not the checkpoint its full validation examined (validate it again: ebd2n validate)"
        state = final_states.get(view.id)
        if state is None:
            yield f"{FINAL}: unreadable"
            return
        if state.get("run_id") != view.id:
            yield f"{FINAL} belongs to run {state.get('run_id')!r}, not {view.id}"
        if view.recipe is not None and state.get("recipe_identity") != recipe_identity(view.recipe, cache_identity):
            yield f"{FINAL} was trained for another recipe than this run's"

    return each_run(f"{FINAL} belongs to its run and matches its recorded hashes", views, problem)


def check_artifacts(views: list[RunView]) -> Check:
    """Every file the trainer left is byte-identical to what full validation recorded."""

    def problem(view: RunView) -> Iterable[str]:
        recorded = view.recorded
        if not recorded:
            yield f"{RESULTS_JSON} records no artifact hashes; validate the run again"
            return
        for name in TRAINING_ARTIFACTS:
            if name == FINAL or name not in view.hashes:
                continue  # final.pt: its own check; missing: the files check
            if recorded.get(name) != view.hashes[name]:
                yield f"{name} changed after full validation"

    return each_run("run artifacts unchanged since full validation", views, problem)


def check_history(views: list[RunView]) -> Check:
    """metrics.jsonl is one run's history: every step once and in order, every epoch once."""

    def problem(view: RunView) -> Iterable[str]:
        if METRICS not in view.hashes or view.recipe is None:
            return
        records, bad = metric_records(view.paths.metrics)
        if bad:
            yield f"{METRICS}: {bad}"
        steps = [r.get("step") for r in records if r.get("type") == "step"]
        epochs = [r.get("epoch") for r in records if r.get("type") == "epoch"]
        if steps != list(range(1, len(steps) + 1)):
            yield f"{METRICS}: steps are not 1..N once each in order (two trainers, or an edit)"
        budget = budget_of(view.recipe)
        diverged = records[-1] if records and records[-1].get("type") == "diverged" else {}  # the run stopped there
        last_epoch, last_step = diverged.get("epoch", budget.epochs + 1) - 1, diverged.get("step", budget.total_steps)
        if epochs != list(range(1, last_epoch + 1)):
            yield f"{METRICS}: epoch records {_span(epochs)}, expected 1..{last_epoch} once each"
        if steps and len(steps) != last_step:
            yield f"{METRICS}: {len(steps)} step records, the {'decision' if diverged else 'budget'} has {last_step}"
        if TRAIN_LOG in view.hashes:
            blocks = log_blocks(view.paths.train_log.read_text(encoding="utf-8", errors="replace"))
            jobs = {job for job, _ in blocks}
            missing = [job for job in (view.results or {}).get("job_ids") or [] if job not in jobs]
            if missing:
                yield f"{TRAIN_LOG}: no block for job(s) {', '.join(missing)}"
            for job, foreign in overlapping_blocks(blocks):
                yield f"{TRAIN_LOG}: the block of job {job} overlaps another trainer's in time ({foreign})"

    return each_run(f"{METRICS} and {TRAIN_LOG} hold one consistent history", views, problem)


def log_blocks(text: str) -> list[tuple[str, list[str]]]:
    """train.log's blocks in file order: each one's job id and messages (without their time
    stamps). A requeued SLURM job opens a block per attempt, under the same id."""
    blocks: list[tuple[str, list[str]]] = []
    lines: list[str] = []
    for line in text.splitlines():
        message = line.split(" ", 2)[-1]  # after `YYYY-mm-dd HH:MM:SS`
        if message.startswith(_JOB_HEADER):
            lines = []
            blocks.append((message.split()[-2], lines))
        else:
            lines.append(message)
    return blocks


def overlapping_blocks(blocks: list[tuple[str, list[str]]]) -> list[tuple[str, str]]:
    """(job, first foreign line) of each train.log block that one trainer cannot have written alone."""
    return [(job, foreign) for job, lines in blocks if (foreign := _foreign_line(lines)) is not None]


def _foreign_line(lines: list[str]) -> str | None:
    """The first line one trainer cannot have written after the lines before it, None if none.

    A trainer appends its block in one order: its `slice:` line, steps and epochs counting up,
    checkpoints, then `slice done` (after which only its job adds its CLOSING_LINES). Two trainers
    appending to one train.log at once mix two such sequences in the later block."""
    sliced = done = False
    last = {"step": 0, "epoch": 0}
    for line in lines:
        if done and not line.startswith(CLOSING_LINES):
            return f"{line.split(' |')[0]!r} after slice done"
        if line.startswith("slice: "):
            if sliced:
                return "a second slice line"
            sliced = True
        elif line.startswith("slice done: "):
            done = True
        elif (match := _COUNTED.match(line)) is not None:
            kind, number = match.group(1), int(match.group(2))
            if not sliced or number < last[kind]:  # equal: a skipped step's line, then its progress line
                return (
                    f"{kind} {number} after {kind} {last[kind]}" if sliced else f"{kind} {number} before the slice line"
                )
            last[kind] = number
    return None


def _span(values: list) -> str:
    return f"{values[:3]}…{values[-2:]}" if len(values) > 6 else str(values)


def retention_of(recipe: Recipe) -> Retention:
    return Retention(recipe.training.checkpoint_policy, budget_of(recipe).epochs)


def slice_records(plan: SlicePlan | None) -> list[str]:
    """The slice records a run may hold: one per slice end of its plan before the last (none without
    a plan, which check_plans names)."""
    return [slice_record(epoch) for epoch in plan.ends[:-1]] if plan is not None else []


def check_retention(views: list[RunView], plans: Mapping[str, SlicePlan | None]) -> Check:
    """A run directory holds exactly its artifacts and the checkpoints its policy keeps, and its
    ledger records no checkpoint that is gone (the trainer lets go of an entry before its file)."""

    def problem(view: RunView) -> Iterable[str]:
        if view.recipe is None:
            return
        retention = retention_of(view.recipe)
        kept = retention.kept()
        allowed = {*RUN_ARTIFACTS, *kept, *slice_records(plans.get(view.run.base))}
        stray = [name for name in view.files if name not in allowed]
        if stray:
            yield f"unexpected file(s) {', '.join(stray)} (policy {retention.policy})"
        stopped = ((view.results or {}).get("diverged") or {}).get("epoch")  # a diverged run wrote none from there on
        missing = [
            name
            for name in kept
            if name not in view.files and not (isinstance(stopped, int) and (checkpoint_epoch(name) or 0) >= stopped)
        ]
        if missing:
            yield f"checkpoint(s) {', '.join(missing)} missing (policy {retention.policy} keeps them)"
        for name in kept:
            if name in view.hashes and (view.checkpoints or {}).get(name) != view.hashes[name]:
                yield f"{name} does not match its SHA-256 in {CHECKPOINT_LEDGER}"
        gone = [name for name in view.checkpoints or {} if name not in {*view.files, *missing, *RUN_ARTIFACTS}]
        if gone:
            yield f"{CHECKPOINT_LEDGER} records {', '.join(sorted(gone))}, which the run does not hold"

    return each_run(
        "run directories hold exactly what the checkpoint policy keeps, as their ledger records", views, problem
    )


def check_best(views: list[RunView]) -> Check:
    def problem(view: RunView) -> Iterable[str]:
        if view.best is None or view.recipe is None or view.best.get("epoch") is None and "diverged" in view.results:
            return  # a run that diverged in its first epoch has no best epoch
        weights = view.best.get("weights")
        retention = retention_of(view.recipe)
        if not retention.keeps_earlier():
            if weights is not None:
                yield f"{BEST} holds weights ({weights!r}) under the {retention.policy} policy"
        elif not isinstance(weights, str) or weights not in {FINAL, *retention.kept()} or weights not in view.files:
            yield f"{BEST} points at {weights!r}, which the run does not keep"

    return each_run(f"{BEST} names weights the run keeps (null under the final policy)", views, problem)


def check_cache(cache_dir: str | Path | None, cache_identity: str | None) -> tuple[Check, int | None]:
    """Re-hash every shard of the campaign's cache against its manifest; return the target count."""
    check = Check("the data cache matches its manifest", unit="caches")
    if cache_dir is None:
        check.reason = "no finished run names a cache"
        return check, None
    check.examined = 1
    try:
        cache = verify_cache(cache_dir)
    except UserError as error:
        check.violations.append(str(error))
        return check, None
    if cache.identity != cache_identity:
        check.violations.append(
            f"cache {cache_dir}: identity {cache.identity[:12]}… is not the campaign's {str(cache_identity)[:12]}… (manifest edited)"
        )
    return check, cache.validation_targets


def check_report(paths: CampaignPaths, info: dict | None) -> Check:
    """The published report equals one rebuilt from the runs and `info` (campaign.json as the
    campaign's sources make it; None: it cannot be recomputed, the file stands in), file for file,
    byte for byte."""
    check = Check("the published report equals a recomputation from the runs", unit="report files")
    published = paths.report
    if not published.is_dir():
        check.violations.append(
            f"{published.relative_to(paths.directory)}: missing; build it with `ebd2n report {paths.directory}`"
        )
        return check
    with tempfile.TemporaryDirectory(prefix="ebd2n-report-") as scratch:
        try:
            build_report(paths.directory, Path(scratch), info=info)
        except UserError as error:
            check.violations.append(f"cannot rebuild the report: {error}")
            return check
        expected = report_files(Path(scratch))
        actual = report_files(published)
        check.examined = len(expected)
        for name in sorted(expected | actual):
            where = f"{published.name}/{name}"
            if name not in actual:
                check.violations.append(f"{where}: missing")
            elif name not in expected:
                if not name.startswith(f"{REPORT_ASSETS}/"):  # an older plotly.js stays for older run pages
                    check.violations.append(f"{where}: not part of the report")
            elif not filecmp.cmp(Path(scratch) / name, published / name, shallow=False):
                check.violations.append(f"{where}: differs from a recomputation from the runs (rebuild: ebd2n report)")
    return check
