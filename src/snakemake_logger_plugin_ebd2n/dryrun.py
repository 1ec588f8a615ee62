"""The plan a dry run (`snakemake -n`) shows: Snakemake's table of jobs per rule, then which runs
would train or validate (and, for a campaign with runs over several nodes, what its training jobs ask
SLURM for), which are reused untouched, that nothing ran, and, under successive halving, which
rung decisions would run (what trains after a rung Snakemake plans only once it is decided).

Built only from Snakemake's log records: one JOB_INFO record per job it would run (rule, wildcards,
inputs, shell command). The runs reused are those the campaign's table collects (the inputs of
its collect_runs job) that no job would touch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ebd2n.layout import RECIPE, RESULTS_JSON
from snakemake_logger_plugin_ebd2n import job_campaign

SHOWN = 5
"""Run names listed per line before "and M more"."""
TRAIN_RULES = ("train_slice", "train_final", "pack_member", "pack_member_final")
PACK_RULE = "train_pack"
VALIDATE_RULES = ("validate_run",)
COLLECT_RULE = "collect_runs"
DECIDE_RULE = "decide_rung"
DONE = "dry run: nothing was executed"
SUBMITTED = ("nodes", "gres", "gpu", "tasks", "runtime", "mem_mb")
"""The resources a SLURM submission of a training job carries, shown for campaigns with jobs over several nodes."""


@dataclass
class DryRun:
    """The jobs of one dry run, as Snakemake lists them."""

    jobs: dict[str, int] = field(default_factory=dict)
    """Rule -> jobs, in the order Snakemake first lists each rule (the order it would start them)."""
    runs: dict[str, list[str]] = field(default_factory=dict)
    """Rule -> the runs (the `run` wildcard) of its jobs, each once."""
    commands: dict[str, str] = field(default_factory=dict)
    """Rule -> the shell command of its first job."""
    campaigns: set[str] = field(default_factory=set)
    collected: list[str] | None = None
    """The runs the campaign's table reads, when a collect_runs job would run."""
    requests: dict[str, dict[str, int]] = field(default_factory=dict)
    """A training job's resources ('nodes=2 gres=gpu:4 ...') -> its runs and their jobs."""
    rungs: list[str] = field(default_factory=list)
    """The rung decisions that would run: 'synchronous at epoch 1'."""
    packs: list[str] = field(default_factory=list)
    """The pack jobs that would run (execution.pack): 'to epoch 1: run, run, ...'."""

    def add(self, record: logging.LogRecord) -> None:
        """Count one JOB_INFO record."""
        rule, wildcards = record.rule_name, dict(record.wildcards or {})
        self.jobs[rule] = self.jobs.get(rule, 0) + 1
        if (campaign := job_campaign(record)) is not None:
            self.campaigns.add(campaign)
        if "run" in wildcards and str(wildcards["run"]) not in (runs := self.runs.setdefault(rule, [])):
            runs.append(str(wildcards["run"]))
        if getattr(record, "shellcmd", None):
            self.commands.setdefault(rule, " ".join(str(record.shellcmd).split()))
        if rule in TRAIN_RULES and "run" in wildcards:
            resources = dict(getattr(record, "resources", None) or {})
            request = " ".join(
                f"{name}={resources[name]}" for name in SUBMITTED if resources.get(name) not in (None, "")
            )
            runs = self.requests.setdefault(request, {})
            runs[str(wildcards["run"])] = runs.get(str(wildcards["run"]), 0) + 1
        if rule == DECIDE_RULE and {"bracket", "epoch"} <= wildcards.keys():
            self.rungs.append(f"{wildcards['bracket']} at epoch {wildcards['epoch']}")
        if rule == PACK_RULE:
            members = [Path(path).parent.name for path in record.input or [] if Path(path).name == RECIPE]
            self.packs.append(f"to epoch {wildcards.get('epoch')}: {', '.join(members)}")
        if rule == COLLECT_RULE:
            self.collected = [Path(path).parent.name for path in record.input or [] if Path(path).name == RESULTS_JSON]

    def text(self, table: str, commands: bool) -> str:
        """The plan under Snakemake's job table (`table`, as Snakemake words it, so what reads it still
        can); `commands`: each rule's first shell command too (Snakemake's -p)."""
        total = sum(self.jobs.values())
        where = f" of campaign {', '.join(sorted(self.campaigns))}" if self.campaigns else ""
        lines = [table.rstrip("\n"), "", f"Dry run{where}: {_count(total, 'job')} would run."]
        if commands:
            lines.append("The first job's command of each rule:")
            lines.extend(f"  {rule}: {command}" for rule, command in self.commands.items())
        lines.append(_listed("would train", self._runs(TRAIN_RULES)))
        if any("nodes=" in request for request in self.requests):  # a campaign with runs over several nodes
            for request, runs in self.requests.items():
                lines.append(
                    _listed(
                        f"  {_count(sum(runs.values()), 'training job')} asking {request or 'defaults'}", list(runs)
                    )
                )
        if self.packs:
            more = f"; and {len(self.packs) - SHOWN} more" if len(self.packs) > SHOWN else ""
            lines.append(
                f"  in {_count(len(self.packs), 'pack job')} (execution.pack), each training its runs' slice as one "
                f"model: {'; '.join(self.packs[:SHOWN])}{more}"
            )
        lines.append(_listed("would validate", self._runs(VALIDATE_RULES)))
        if self.collected is not None:
            touched = {run for runs in self.runs.values() for run in runs}
            lines.append(_listed("reused untouched", [run for run in self.collected if run not in touched]))
        if self.rungs:
            lines.append(
                f"successive halving: {_count(len(self.rungs), 'rung decision')} would run ({', '.join(self.rungs)}); "
                "the slices after a rung are planned once it is decided"
            )
        lines.append(DONE)
        return "\n".join(lines)

    def _runs(self, rules: tuple[str, ...]) -> list[str]:
        return list(dict.fromkeys(run for rule in rules for run in self.runs.get(rule, [])))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _listed(what: str, runs: list[str]) -> str:
    """'would train: 7 runs: a, b, c, d, e and 2 more' (in name order), or 'would train: no run'."""
    runs = sorted(runs)
    if not runs:
        return f"{what}: no run"
    more = f" and {len(runs) - SHOWN} more" if len(runs) > SHOWN else ""
    return f"{what}: {_count(len(runs), 'run')}: {', '.join(runs[:SHOWN])}{more}"
