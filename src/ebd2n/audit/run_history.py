"""A run's history check: metrics.jsonl and train.log tell one trainer's story, once and in order."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ebd2n.audit.checks import Check
from ebd2n.audit.run_memo import remembered
from ebd2n.audit.runs import RunView, json_object
from ebd2n.campaign.grid import Grid
from ebd2n.campaign.horizons import parent_run
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import LINEAGE, METRICS, TRAIN_LOG, RunPaths
from ebd2n.train.budget import budget_of
from ebd2n.train.records import Metrics, RecordType
from ebd2n.train.runlog import CLOSING_LINES

_JOB_HEADER = "########## job "
_COUNTED = re.compile(r"(step|epoch) (\d+)[/:]")
"""A train.log line counting steps (`step 8/64 | ...`, `step 9: non-finite ...`) or epochs (`epoch 1/2 | ...`)."""


def check_history(views: list[RunView], memory: HashMemory, grid: Grid) -> Check:
    """metrics.jsonl is one run's history: every step once and in order, every epoch once."""
    check = Check(f"{METRICS} and {TRAIN_LOG} hold one consistent history")
    for view in views:
        if view.finished:
            _, problems = remembered(view, memory, check.name, lambda view=view: (True, list(_problems(view, grid))))
            check.examined += 1
            check.violations += [f"{view.id}: {p}" for p in problems]
    return check


def _problems(view: RunView, grid: Grid) -> Iterable[str]:
    """The run's history problems (its metrics.jsonl and train.log read in full)."""
    if METRICS not in view.hashes or view.recipe is None:
        return
    metrics = Metrics(view.paths.metrics)
    records = metrics.records
    if metrics.problem:
        yield f"{METRICS}: {metrics.problem}"
    steps = [r.get("step") for r in metrics.of_type(RecordType.STEP)]
    epochs = [r.get("epoch") for r in metrics.of_type(RecordType.EPOCH)]
    if steps != list(range(1, len(steps) + 1)):
        yield f"{METRICS}: steps are not 1..N once each in order (two trainers, or an edit)"
    budget = budget_of(view.recipe)
    diverged = records[-1] if metrics.divergence_is_last else {}  # the run stopped there
    last_epoch, last_step = diverged.get("epoch", budget.epochs + 1) - 1, diverged.get("step", budget.total_steps)
    if epochs != list(range(1, last_epoch + 1)):
        yield f"{METRICS}: epoch records {_span(epochs)}, expected 1..{last_epoch} once each"
    if steps and len(steps) != last_step:
        yield f"{METRICS}: {len(steps)} step records, the {'decision' if diverged else 'budget'} has {last_step}"
    if TRAIN_LOG in view.hashes:
        blocks = log_blocks(view.paths.train_log.read_text(encoding="utf-8", errors="replace"))
        jobs = {job for job, _ in blocks}
        missing = [job for job in (view.results or {}).get("job_ids") or [] if job not in jobs]
        if missing and grid.horizons:
            missing = [job for job in missing if job not in trunk_jobs(view, grid)]
        if missing:
            yield f"{TRAIN_LOG}: no block for job(s) {', '.join(missing)}"
        for job, foreign in overlapping_blocks(blocks):
            yield f"{TRAIN_LOG}: the block of job {job} overlaps another trainer's in time ({foreign})"


def trunk_jobs(view: RunView, grid: Grid) -> set[str]:
    """The jobs that trained a branched run's trunk, which are its parent's, not its own: those its
    lineage.json recorded when it branched (ebd2n.train.branch); for a branch made before it
    recorded them, those of the train.log of the parent its grid gives it (and of that parent's own
    parent), followed only where each run's lineage.json names that parent."""
    lineage, _ = json_object(view.paths.lineage) if LINEAGE in view.hashes else (None, None)
    recorded = (lineage or {}).get("jobs")
    if isinstance(recorded, list):
        return {str(job) for job in recorded}
    jobs: set[str] = set()
    run, paths = view.run, view.paths
    while (parent := parent_run(grid, run)) is not None:
        lineage, _ = json_object(paths.lineage) if paths.lineage.is_file() else (None, None)
        parent_paths = RunPaths(paths.directory.parent / parent.id)
        if (lineage or {}).get("parent") != parent.id or not parent_paths.train_log.is_file():
            return jobs
        jobs |= {job for job, _ in log_blocks(parent_paths.train_log.read_text(encoding="utf-8", errors="replace"))}
        run, paths = parent, parent_paths
    return jobs


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
