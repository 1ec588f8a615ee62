"""What each job of a campaign asks the scheduler for, and how that reads in SLURM's names.

The campaign file's `resources:` holds scopes (`default`, `prepare`, a mode, a preset,
`<preset>-<mode>`); a job takes each field from the most specific scope that sets it. The workflow
asks here for every job's resources (`scope_resources`) and for the SLURM executor plugin's names
(`Resources.slurm`), so no rule file spells the mapping.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ebd2n.campaign.runs import BASE

PREPARE = "prepare"
"""The data-cache job's scope."""
DEFAULT = "default"
"""The scope every job falls back to."""


@dataclass(frozen=True)
class Resources:
    """What one job asks the scheduler for."""

    gpus: int = 0
    """GPUs per job (0: CPU only); a job that sets gpus_per_node has nodes x gpus_per_node instead."""
    nodes: int = 1
    """Nodes the job spans (SLURM --nodes); above 1 needs gpus_per_node."""
    gpus_per_node: int | None = None
    """GPUs on each of the job's nodes (SLURM --gres=gpu:<n>); None: the job asks for `gpus` on one node."""
    minutes: int = 30
    """Wall-time limit of one job."""
    mem_mb: int = 4000
    """Memory per job in MB."""
    cpus: int = 1
    """CPU cores per job."""
    partition: str | None = None
    """SLURM partition (None: the cluster's default)."""
    account: str | None = None
    """SLURM account (None: the user's default)."""

    @property
    def job_gpus(self) -> int:
        """Every GPU of the job, over all its nodes (the local slots it takes, the processes it may start)."""
        return self.gpus if self.gpus_per_node is None else self.nodes * self.gpus_per_node

    @property
    def slurm(self) -> dict[str, Any]:
        """This job's resources in the SLURM executor plugin's names (the workflow's `resources:`).

        A job with gpus_per_node asks for its nodes and `gres` (per node) instead of `gpus` (per job,
        which SLURM may spread unevenly); one over several nodes is an `mpi` job to the plugin, whose
        command runs in the batch script, not in a one-task step, so that `ebd2n.launch` can `srun`
        one torchrun agent on each node."""
        names: dict[str, Any] = {"runtime": self.minutes, "mem_mb": self.mem_mb}
        if self.gpus_per_node is None and self.gpus:
            names["gpu"] = self.gpus
        if self.gpus_per_node is not None:
            names |= {"nodes": self.nodes, "gres": f"gpu:{self.gpus_per_node}"}
        if self.nodes > 1:
            # one task (a torchrun agent) per node; tasks_per_gpu 0 keeps the plugin from asking
            # for `tasks` tasks per GPU
            names |= {"mpi": "srun", "tasks": self.nodes, "tasks_per_gpu": 0}
        for name, value in (("slurm_partition", self.partition), ("slurm_account", self.account)):
            if value:
                names[name] = value
        return names

    @property
    def gpus_text(self) -> str:
        """'4 GPU(s)', or '2 node(s) x 4 GPU(s)' for a job laid out over nodes."""
        if self.gpus_per_node is None:
            return f"{self.gpus} GPU(s)"
        return f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s)"


def scope_name(base: str, mode: str) -> str:
    """A run job's most specific scope: its mode, or `<preset>-<mode>` in a scaling campaign."""
    return mode if base == BASE else f"{base}-{mode}"


def scope_resources(scopes: Mapping[str, Mapping[str, Any]], base: str, mode: str | None) -> Resources:
    """Resources of a job: each field from the most specific scope that sets it.

    Scopes, most specific first: `<preset>-<mode>`, `<preset>`, `<mode>`, `default`; the
    data-cache job (mode None) reads `prepare`, then `default`.
    """
    if mode is None:
        order = [PREPARE, DEFAULT]
    else:
        preset = [] if base == BASE else [f"{base}-{mode}", base]
        order = [*preset, mode, DEFAULT]
    merged: dict[str, Any] = {}
    for scope in reversed(order):
        merged.update(scopes.get(scope, {}))
    return Resources(**merged)


def job_settings(scopes: Iterable[Resources], of_job: Callable[[Any], Resources] | None) -> tuple[dict[str, Any], Any]:
    """SLURM resources in the plugin's names, and threads: each a constant when every job of the
    scopes asks the same (Snakemake then evaluates nothing per job, which keeps planning 324 runs
    quick), else a function of the job's wildcards that asks `of_job(wildcards)`."""
    scopes = list(scopes)
    names = {name: None for scope in scopes for name in scope.slurm}
    resources = {
        name: _constant_or_per_job(
            [scope.slurm.get(name) for scope in scopes], lambda r, name=name: r.slurm.get(name), of_job
        )
        for name in names
    }
    threads = _constant_or_per_job([scope.cpus for scope in scopes], lambda r: r.cpus, of_job)
    return resources, threads


def _constant_or_per_job(values: list, field: Callable[[Resources], Any], of_job: Callable[[Any], Resources] | None):
    if len(set(values)) == 1 or of_job is None:
        return values[0]
    return functools.partial(_per_job, field=field, of_job=of_job)


def _per_job(wildcards: Any, field: Callable[[Resources], Any], of_job: Callable[[Any], Resources]) -> Any:
    return field(of_job(wildcards))
