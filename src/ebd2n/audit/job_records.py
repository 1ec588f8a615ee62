"""The runs' job records (jobs.jsonl, ebd2n.job_time), on which every page's cost rests: the audit
holds them to what the run's own records say it trained. Every slice a finished run trained has a
training job's line, each training line ends at a slice the run trained, a line's pack is no larger
than the pack the run recorded for that slice (packs.json), and the run has its validation's line.

A trainer writes its line before the slice's completion record, so a kill leaves either both or a
slice that the same command trains again (and records again: both jobs cost their time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ebd2n.audit.checks import Check
from ebd2n.audit.runs import RunView
from ebd2n.errors import UserError
from ebd2n.job_time import recorded_jobs
from ebd2n.layout import JOB_RECORDS, PACKS
from ebd2n.train.pack_record import read_packs
from ebd2n.train.plan import SlicePlan
from ebd2n.train.records import DIVERGENCE, Divergence


def check_job_records(views: Iterable[RunView], plans: Mapping[str, SlicePlan | None]) -> Check:
    """Each finished run's job lines against its slices and packs (an unreadable plan is check_plans')."""
    check = Check("each slice a run trained has its job's record, as its slices and packs say (the cost)")
    unrecorded = 0
    for view in views:
        plan = plans.get(view.run.base)
        if not view.finished or plan is None:
            continue
        if JOB_RECORDS not in view.files:  # trained by an ebd2n that kept none: the pages count its epochs
            unrecorded += 1
            continue
        check.examined += 1
        check.violations += [f"{view.id}: {JOB_RECORDS}: {problem}" for problem in _problems(view, plan)]
    if unrecorded:
        check.notes.append(f"{unrecorded} finished run(s) keep no {JOB_RECORDS} (trained before ebd2n recorded jobs)")
    if not check.examined:
        check.reason = "no finished run with job records"
    return check


def _problems(view: RunView, plan: SlicePlan) -> Iterable[str]:
    jobs = recorded_jobs(view.paths.directory)
    trained, last = trained_ends(view, plan)
    lines = [job for job in jobs if job.get("kind") == "train"]
    ends = [plan.epochs if job.get("epoch") is None else job.get("epoch") for job in lines]
    for end in trained if last is not None else ():
        if end not in ends and not (end == last and any(isinstance(e, int) and e >= last for e in ends)):
            yield f"no training job's record of the slice to epoch {end}"
    try:
        packs = read_packs(view.paths.directory)
    except UserError:
        packs = {}  # check_packs names it
    for job, end in zip(lines, ends, strict=True):
        if end not in trained and not (isinstance(end, int) and end >= (last or 0) and end in plan.ends):
            yield f"job {job.get('job')} trained to epoch {end}, a slice this run did not train"
            continue
        pack = job.get("pack", 1)
        if not isinstance(pack, int) or isinstance(pack, bool) or pack < 1:
            yield f"job {job.get('job')}: pack {pack!r} is not a number of runs"
        elif pack > len(packs.get(end, [view.id])):
            recorded = len(packs.get(end, [view.id]))
            yield f"job {job.get('job')} trained to epoch {end} in a pack of {pack}; {PACKS} records {recorded}"
    if not any(job.get("kind") == "validate" for job in jobs):
        yield "no validation job's record"


def trained_ends(view: RunView, plan: SlicePlan) -> tuple[list[int], int | None]:
    """The slice ends a finished run trained to (every one of its plan, or up to the slice it
    diverged in) and the last of them (None: a divergence recorded without its epoch, by an older
    ebd2n: which slices it trained is not known). A diverged run's last records may be written by
    the job of a later slice (its own killed after final.pt), which records that slice's end."""
    diverged = Divergence.of((view.results or {}).get(DIVERGENCE))
    if diverged is None:
        return list(plan.ends), plan.epochs
    if diverged.epoch is None:
        return list(plan.ends), None
    last = min(end for end in plan.ends if end >= diverged.epoch)
    return [end for end in plan.ends if end <= last], last
