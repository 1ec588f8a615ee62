"""A training job from start to the run's pages: what `ebd2n train` and `ebd2n train-pack` do, in
the package so the command line only parses and prints.

The trainer hands each job's record to the run's live page, rewritten at slice ends and when a job
fails; the job that completed the run writes its final page and removes the live one. Those pages
are the report layer's, above this one, so the caller hands them in (`pages`, a RunPages:
ebd2n.commands gives ebd2n.report.run_pages.RunDashboards).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ebd2n.errors import UserError
from ebd2n.layout import DASHBOARD, FINAL


class LivePage(Protocol):
    """A run's live page, given to the trainer as its `on_record`."""

    def __call__(self, record: dict[str, Any]) -> None: ...

    def write(self, state: str | None = None) -> Path | None: ...

    def failed(self, error: BaseException) -> None: ...


class RunPages(Protocol):
    """The pages a job keeps in a run directory: the live one while the run trains, the final one after."""

    def live(self, run_dir: Path) -> LivePage: ...

    def final(self, run_dir: Path) -> Path: ...

    def remove_live(self, run_dir: Path) -> None: ...


def train_job(
    recipe: str | list[str],
    overrides: list[str],
    resume: Path | None = None,
    until_epoch: int | None = None,
    progress: bool = False,
    wait: bool = False,
    plan: Path | None = None,
    branch_from: Path | None = None,
    *,
    pages: RunPages,
) -> str | None:
    """Train a run (or one slice of it) and, once the run is complete, write its dashboard; return
    one line on what the job left (None on a torchrun process other than the main one)."""
    from ebd2n.config import load_recipe, recipe_source
    from ebd2n.provenance import is_main_process
    from ebd2n.train.plan import read_slice_plan
    from ebd2n.train.run_state import done_already

    loaded = load_recipe(recipe, overrides)
    slice_plan = None if plan is None else read_slice_plan(plan)
    if plan is not None and slice_plan is None:
        raise UserError(f"--plan {plan}: no such file")
    run_dir = Path(loaded.runtime.output_dir)
    if done_already(loaded, until_epoch, resume):  # known from its records, without importing torch
        return _train_summary(run_dir, False, until_epoch) if is_main_process() else None

    from ebd2n.provenance import job_usage
    from ebd2n.train import train
    from ebd2n.train.runlog import append_to_train_log

    live = pages.live(run_dir)
    try:
        trained = train(
            loaded,
            config_path=recipe_source(recipe),
            resume=resume,
            until_epoch=until_epoch,
            progress=progress,
            wait=wait,
            slice_ends=slice_plan.ends if slice_plan else (),
            on_record=live,
            branch_from=branch_from,
        )
    except Exception as error:
        live.failed(error)
        raise
    if not is_main_process():  # torchrun: the main process writes and speaks for the run
        return None
    _keep_pages(run_dir, trained, until_epoch, live, pages)
    if trained:
        append_to_train_log(run_dir, job_usage())
    return _train_summary(run_dir, trained, until_epoch)


def _keep_pages(run_dir: Path, trained: bool, until_epoch: int | None, live: LivePage, pages: RunPages) -> None:
    """The run's pages after a job: the final one once the run is complete (this job completed it, or
    a killed job left it without), else the live one of the slice this job trained. Only a job that
    trained writes train.log: a finished run's may be validated and hashed already (a job run again
    beside its validation writes the missing page and nothing else)."""
    from ebd2n.train.runlog import append_to_train_log

    if (run_dir / FINAL).is_file() and (trained or not (run_dir / DASHBOARD).is_file()):
        page = pages.final(run_dir)
        pages.remove_live(run_dir)
    elif trained:
        page = live.write(f"trained to epoch {until_epoch}, where this slice ended")
    else:
        return
    if trained and page is not None:
        append_to_train_log(run_dir, f"dashboard {page}")


def train_pack_job(
    run_dirs: list[Path],
    until_epoch: int | None = None,
    wait: bool = False,
    plan: Path | None = None,
    record: Path | None = None,
    *,
    pages: RunPages,
) -> list[str]:
    """Train resolved runs (each directory's recipe) as one pack (ebd2n.train.pack_trainer), each
    with its live page as `ebd2n train` keeps it (each run that trained records its share of the
    job's time as it finishes: ebd2n.train.slice_run); each run this job completed gets its
    dashboard, and `record` (the workflow's output) names the members once all is written; one line
    per run on what the job left, then the job's usage."""
    from ebd2n.config import load_recipe
    from ebd2n.layout import RunPaths
    from ebd2n.provenance import job_usage
    from ebd2n.train.budget import budget_of
    from ebd2n.train.pack_record import record_pack_job
    from ebd2n.train.pack_trainer import train_pack
    from ebd2n.train.plan import read_slice_plan
    from ebd2n.train.runlog import append_to_train_log

    run_dirs = [Path(run_dir) for run_dir in run_dirs]
    recipes = []
    for run_dir in run_dirs:
        path = RunPaths(run_dir).recipe
        if not path.is_file():
            raise UserError(f"{path}: no such file; a packed run is a resolved run directory (ebd2n resolve)")
        recipes.append(load_recipe(path))
        if Path(recipes[-1].runtime.output_dir).resolve() != run_dir.resolve():
            raise UserError(f"{path}: runtime.output_dir is {recipes[-1].runtime.output_dir}, not this directory")
    slice_plan = None if plan is None else read_slice_plan(plan)
    if plan is not None and slice_plan is None:
        raise UserError(f"--plan {plan}: no such file")
    lives = [pages.live(run_dir) for run_dir in run_dirs]
    try:
        trained = train_pack(recipes, until_epoch, slice_plan.ends if slice_plan else (), wait, on_records=lives)
    except Exception as error:
        for live in lives:
            live.failed(error)
        raise
    lines = []
    for run_dir, did, live in zip(run_dirs, trained, lives, strict=True):
        _keep_pages(run_dir, did, until_epoch, live, pages)
        lines.append(_train_summary(run_dir, did, until_epoch))
    usage = job_usage()
    for run_dir, did in zip(run_dirs, trained, strict=True):
        if did:
            append_to_train_log(run_dir, usage)
    if record is not None:
        record_pack_job(record, run_dirs, until_epoch or budget_of(recipes[0]).epochs)
    return [*lines, usage]


def _train_summary(run_dir: Path, trained: bool, until_epoch: int | None) -> str:
    """One line on what the job left: final.pt, or how far the run is (the same command goes on),
    and the last subset loss."""
    from ebd2n.train.records import RunRecord

    metrics = RunRecord(run_dir).metrics
    done = "done" if trained else "done already (nothing trained)"
    diverged = metrics.divergence
    if diverged is not None:
        return f"{done}: the run {diverged.describe()}; {run_dir / FINAL} holds its weights there"
    last = metrics.epochs[-1]
    loss = (
        f"validation loss {last['val_loss']:.4f}, accuracy {100 * last['val_accuracy']:.2f} % "
        f"(epoch {last['epoch']} subset)"
    )
    if (run_dir / FINAL).is_file():
        return f"{done}: {run_dir / FINAL}, dashboard {run_dir / DASHBOARD}; {loss}"
    return f"slice {done}: epoch {until_epoch} of {run_dir}; `ebd2n train` without --until-epoch resumes it; {loss}"
