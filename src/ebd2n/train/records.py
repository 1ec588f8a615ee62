"""What a run leaves behind, read one way: the record kinds of metrics.jsonl, the divergence
decision, a job log's start record, and a run directory's records (`RunRecord`).

Every reader of these files goes through here, so the rules for reading them are written once:
- a record line is complete only with its newline: a last line without one is being written (or
  was cut by a kill) and is left out, never an error;
- a complete line that is not a JSON object is a problem of the file, named with its line number
  (`Metrics.problem`), and the records before it still count;
- a missing file is no records, never an error.
Status reads running runs again and again, so metrics are cached per file by its (mtime, size), and
the fast scans (`epochs`, `divergence`) parse only the lines that are not step records.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from ebd2n.errors import UserError
from ebd2n.job_time import recorded_jobs
from ebd2n.jsonio import read_json
from ebd2n.layout import RunPaths
from ebd2n.train.pack_record import read_packs


class RecordType(StrEnum):
    """The kinds of metrics.jsonl records (their `type`)."""

    STEP = "step"
    EPOCH = "epoch"
    DIVERGED = "diverged"
    """The divergence decision: the last record of a run that stopped learning (`Divergence`)."""


TYPE = "type"
"""The key that names a record's kind."""
DIVERGENCE = RecordType.DIVERGED.value
"""Where every other record of a diverged run keeps its decision: results.json, run.json, final.pt's
progress (the same key as the record type)."""


@dataclass(frozen=True)
class Divergence:
    """The trainer's decision that a run diverged (ebd2n.train.divergence): at which step, in which
    epoch, by which rule and why."""

    step: int
    tokens: int | None
    epoch: int | None
    rule: str | None
    last_finite_loss: float | None
    detail: str

    @classmethod
    def of(cls, record: Any) -> Divergence | None:
        """The decision a record holds (metrics.jsonl's, results.json's `diverged`, a checkpoint's
        progress), None for anything that is not one."""
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            return None
        epoch, rule = record.get("epoch"), record.get("rule")
        return cls(
            step=record["step"],
            tokens=record.get("tokens"),
            epoch=epoch if isinstance(epoch, int) else None,
            rule=rule if isinstance(rule, str) else None,
            last_finite_loss=record.get("last_finite_loss"),
            detail=str(record.get("detail") or ""),
        )

    def record(self) -> dict[str, Any]:
        """The decision as metrics.jsonl holds it (and, under the same keys, every other record)."""
        return {TYPE: RecordType.DIVERGED.value, **asdict(self)}

    def describe(self) -> str:
        """`diverged at step 16 (non-finite)`: the words every console line and page uses."""
        return f"diverged at step {self.step} ({self.rule})"


_SCANNED = re.compile(rb'"type": ?"(epoch|diverged)"')
_STEP = re.compile(rb'"type": ?"step"')


def complete_lines(data: bytes) -> list[bytes]:
    """The record lines of a JSON-lines file's bytes: a last line without its newline is being
    written (or was cut by a kill) and is left out."""
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines.pop()
    return [line for line in lines if line.strip()]


class Metrics:
    """A run's metrics.jsonl: its records by kind, read defensively (see the module's rules)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _lines(self) -> list[bytes]:
        """The file's complete lines, read now (its bytes are never kept: a process that reads
        many runs keeps only what it derived)."""
        try:
            return complete_lines(self.path.read_bytes())
        except FileNotFoundError:
            return []

    @cached_property
    def _parsed(self) -> tuple[list[dict[str, Any]], str | None]:
        lines = self._lines()
        try:  # one call for the whole file (a long run has tens of thousands of lines)
            records = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            records = None
        if isinstance(records, list) and len(records) == len(lines) and all(isinstance(r, dict) for r in records):
            return records, None
        records = []
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                return records, f"line {number} is not a JSON record"
            if not isinstance(record, dict):
                return records, f"line {number} is not a JSON object"
            records.append(record)
        return records, None

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every readable record, in file order, up to the first unreadable line."""
        return self._parsed[0]

    @property
    def problem(self) -> str | None:
        """The first unreadable complete line, None when every line is a record."""
        return self._parsed[1]

    def of_type(self, kind: RecordType) -> list[dict[str, Any]]:
        return [record for record in self.records if record.get(TYPE) == kind]

    @property
    def steps(self) -> list[dict[str, Any]]:
        """Step records with an integer step, in file order."""
        return [record for record in self.of_type(RecordType.STEP) if isinstance(record.get("step"), int)]

    @cached_property
    def _scanned(self) -> list[dict[str, Any]]:
        """The epoch and divergence records, without parsing the many step records."""
        found = []
        for line in self._lines():
            if _SCANNED.search(line):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    found.append(record)
        return found

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """Epoch records with an integer epoch, in epoch order."""
        epochs = [r for r in self._scanned if r.get(TYPE) == RecordType.EPOCH and isinstance(r.get("epoch"), int)]
        return sorted(epochs, key=lambda record: record["epoch"])

    @property
    def divergence(self) -> Divergence | None:
        """The run's divergence decision (its last such record), None when it has none."""
        decisions = [record for record in self._scanned if record.get(TYPE) == RecordType.DIVERGED]
        return Divergence.of(decisions[-1]) if decisions else None

    @property
    def divergence_is_last(self) -> bool:
        """Whether the decision is the file's last record (no step followed it)."""
        return bool(self.records) and self.records[-1].get(TYPE) == RecordType.DIVERGED

    def step_losses(self) -> list[float]:
        """The training losses of the step records, in order, from the step lines alone."""
        losses = []
        for line in self._lines():
            if _STEP.search(line):
                try:
                    loss = json.loads(line).get("loss")
                except ValueError:
                    continue
                if isinstance(loss, int | float) and not isinstance(loss, bool):
                    losses.append(float(loss))
        return losses


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl (`path`, or a run directory's); a damaged line is a user
    error naming it."""
    path = Path(path)
    found = Metrics(RunPaths(path).metrics if path.is_dir() else path)
    if found.problem:
        raise UserError(f"{found.path}: {found.problem}")
    return found.records


_CACHE: dict[Path, tuple[tuple[int, int], Metrics]] = {}
"""Metrics by file with the (mtime, size) they were read at: a process that asks again (the
console, rewriting status pages) reads only the files that changed."""


def metrics(path: Path) -> Metrics:
    """The metrics of `path`, read again only when the file changed since this process last read it."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        _CACHE.pop(path, None)
        return Metrics(path)
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _CACHE.get(path)
    if cached is None or cached[0] != key:
        cached = _CACHE[path] = (key, Metrics(path))
    return cached[1]


JOB_START = "ebd2n job started:"
"""The first line of every job's log, written by the workflow's shell before the job's Python
starts: who runs the job (the host, its boot, the shell's pid, the SLURM job), as a lease names
its holder. A log that has it and no output belongs to a job that is starting or running until
that holder is provably gone (ebd2n.campaign.job_logs)."""
JOB_START_SHELL = (
    'printf \'%s {{"host": "%s", "boot": "%s", "pid": %s, "job": "%s", "restarts": %s, '
    '"since": "%s"}}\\n\' '
    f'\'{JOB_START}\' "$(uname -n)" "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" $$ '
    '"${{SLURM_JOB_ID:-}}" "${{SLURM_RESTART_COUNT:-0}}" "$(date +%Y-%m-%dT%H:%M:%S%z)"'
)
"""The shell command (in Snakemake's format syntax) that prints a job's start record."""


def job_start(log: Path) -> dict[str, Any] | None:
    """The start record of a job's log (its first line), None for a log without one."""
    try:
        with log.open("rb") as handle:
            first = handle.readline()
    except OSError:
        return None
    text = first.decode("utf-8", errors="replace")
    if not text.startswith(JOB_START) or not text.endswith("\n"):
        return None
    try:
        record = json.loads(text.removeprefix(JOB_START))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def log_lines(log: Path) -> list[str]:
    """A job's log without its start record: what the job itself wrote."""
    text = log.read_text(encoding="utf-8", errors="replace")
    return [line for line in text.splitlines() if not line.startswith(JOB_START)]


class RunRecord:
    """One run directory's records, each read when first asked and then kept: results.json,
    run.json, packs.json, jobs.jsonl, the metrics and their divergence decision, and whether final.pt
    and best.json are there. A damaged JSON record reads as None here (the audit names it); a
    missing one is None."""

    def __init__(self, run_dir: Path) -> None:
        self.directory = Path(run_dir)
        self.paths = RunPaths(self.directory)

    @property
    def id(self) -> str:
        return self.directory.name

    def _object(self, path: Path) -> dict[str, Any] | None:
        try:
            value = read_json(path)
        except UserError:
            return None
        return value if isinstance(value, dict) else None

    @cached_property
    def results(self) -> dict[str, Any] | None:
        """results.json: full validation's outcome and measurements."""
        return self._object(self.paths.results)

    @cached_property
    def run_json(self) -> dict[str, Any] | None:
        """run.json: who trained the run, where and how."""
        return self._object(self.paths.record)

    @cached_property
    def jobs(self) -> list[dict[str, Any]]:
        """jobs.jsonl's records (ebd2n.job_time)."""
        return recorded_jobs(self.directory)

    @cached_property
    def packs(self) -> dict[int, list[str]]:
        """Slice end -> its pack's members (packs.json; {} for a run trained alone or a damaged
        record, which the audit names)."""
        try:
            return read_packs(self.directory)
        except UserError:
            return {}

    @property
    def metrics(self) -> Metrics:
        return metrics(self.paths.metrics)

    @property
    def divergence(self) -> Divergence | None:
        """The trainer's divergence decision, from metrics.jsonl."""
        return self.metrics.divergence

    @property
    def has_final(self) -> bool:
        return self.paths.final.is_file()

    @property
    def has_best(self) -> bool:
        return self.paths.best.is_file()

    @property
    def finished(self) -> bool:
        """The run's training is complete: its final records are written, run.json last (the
        trainer and the pack trainer ask this before they take a run as finished)."""
        return self.has_final and self.has_best and self.paths.record.is_file()
