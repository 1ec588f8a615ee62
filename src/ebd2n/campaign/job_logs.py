"""What the logs of a run's jobs say: whether its newest job is running, ended with its outputs,
or failed — known from records, never guessed from a missing output.

Every job's log begins with the start record the workflow's shell writes before the job's Python
starts (ebd2n.train.records.JOB_START). A job whose log has no output beside it is running while
that record's holder lives (a trainer still importing torch, a validation job, which holds no lease)
and failed once the holder is provably gone (ebd2n.train.lease.job_gone): killed, out of memory, its
node lost. A log without a start record was written by an older workflow: it failed if it holds a
word, and an empty one is a job about to start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ebd2n.campaign.runs import parse_run_id
from ebd2n.layout import RESULTS_JSON, CampaignPaths
from ebd2n.outcomes import Outcome, run_outcome
from ebd2n.train.lease import Holder, job_gone, live_holder
from ebd2n.train.pack_record import PACK_LOG_HEADER, pack_digest, pack_log_members, read_packs
from ebd2n.train.records import JOB_START, RunRecord, job_start, log_lines

LOG_LINES = 8
"""How many of a failed job's last log lines the report shows."""
EMPTY_LOG = "(the log is empty: the job ended without a word, as a killed one does, e.g. out of memory)"


@dataclass(frozen=True)
class LastJob:
    """A run's newest job that left no output: its log, whether it still runs, and its last lines."""

    log: Path
    running: bool
    lines: list[str]
    started: float | None
    """When the job started (its start record's time), None without one."""

    @property
    def validating(self) -> bool:
        """Whether it is a validation job (its log is named after results.json)."""
        return self.log.name == Path(RESULTS_JSON).with_suffix(".log").name


class JobLogs:
    """The logs of a campaign's jobs, per run (`last`, `failure`); made once per reading of a
    campaign, as it reads the logs of pack jobs that left no record once for all runs."""

    def __init__(self, paths: CampaignPaths) -> None:
        self.paths = paths
        self._unrecorded: dict[str, list[Path]] | None = None
        self._judged: dict[str, bool] = {}

    def last(self, run_id: str) -> LastJob | None:
        """The run's newest job log under logs/runs/<run>/ (or of a pack job it trained in,
        logs/packs/...) when that job left no output (a log is named after its job's output), else
        None; with whether the job runs still and the log's last lines."""
        paths = self.paths
        logs = {*(paths.logs / paths.runs.name / run_id).rglob("*.log"), *self._pack_logs(run_id)}
        logs = sorted(logs, key=lambda path: path.stat().st_mtime)
        if not logs or _has_output(paths, logs[-1]):
            return None
        log = logs[-1]
        start = job_start(log)
        lines = [line for line in log_lines(log) if line.strip() and not line.startswith(PACK_LOG_HEADER)]
        if live_holder(paths.run(run_id).directory) is not None:  # a trainer holds the run's lease
            running = True
        elif start is not None:
            running = not self._gone(start)
        else:  # a start record being written (no newline yet) is a job starting; else an older workflow's log
            running = _starting(log)
        return LastJob(log, running, lines[-LOG_LINES:] or [EMPTY_LOG], _since(start))

    def _gone(self, start: dict) -> bool:
        """job_gone, asked once per job (a pack job's log is every member's; squeue is slow)."""
        key = json.dumps(start, sort_keys=True)
        if key not in self._judged:
            self._judged[key] = job_gone(start)
        return self._judged[key]

    def _pack_logs(self, run_id: str) -> list[Path]:
        """The logs of the pack jobs a run was recorded in (`execution.pack`) and of those that failed
        before recording it but name it in their header (ebd2n.train.pack_record.pack_log_header)."""
        paths = self.paths
        base = parse_run_id(run_id).base
        records = [
            paths.pack_record(base, end, pack_digest(members))
            for end, members in read_packs(paths.run(run_id).directory).items()
        ]
        logs = [paths.logs / record.relative_to(paths.directory).with_suffix(".log") for record in records]
        if self._unrecorded is None:
            self._unrecorded = {}
            for log in (paths.logs / paths.pack_records.name).rglob("*.log"):
                if not _has_output(paths, log):
                    for member in pack_log_members(log):
                        self._unrecorded.setdefault(member, []).append(log)
        return [log for log in logs if log.is_file()] + self._unrecorded.get(run_id, [])


def _starting(log: Path) -> bool:
    """Whether the log holds nothing yet or only the first part of a start record, its newline not
    written yet."""
    try:
        data = log.read_bytes()
    except OSError:
        return False
    return b"\n" not in data and data.startswith(JOB_START.encode()[: len(data)])


def _since(start: dict | None) -> float | None:
    """When the job of a start record started (as a lease's holder records it), None if unreadable."""
    try:
        return Holder(**start).started
    except (TypeError, ValueError):
        return None


def _has_output(paths: CampaignPaths, log: Path) -> bool:
    """Whether the job that wrote `log` (logs/<output>.log) left its output."""
    output = paths.directory / log.relative_to(paths.logs).with_suffix("")
    return any(output.parent.glob(f"{output.name}.*"))


def classify_run(
    record: RunRecord, logs: JobLogs, *, stopped: bool = False, retired: bool = False, leased: bool = False
) -> tuple[Outcome, LastJob | None]:
    """A run's outcome (ebd2n.outcomes.run_outcome) from its records and its jobs' logs, and its
    newest job that left no output (None when it has results, a trainer holds its lease (`leased`),
    or no such job). Status, collection and the audit all classify through here."""
    results = record.results
    job = logs.last(record.id) if results is None and not leased else None
    outcome = run_outcome(
        validated=None if results is None else results.get("status", Outcome.COMPLETE),  # the audit checks it
        diverged=record.divergence is not None and record.has_final,  # the trainer's decision, with its final records
        working=leased or (job is not None and job.running),
        failed=job is not None and not job.running,
        stopped=stopped,
        retired=retired,
    )
    return outcome, job
