"""A quiet console for ebd2n campaigns: Snakemake's `--logger ebd2n` (the repository's profiles set it).

One line per finished job (time, jobs done of all, rule, run), every error in full with the
failed job's log, warnings, and Snakemake's job table at the start. The full record stays in
.snakemake/log/. Snakemake finds this module by its name (snakemake_logger_plugin_<name>), so
it is a top-level package of its own; it imports nothing from ebd2n and nothing heavy.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

_ERRORS = {LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR, LogEvent.ERROR}
_SAID = {"Nothing to be done (all requested files are present and up to date)."}
"""Plain INFO messages still worth a line."""


class LogHandler(LogHandlerBase):
    """Writes the quiet console to stderr, where Snakemake's own console goes."""

    def __post_init__(self) -> None:
        self.jobs: dict[int, str] = {}
        self.finished: list[str] = []

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

    def line(self, record: logging.LogRecord) -> str | None:
        """What the console shows for one record, or None."""
        event = getattr(record, "event", None)
        if event == LogEvent.JOB_INFO:
            self.jobs[record.jobid] = job_label(record.rule_name, record.wildcards)
        elif event == LogEvent.JOB_FINISHED:
            self.finished.append(self.jobs.pop(record.job_id, f"job {record.job_id}"))
        elif event == LogEvent.PROGRESS:
            done = ", ".join(self.finished)
            self.finished = []
            return f"[{time.strftime('%H:%M:%S')}] {record.done}/{record.total} done  {done}".rstrip()
        elif event == LogEvent.RUN_INFO:
            return record.getMessage()
        elif event in _ERRORS:
            return error_text(record)
        elif event is None and (record.levelno >= logging.WARNING or record.getMessage() in _SAID):
            return record.getMessage()
        return None


def job_label(rule: str, wildcards: dict[str, Any] | None) -> str:
    """'train_final demo/packed-4-lr0.001-beta20.95-seed42 epoch 2': rule, campaign/run, the rest."""
    wildcards = dict(wildcards or {})
    where = "/".join(str(wildcards.pop(key)) for key in ("campaign", "run") if key in wildcards)
    rest = " ".join(f"{key} {value}" for key, value in wildcards.items())
    return " ".join(part for part in (rule, where, rest) if part)


def error_text(record: logging.LogRecord) -> str:
    """An error in full: Snakemake's own account of it, then each log file of the failed job."""
    from snakemake.logging import DefaultFormatter

    return "\n" + DefaultFormatter(quiet=set(), show_failed_logs=True).format(record) + "\n"
