"""A quiet console for ebd2n campaigns: Snakemake's `--logger ebd2n` (the repository's profiles set it).

One line per finished job (time, jobs done of all, rule, run; a training job whose run diverged adds
`: diverged at step 16 (non-finite)`, a rung decision the points it stopped), every error in full
with the failed job's log, warnings, Snakemake's job table at the start and the workflow's closing
line (records marked CLOSING). After a Ctrl-C (SIGINT) the jobs it stopped are no failures: one line
says the campaign was interrupted and how to resume, and no error follows it. A dry run (`-n`) shows
the table once, then the plan (dryrun.py): the runs that would train or validate, those reused, and
with -p each rule's first command. The full record stays in Snakemake's own log file. As jobs finish
it also rewrites each campaign's status page (`ebd2n status`), at most every STATUS_EVERY_S seconds.
Snakemake finds this module by its name (snakemake_logger_plugin_<name>), so it is a top-level
package of its own; it imports ebd2n only to name a job's campaign (ebd2n.layout), to read a
finished training job's divergence and a rung decision, to write status pages and in a dry run.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from snakemake.settings.enums import Quietness
from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

_ERRORS = {LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR, LogEvent.ERROR}
STATUS_EVERY_S = 20
"""Least time between two rewrites of a campaign's status page."""
_TABLE_ONLY = {Quietness.RULES, Quietness.PROGRESS}
"""Snakemake's quiet setting under which a dry run ends after its job table, listing no job."""
_SAID = {"Nothing to be done (all requested files are present and up to date)."}
"""Plain INFO messages still worth a line."""
_EARLY_OUTPUTS = (
    "Warning: the following output files of rule pack_member",
    "Warning: the following output files of rule train_final",
)
"""What Snakemake warns of every packed run's own job (workflow/rules/train.smk: its outputs are its
pack job's work) and of a diverged run's last job (its final records were written by the slice it
diverged in): outputs made after the plan was, on purpose, so not shown; the divergence is said on
its job's line instead."""
_TRAINING = {"train_slice", "train_final", "train_pack"}
"""The rules whose finished job may have seen a run diverge."""
_DECIDING = "decide_rung"
"""The rule whose finished job stops points of a successive-halving bracket (workflow/rules/train.smk)."""
NAMED_STOPS = 4
"""How many stopped points a rung decision's line names before it counts the rest."""
CLOSING = "ebd2n_closing"
"""The attribute (`logger.info(..., extra={CLOSING: True})`) marking the workflow's closing line."""
_STOPPED_BY_SIGINT = ("exit status 130", "<Signals.SIGINT: 2>")
"""How Snakemake reports a job that Ctrl-C ended: its command exited 130 (ebd2n's own status on
SIGINT) or died of the signal. A job thread may report it before the main thread runs the handler."""
INTERRUPTED = "interrupted (Ctrl-C): run the same command to resume; every run goes on from its newest checkpoint"


class LogHandler(LogHandlerBase):
    """Writes the quiet console to stderr, where Snakemake's own console goes."""

    def __post_init__(self) -> None:
        self.jobs: dict[int, str] = {}
        self.runs: dict[int, tuple[str, list[str] | str]] = {}
        """A training job's campaign and its run (a pack job: its log, whose header names its members)."""
        self.decisions: dict[int, list[str]] = {}
        """A rung decision job's output."""
        self.diverged: set[str] = set()
        self.finished: list[str] = []
        self.campaigns: set[str] = set()
        self.status_written = 0.0
        self.interrupted = self.said_interrupted = False
        self.listen_for_interrupt()
        self.plan = None
        if self.common_settings.dryrun:
            from snakemake_logger_plugin_ebd2n.dryrun import DryRun

            self.plan = DryRun()

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.line(record)
        except Exception:  # a console line must never stop the workflow
            self.handleError(record)
            return
        if line:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def listen_for_interrupt(self) -> None:
        """Note a SIGINT, then let Snakemake handle it as it would (stop, ending its jobs)."""
        previous = signal.getsignal(signal.SIGINT)
        if previous in (signal.SIG_IGN, None):  # ignored (a background job): no interrupt will come
            return

        def note(signum: int, frame: Any) -> None:
            self.interrupted = True
            if callable(previous):
                previous(signum, frame)
            else:  # the default action: end this process by the signal
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)

        try:
            signal.signal(signal.SIGINT, note)
        except ValueError:  # not the main thread: Snakemake's handling alone
            return

    def line(self, record: logging.LogRecord) -> str | None:
        """What the console shows for one record, or None."""
        event = getattr(record, "event", None)
        if self.interrupted and (event in _ERRORS or record.levelno >= logging.WARNING):
            return self.interrupted_line()
        if self.plan is not None and event in (LogEvent.JOB_INFO, LogEvent.RUN_INFO):
            return self.plan_line(record)
        if event == LogEvent.JOB_INFO:
            campaign = job_campaign(record)
            self.jobs[record.jobid] = job_label(record.rule_name, campaign, record.wildcards)
            if campaign is not None:
                self.campaigns.add(campaign)
                if record.rule_name in _TRAINING:
                    run = (record.wildcards or {}).get("run") or list(getattr(record, "log", None) or ())
                    self.runs[record.jobid] = (campaign, run)
                if record.rule_name == _DECIDING:
                    self.decisions[record.jobid] = list(getattr(record, "output", None) or ())
        elif event == LogEvent.JOB_FINISHED:
            label = self.jobs.pop(record.job_id, f"job {record.job_id}")
            note = self.divergence_note(*self.runs.pop(record.job_id, (None, [])))
            self.finished.append(label + note + decision_note(self.decisions.pop(record.job_id, [])))
        elif event == LogEvent.PROGRESS:
            done = ", ".join(self.finished)
            self.finished = []
            self.refresh_status(last=record.done == record.total)
            return f"[{time.strftime('%H:%M:%S')}] {record.done}/{record.total} done  {done}".rstrip()
        elif event == LogEvent.RUN_INFO:
            return record.getMessage()
        elif event in _ERRORS:
            text = error_text(record)
            if any(mark in text for mark in _STOPPED_BY_SIGINT):  # its report can come before the signal's handler
                self.interrupted = True
                return self.interrupted_line()
            self.refresh_status(last=True)
            return text
        elif event is None and (
            record.levelno >= logging.WARNING or record.getMessage() in _SAID or getattr(record, CLOSING, False)
        ):
            return None if record.getMessage().startswith(_EARLY_OUTPUTS) else record.getMessage()
        return None

    def divergence_note(self, campaign: str | None, run: list[str] | str) -> str:
        """`: diverged at step 16 (non-finite)` for a finished training job whose run diverged (a pack
        job: each such member, named), said once per run; nothing without the ebd2n package."""
        if campaign is None:
            return ""
        try:
            from ebd2n.layout import named_campaign
            from ebd2n.train.pack_record import pack_log_members
            from ebd2n.train.records import RunRecord
        except ImportError:
            return ""
        notes = []
        try:  # a line must never stop the workflow
            members = [run] if isinstance(run, str) else [m for log in run for m in pack_log_members(Path(log))]
            for member in members:
                if member in self.diverged:
                    continue
                divergence = RunRecord(named_campaign(campaign).run(member).directory).divergence
                if divergence is not None:
                    self.diverged.add(member)
                    described = divergence.describe()
                    notes.append(described if isinstance(run, str) else f"{member} {described}")
        except (OSError, ValueError) as error:
            sys.stderr.write(f"divergence of {run} not read: {error}\n")
        return f": {'; '.join(notes)}" if notes else ""

    def interrupted_line(self) -> str | None:
        """The one line an interrupted run shows, in place of what its stopped jobs report."""
        if self.said_interrupted:
            return None
        self.said_interrupted = True
        self.refresh_status(last=True)
        return INTERRUPTED

    def plan_line(self, record: logging.LogRecord) -> str | None:
        """A dry run: count each job; Snakemake's job table after the jobs becomes the plan."""
        if record.event == LogEvent.JOB_INFO:
            self.plan.add(record)
            return None
        if not self.plan.jobs:  # the table before the jobs are listed: the last one under --quiet
            return record.getMessage() if set(self.common_settings.quiet or ()) == _TABLE_ONLY else None
        return self.plan.text(record.getMessage(), commands=bool(self.common_settings.printshellcmds))

    def refresh_status(self, last: bool) -> None:
        """Rewrite the status page of every campaign seen, unless one was written moments ago."""
        if not last and time.monotonic() - self.status_written < STATUS_EVERY_S:
            return
        self.status_written = time.monotonic()
        try:
            from ebd2n.campaign.status import campaign_status
            from ebd2n.layout import named_campaign
            from ebd2n.report.status_page import write_status_page
        except ImportError:  # Snakemake runs without the ebd2n package: no pages
            return
        for campaign in self.campaigns:
            directory = named_campaign(campaign).directory
            try:
                write_status_page(directory, campaign_status(directory))
            except Exception as error:  # a status page must never stop the workflow
                sys.stderr.write(f"status page of {directory} not written: {error}\n")


def decision_note(outputs: list[str]) -> str:
    """`: 2 of 3 points train on; stopped by the rung decision: lr0.016-beta20.99` for a finished rung
    decision job (its output, ebd2n.campaign.rung_decision); nothing without the package or the file."""
    try:
        from ebd2n.campaign.rung_decision import read_decision
        from ebd2n.errors import UserError
    except ImportError:
        return ""
    try:  # a line must never stop the workflow
        # Snakemake names an output with its flags: "results/…/rung-1-….json (update)"
        decisions = [read_decision(Path(output.split(" (", 1)[0])) for output in outputs]
    except (OSError, ValueError, UserError) as error:
        return f": decision not read ({error})"
    notes = []
    for decision in filter(None, decisions):
        ranked = [entry["point"] for entry in decision["ranking"]]
        stopped = [point for point in ranked if point not in decision["continuing"]]
        named = ", ".join(stopped[:NAMED_STOPS]) + (
            f" and {len(stopped) - NAMED_STOPS} more" if len(stopped) > NAMED_STOPS else ""
        )
        going = f"{len(ranked) - len(stopped)} of {len(ranked)} points train on"
        notes.append(f"{going}; stopped by the rung decision: {named}" if stopped else f"{going}")
    return f": {'; '.join(notes)}" if notes else ""


def job_campaign(record: logging.LogRecord) -> str | None:
    """The campaign a job works for, read from its log's or outputs' path (ebd2n.layout); None without the package."""
    try:
        from ebd2n.layout import campaign_of_job_file
    except ImportError:
        return None
    files = [*(getattr(record, "log", None) or ()), *(getattr(record, "output", None) or ())]
    return next(filter(None, map(campaign_of_job_file, files)), None)


def job_label(rule: str, campaign: str | None, wildcards: dict[str, Any] | None) -> str:
    """'train_final demo/packed-4-lr0.001-beta20.95-seed42 epoch 2': rule, campaign/run (or base recipe), the rest."""
    wildcards = dict(wildcards or {})
    where = "/".join(filter(None, (campaign, wildcards.pop("run", None) or wildcards.pop("base", None))))
    rest = " ".join(f"{key} {value}" for key, value in wildcards.items())
    return " ".join(part for part in (rule, where, rest) if part)


def error_text(record: logging.LogRecord) -> str:
    """An error in full: Snakemake's own account of it, then each log file of the failed job."""
    from snakemake.logging import DefaultFormatter

    text = DefaultFormatter(quiet=set(), show_failed_logs=True).format(record)
    return "\n" + text.replace("\n    message: None\n", "\n") + "\n"  # a rule without a message: nothing to say
