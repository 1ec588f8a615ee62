"""What the Snakemake workflow asks of a campaign, answered by the package so that it can be tested.

`workflow/rules/common.smk` builds one `WorkflowPlan` after validating the campaign file, then one
`WorkflowInputs` of it with the workflow's reader of rung decisions; each of its `get_<thing>(wildcards)`
input functions is one call of that, with the job's wildcards. Nothing here reads a job's output but the rung
decisions and selections, which reach it through `read` and `selected` (the workflow asks the checkpoint
first, so one not made yet becomes a job). Problems are one-line UserErrors; `WorkflowInputs` raises them as
the error class it is given (Snakemake's WorkflowError). Nothing here imports Snakemake.
"""

from __future__ import annotations

import functools
import itertools
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ebd2n.campaign.confirmation import confirmation_runs, read_selection, selection_path
from ebd2n.campaign.fates import UNDECIDED, Read, bracket_records, finished_runs, run_fates, run_records
from ebd2n.campaign.file import Campaign
from ebd2n.campaign.halving import Halving
from ebd2n.campaign.horizons import parent_base, parent_run
from ebd2n.campaign.packs import Packing
from ebd2n.campaign.plans import campaign_plans, grid_search
from ebd2n.campaign.resolve import settings_option
from ebd2n.campaign.resources import Resources, job_settings
from ebd2n.campaign.runs import Run, parse_run_id, run_id_pattern
from ebd2n.campaign.search import Bracket
from ebd2n.errors import UserError
from ebd2n.train.pack_record import pack_log_header
from ebd2n.train.plan import SlicePlan


class WorkflowPlan:
    """A checked campaign with its slice plans and search, as the workflow plans it."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.paths = campaign.paths
        self.plans = campaign_plans(campaign)
        self.halving = grid_search(campaign.paths, campaign.grid, self.plans)
        self.cache = Path(next(iter(campaign.current_bases.values())).data.cache_dir)
        self.packing = (
            Packing(self.paths, campaign.grid, self.plans, self.halving, campaign.pack) if campaign.pack > 1 else None
        )

    @property
    def headline(self) -> str:
        """What the workflow plans, said first: the campaign, the file it was read from, where it goes."""
        return f"campaign {self.campaign.name} from {self.campaign.source} -> {self.campaign.directory}"

    def log_of(self, path: str | Path) -> str:
        """The log of the job writing `path`: the same path under the campaign's logs/, ending .log."""
        return str(self.paths.logs / Path(path).relative_to(self.paths.directory).with_suffix(".log"))

    def benchmark_of(self, path: str | Path) -> str:
        """The benchmark file of the job writing `path`, under the campaign's benchmarks/."""
        return str(self.paths.benchmarks / Path(path).relative_to(self.paths.directory).with_suffix(".tsv"))

    @property
    def brackets(self) -> list[str]:
        """The brackets successive halving decides in (none for the full grid)."""
        return [bracket.name for bracket in self.halving.groups] if self.halving else []

    @functools.cache  # noqa: B019 (one plan per workflow: several input functions of every job ask)
    def run(self, run_id: str) -> Run:
        """The run a job's `run` wildcard names; one of a preset or horizon the campaign does not have is refused."""
        run = parse_run_id(run_id)
        if run.base not in self.campaign.grid.bases:
            raise UserError(
                f"run {run_id}: its base recipe {run.base} is not one of {self.campaign.source}'s "
                f"({', '.join(self.campaign.grid.bases)}: grid.presets x grid.horizons)"
            )
        self.campaign.grid.settings(run)  # an axis value the grid does not have is refused too
        return run

    def resolve_settings(self, run_id: str) -> str:
        """`--settings '<json>'` for the resolve job of a run off the base of a further axis; else nothing."""
        option = settings_option(self.campaign.grid.settings(self.run(run_id)))
        return f"--settings {shlex.quote(option)}" if option else ""

    def frozen_base(self, run_id: str) -> str:
        """The frozen base recipe a run's recipe is resolved from."""
        return self._base_files(self.run(run_id).base)[0]

    def slice_plan(self, run_id: str) -> str:
        """The frozen trainer's confirmation of the slice chain of a run's base recipe."""
        return self._base_files(self.run(run_id).base)[1]

    @functools.cache  # noqa: B019 (every run of a base asks: the paths are built once per base)
    def _base_files(self, base: str) -> tuple[str, str]:
        return str(self.paths.base_recipe(base)), str(self.paths.slice_plan(base))

    def final_output(self) -> list[str]:
        """What `all` audits: the published report and every file the jobs before it leave. Under
        successive halving each run up to the first rung only (`bracket_output` adds the rest, which
        waits for decisions: while one is pending, Snakemake replaces that function's files alone)."""
        paths = self.paths
        records = [
            paths.report_index,
            paths.audit_runs,
            paths.runs_csv,
            paths.campaign_json,
            self.cache,
            paths.source_hash,
        ]
        for base in self.campaign.grid.bases:
            records += [paths.base_recipe(base), paths.slice_plan(base)]
        reached = {}
        for run in self.campaign.grid.runs():
            plan = self.plans[run.base]
            until = self.campaign.grid.search.rung_epochs(plan)[0] if self.halving else None
            records += [paths.run(run.id).recipe, *run_records(paths, run, plan, until)]
            reached[run] = until
        return [str(path) for path in records + self._pack_records(reached, None)]

    def confirmation(self, selected: Callable[[Path], dict[str, Any] | None]) -> list[str]:
        """A confirmation's selection (through `selected`, its checkpoint) and what its runs leave."""
        confirm = self.campaign.confirm
        if confirm is None:
            return []
        path = selection_path(self.paths, self.campaign.grid, confirm)
        runs = confirmation_runs(selected(path) or {"runs": []})
        files = [
            [self.paths.run(run.id).recipe, *run_records(self.paths, run, self.plans[run.base], None)] for run in runs
        ]
        return [str(file) for file in [path, *itertools.chain.from_iterable(files)]]

    def bracket_output(self, bracket: str, read: Read) -> list[str]:
        """One bracket's runs as far as their fates take them, their packs' records and its decisions."""
        group = self.halving.bracket(bracket)
        fates = self.halving.fates(group, read=read)
        reached = {run: fates.get(run.id, UNDECIDED) for run in group.runs()}
        records = bracket_records(self.paths, self.halving, group, read) + self._pack_records(reached, read)
        return [str(path) for path in records]

    def _pack_records(self, reached: dict[Run, int | None], read: Read | None) -> list[Path]:
        return [] if self.packing is None else self.packing.records(reached, read)

    def decisions(self, read: Read) -> list[str]:
        """Every rung decision of the search (none for the full grid)."""
        groups = self.halving.groups if self.halving else ()
        return [str(rung.path) for bracket in groups for rung in self.halving.walk(bracket, read=read)]

    def run_results(self, read: Read) -> list[str]:
        """The results of every run that trains its whole budget, and the decisions that say which."""
        fates = run_fates(self.campaign.grid, self.halving, read)
        finished = finished_runs(self.campaign.grid.runs(), fates)
        return [str(self.paths.run(run.id).results) for run in finished] + self.decisions(read)

    def rung_slices(self, bracket_name: str, epoch: int, digest: str, read: Read) -> list[str]:
        """The slice records, at the rung, of every seed of the points a rung decision compares; a
        decision asked for under another name than the grid gives it now is refused."""
        bracket = self.halving.bracket(bracket_name)
        points = asked_candidates(self.halving, bracket, epoch, digest, self.campaign.source, read)
        return [str(self.paths.run(run.id).slice_record(epoch)) for run in bracket.runs(points)]

    def previous_slice(self, run_id: str, epoch: int | None, read: Read) -> str | None:
        """The record of the slice before the one ending at `epoch` (None: the final slice), none for
        the first. A slice that starts at a rung must be one its point was promoted past."""
        run = self.run(run_id)
        plan = self.plans[run.base]
        try:
            previous = plan.previous(plan.epochs if epoch is None else epoch)
        except UserError as error:
            raise UserError(f"{run_id}: {error}") from None
        if previous is None:
            return self._trunk_slice(run, plan)
        self._refuse_stopped(run, previous, read)
        return str(self.paths.run(run_id).slice_record(previous))

    def _trunk_slice(self, run: Run, plan: SlicePlan) -> str | None:
        """For the first slice of a run that branches (ebd2n.campaign.horizons): the record of its
        parent's slice that trains past the branch epoch, whose checkpoint there it starts from
        (final.pt when that is the parent's last slice)."""
        parent = parent_run(self.campaign.grid, run)
        if plan.branch is None or parent is None:
            return None
        parent_plan, paths = self.plans[parent.base], self.paths.run(parent.id)
        end = next(end for end in parent_plan.ends if end >= plan.branch)
        return str(paths.final if end == parent_plan.epochs else paths.slice_record(end))

    def branch_option(self, run_id: str, epoch: int | None) -> str:
        """`--branch-from <parent run dir>` for the job that starts a branched run at its trunk's
        checkpoint; nothing for every other job."""
        run = self.run(run_id)
        plan = self.plans[run.base]
        parent = parent_run(self.campaign.grid, run)
        if plan.branch is None or parent is None or epoch != plan.branch:
            return ""
        return f"--branch-from {self.paths.run(parent.id).directory}"

    def plan_parent(self, base: str) -> str | None:
        """The frozen base recipe whose runs' trunks `base`'s runs continue (None: they start fresh)."""
        parent = parent_base(self.campaign.grid, base)
        return None if parent is None else str(self.paths.base_recipe(parent))

    def _refuse_stopped(self, run: Run, epoch: int, read: Read) -> None:
        """A run a rung up to `epoch` stopped is refused, named at the rung it stopped at."""
        if self.halving is None:
            return
        bracket = self.halving.bracket_of(run)
        if epoch not in self.halving.rungs(bracket):
            return
        for rung in self.halving.walk(bracket, read=read):
            if rung.past is not None and (run.lr, run.beta2) not in rung.past:
                raise UserError(
                    f"{run.id}: stopped at rung {rung.epoch} of bracket {bracket.name} ({rung.path}): it trains on "
                    "only once a decision promotes it (a larger search.keep, or more points)"
                )
            if rung.epoch == epoch:
                return

    def expected_ends(self, base: str) -> str:
        """The slice ends this workflow planned for a base recipe, which the frozen trainer must confirm."""
        return ",".join(map(str, self.plans[base].ends))

    @functools.cache  # noqa: B019
    def resources(self, run_id: str) -> Resources:
        """The resources of a run's training and validation jobs."""
        run = self.run(run_id)
        return self.campaign.job_resources(run.base, run.mode)

    def solo_runs(self) -> dict[str, str]:
        """The `run` wildcard of the jobs that train a run alone: every run, or under `execution.pack`
        those not synchronous (a rule's wildcard_constraints; `run` is a keyword there)."""
        return {"run": r"[^/]+" if self.packing is None else run_id_pattern(synchronous=False)}

    def packed_runs(self) -> dict[str, str]:
        """The `run` wildcard of the runs the workflow trains in packs (`execution.pack`): the synchronous ones."""
        return {"run": run_id_pattern(synchronous=True)}

    def member_pack(self, run_id: str, epoch: int | None, read: Read) -> list[str]:
        """The record of the pack job that trains a run's slice to `epoch` (None: its last); none
        when the run trained the slice alone (before the campaign packed)."""
        run = self.run(run_id)
        end = self.plans[run.base].epochs if epoch is None else epoch
        pack = self.packing.pack_of(run, end, read)
        return [] if pack is None else [str(self.packing.record_path(pack))]

    def pack_members(self, base: str, epoch: int, digest: str, read: Read) -> list[str]:
        """The runs a pack job trains (its name says which: see ebd2n.campaign.packs)."""
        return list(self.packing.pack(base, epoch, digest, read).members)

    def pack_inputs(self, base: str, epoch: int, digest: str, read: Read) -> dict[str, list[str]]:
        """A pack job's inputs: its members' recipes and the records of the slices before."""
        members = self.pack_members(base, epoch, digest, read)
        previous = [self.previous_slice(run_id, epoch, read) for run_id in members]
        return {
            "recipes": [str(self.paths.run(run_id).recipe) for run_id in members],
            "previous": [path for path in previous if path is not None],
        }

    def pack_run_dirs(self, base: str, epoch: int, digest: str, read: Read) -> str:
        """The members' run directories, as `ebd2n train-pack` takes them."""
        return " ".join(
            str(self.paths.run(run_id).directory) for run_id in self.pack_members(base, epoch, digest, read)
        )

    def pack_log_header(self, base: str, epoch: int, digest: str, read: Read) -> str:
        """The first line of the pack job's log (ebd2n.train.pack_record.pack_log_header)."""
        return pack_log_header(self.pack_members(base, epoch, digest, read))

    def pack_launcher(self, base: str) -> str:
        """`-m ebd2n.launch` of a pack job: one process on the GPU slots of its base's synchronous runs."""
        return f"-m ebd2n.launch --gpus {self.campaign.pack_job_resources(base).job_gpus} --processes 1 --nodes 1"

    def launcher(self, run_id: str) -> str:
        """`-m ebd2n.launch`: the run's local GPU slots, then its S x D processes (torchrun, or srun +
        torchrun over the job's nodes) or the warm-start launcher for one."""
        run = self.run(run_id)
        parallel = self.campaign.current_bases[run.base].parallel
        resources = self.resources(run_id)
        processes = parallel.pipeline_stages * parallel.data_parallel
        return f"-m ebd2n.launch --gpus {resources.job_gpus} --processes {processes} --nodes {resources.nodes}"

    def validation_launcher(self, run_id: str) -> str:
        """Full validation is one process, on the GPU slots its job asked for."""
        return f"-m ebd2n.launch --gpus {self.resources(run_id).job_gpus}"

    def run_job_resources(self) -> tuple[dict[str, Any], Any]:
        """Training and validation jobs' SLURM resources and threads (see `job_settings`)."""
        grid = self.campaign.grid
        scopes = [self.campaign.job_resources(scope, mode) for scope in grid.scopes for mode in grid.modes]
        return job_settings(scopes, lambda wildcards: self.resources(wildcards.run))

    def pack_job_resources(self) -> tuple[dict[str, Any], Any]:
        """A pack job's SLURM resources and threads (see `Campaign.pack_job_resources`)."""
        scopes = [self.campaign.pack_job_resources(scope) for scope in self.campaign.grid.scopes]
        return job_settings(scopes, lambda wildcards: self.campaign.pack_job_resources(wildcards.base))

    def prepare_job_resources(self) -> tuple[dict[str, Any], Any]:
        """The data-cache job's SLURM resources and threads."""
        return job_settings([self.campaign.job_resources(self.campaign.grid.bases[0], None)], None)


def _as_workflow_error(method: Callable[..., Any]) -> Callable[..., Any]:
    """A UserError of the plan as the workflow's error class (one line, not a traceback)."""

    @functools.wraps(method)
    def call(self: WorkflowInputs, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except UserError as error:
            raise self.error(str(error)) from None

    return call


class WorkflowInputs:
    """The workflow's input and params functions: a plan with the workflow's reader of rung decisions, each method
    taking a job's wildcards as Snakemake hands them (any object with their names as attributes), so that each
    `get_<thing>(wildcards)` of common.smk is one call. `ancient` is Snakemake's marker of an input whose time
    never reruns its job, and `error` the class a UserError is raised as (its WorkflowError): both passed in,
    so that the package imports nothing of Snakemake (the defaults leave paths as they are and errors as
    UserErrors)."""

    def __init__(
        self,
        plan: WorkflowPlan,
        read: Read | None,
        ancient: Callable[[str], Any] = str,
        error: Callable[[str], Exception] = UserError,
        selected: Callable[[Path], dict[str, Any] | None] = read_selection,
    ) -> None:
        self.plan, self.read, self.ancient, self.error, self.selected = plan, read, ancient, error, selected

    @_as_workflow_error
    def final_output(self, wildcards: Any) -> list[str]:
        return self.plan.final_output()

    def bracket_outputs(self) -> dict[str, Callable[[Any], list[str]]]:
        """The inputs of `all` that wait for decisions, one function per bracket (none for the full grid),
        so that a rung waits only for its own bracket: Snakemake asks for every bracket's next decision
        at once."""
        return {
            f"bracket_{index}": functools.partial(self.bracket_output, bracket=name)
            for index, name in enumerate(self.plan.brackets)
        }

    @_as_workflow_error
    def bracket_output(self, wildcards: Any, bracket: str) -> list[str]:
        """One bracket's runs as far as their fates take them, and its decisions."""
        return self.plan.bracket_output(bracket, read=self.read)

    @_as_workflow_error
    def run_results(self, wildcards: Any) -> list[str]:
        return self.plan.run_results(read=self.read)

    @_as_workflow_error
    def confirmation(self, wildcards: Any) -> list[str]:
        return self.plan.confirmation(self.selected)

    @_as_workflow_error
    def rung_slices(self, wildcards: Any) -> list[str]:
        """Not ancient(): Snakemake passes a needed rerun on to `all` through files that are not ancient."""
        return self.plan.rung_slices(wildcards.bracket, int(wildcards.epoch), wildcards.digest, read=self.read)

    @_as_workflow_error
    def frozen_base(self, wildcards: Any) -> str:
        return self.plan.frozen_base(wildcards.run)

    @_as_workflow_error
    def resolve_settings(self, wildcards: Any) -> str:
        return self.plan.resolve_settings(wildcards.run)

    @_as_workflow_error
    def plan_file(self, wildcards: Any) -> Any:
        """The frozen trainer's confirmation of the slice chain (written once; its time never retrains)."""
        return self.ancient(self.plan.slice_plan(wildcards.run))

    @_as_workflow_error
    def slice_epochs(self, wildcards: Any) -> int:
        return self.plan.campaign.slice_epochs(wildcards.base)

    @_as_workflow_error
    def expected_ends(self, wildcards: Any) -> str:
        return self.plan.expected_ends(wildcards.base)

    @_as_workflow_error
    def plan_parent(self, wildcards: Any) -> list[str]:
        """The frozen base recipe of the next shorter horizon, whose trunk the base's runs continue."""
        parent = self.plan.plan_parent(wildcards.base)
        return [] if parent is None else [parent]

    @_as_workflow_error
    def plan_parent_option(self, wildcards: Any) -> str:
        parent = self.plan.plan_parent(wildcards.base)
        return "" if parent is None else f"--parent {parent}"

    @_as_workflow_error
    def branch(self, wildcards: Any) -> str:
        return self.plan.branch_option(wildcards.run, _epoch(wildcards))

    @_as_workflow_error
    def previous_slice(self, wildcards: Any) -> list[Any]:
        """The slice before; a rung's decision orders the slice after it through the checkpoint, never
        as an input (an extension's new decision must not make the slice look changed)."""
        previous = self.plan.previous_slice(wildcards.run, _epoch(wildcards), read=self.read)
        return [] if previous is None else [self.ancient(previous)]

    @_as_workflow_error
    def launcher(self, wildcards: Any) -> str:
        return self.plan.launcher(wildcards.run)

    @_as_workflow_error
    def validation_launcher(self, wildcards: Any) -> str:
        return self.plan.validation_launcher(wildcards.run)

    @_as_workflow_error
    def pack_inputs(self, wildcards: Any) -> dict[str, list[Any]]:
        """A pack job's members' recipes and previous slices, ancient() as a solo job's are."""
        inputs = self.plan.pack_inputs(wildcards.base, int(wildcards.epoch), wildcards.digest, read=self.read)
        return {name: [self.ancient(path) for path in paths] for name, paths in inputs.items()}

    @_as_workflow_error
    def pack_run_dirs(self, wildcards: Any) -> str:
        return self.plan.pack_run_dirs(wildcards.base, int(wildcards.epoch), wildcards.digest, read=self.read)

    @_as_workflow_error
    def pack_log_header(self, wildcards: Any) -> str:
        return self.plan.pack_log_header(wildcards.base, int(wildcards.epoch), wildcards.digest, read=self.read)

    @_as_workflow_error
    def pack_launcher(self, wildcards: Any) -> str:
        return self.plan.pack_launcher(wildcards.base)

    @_as_workflow_error
    def member_pack(self, wildcards: Any) -> list[Any]:
        """The pack job that trains a synchronous run's slice under execution.pack."""
        return [self.ancient(path) for path in self.plan.member_pack(wildcards.run, _epoch(wildcards), read=self.read)]


def _epoch(wildcards: Any) -> int | None:
    """A job's `epoch` wildcard; None for a rule without one (the final slice)."""
    epoch = getattr(wildcards, "epoch", None)
    return None if epoch is None else int(epoch)


def asked_candidates(
    halving: Halving, bracket: Bracket, epoch: int, digest: str | None, source: str, read: Read | None = None
) -> list[tuple[float, float]]:
    """The points rung `epoch` compares, when the grid names their decision by `digest` (None: any)."""
    points = halving.candidates(bracket, epoch, read=read)
    path = halving.decision_path(bracket, epoch, points)
    if digest is not None and path.name != f"rung-{epoch}-{digest}.json":
        raise UserError(
            f"{source}: bracket {bracket.name} rung {epoch}: the grid now decides {path.name}, "
            f"not rung-{epoch}-{digest}.json "
            "(the campaign file changed while the workflow ran: run it again)"
        )
    return points
