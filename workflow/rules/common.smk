# All workflow Python: validate the campaign, then the input functions get_<thing>(wildcards).
# Per-run functions read only their wildcards (and the campaign's fixed settings), never the grid.
import functools
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError


def _refuse(message):
    """A bad campaign file: one line naming it and exit status 2, as `ebd2n campaign check` does."""
    print(f"snakemake: error: {message}", file=sys.stderr)
    sys.exit(2)


def _campaign_file():
    """The campaign file this run reads: the one --configfile, else config/config.yaml."""
    if workflow.config_settings.config:
        _refuse("--config is not supported: put the change in the campaign file (--configfile FILE)")
    files = workflow.overwrite_configfiles
    if len(files) > 1:
        _refuse(f"give one campaign file, got --configfile {' '.join(map(str, files))}")
    path = Path(files[0]) if files else Path("config/config.yaml")
    return os.path.relpath(path) if path.is_absolute() else str(path)


# The package of this checkout (not an installed copy): the same code the rules run.
SRC = Path(workflow.basedir).parent / "src"
sys.path.insert(0, str(SRC))

from ebd2n.campaign.runs import parse_run_id
from ebd2n.campaign.interrupted import settle_finished_jobs
from ebd2n.campaign.snakemake_lock import LOCKS, clear_stale_lock, no_other_controller
from ebd2n.campaign.spec import base_plans, campaign_from_dict, current_bases
from ebd2n.errors import UserError
from ebd2n.layout import BENCHMARKS, LOGS, RESULTS, named_campaign
from ebd2n.yamlio import read_yaml_mapping

CAMPAIGN_FILE = _campaign_file()
try:
    # Snakemake has read the file already (a missing, empty or non-mapping file, or one that is
    # not YAML, stops it before this line: see config/README.md). It is read again with ebd2n's
    # YAML reader, so 3e-3 is a number, and it replaces config/config.yaml instead of being
    # merged into it (here, and in the jobs a cluster runs, which get the same --configfile).
    config.clear()
    config.update(read_yaml_mapping(CAMPAIGN_FILE, "campaign file"))
    # campaign_from_dict checks src/ebd2n/campaign/campaign.schema.yaml, the schema Snakemake's
    # validate() would check, and says what is wrong on one line.
    CAMPAIGN = campaign_from_dict(config, source=CAMPAIGN_FILE)
    # Each base recipe's slices as the frozen trainer plans them (ebd2n.campaign.spec.base_plans):
    # every job's --until-epoch is one of them, whatever this checkout's budget code says now.
    PLANS = base_plans(CAMPAIGN)
except UserError as error:
    _refuse(error)
NO_JOBS = (
    "dryrun", "lint", "list_target_rules", "list_rules", "print_compilation", "containerize",
    "generate_unit_tests", "dag", "rulegraph", "filegraph", "d3dag", "unlock", "cleanup_metadata",
    "conda_cleanup_envs", "conda_create_envs_only", "list_conda_envs", "cleanup_shadow",
    "container_cleanup_images", "list_changes", "list_input_changes", "list_params_changes",
    "list_untracked", "summary", "detailed_summary", "archive", "delete_all_output", "delete_temp_output",
    "report",
)
"""Snakemake's command-line options (argparse names) that run no job: a dry run, reports, records."""


def _runs_jobs():
    """Whether this Snakemake may run jobs: not a job itself, not a dry run (-n), not a command that
    only reports or edits Snakemake's records (--summary, --unlock, --cleanup-metadata, --dag ...),
    which must change nothing. The Snakefile is parsed before Snakemake acts on its command line
    (workflow.dryrun is False until jobs execute, and onstart comes after the jobs to run are
    chosen), so the command line is read here with Snakemake's own parser."""
    if workflow.remote_exec or workflow.output_settings.dryrun:
        return False
    if not (Path(sys.argv[0]).name == "snakemake" or sys.argv[0].endswith("snakemake/__main__.py")):
        return True  # Snakemake's API: the caller chose to execute the workflow
    from snakemake.cli import get_argument_parser

    args, _ = get_argument_parser().parse_known_args(sys.argv[1:])
    return all(getattr(args, name, None) in (None, False) for name in NO_JOBS)


RUNS_JOBS = _runs_jobs()
# A controller killed earlier left its lock: clear it here, before Snakemake checks it (jobs run
# with --nolock and never touch it).
if RUNS_JOBS and clear_stale_lock(Path.cwd()):
    print(f"ebd2n: removed the stale Snakemake lock {LOCKS} (no Snakemake runs in this directory)", file=sys.stderr)
CACHE = Path(next(iter(current_bases(CAMPAIGN).values())).data.cache_dir)
# Jobs that finished before a killed controller recorded them: kept as done (see
# ebd2n.campaign.interrupted), so no rerun forces a job that cannot run again or stops short. Only
# where no other controller provably runs here (without /proc, as on macOS, nothing is settled).
if RUNS_JOBS and no_other_controller(Path.cwd()):
    for output in settle_finished_jobs(Path.cwd(), CACHE, CAMPAIGN.checkpoint_policy):
        print(f"ebd2n: {output}: its job finished before the controller stopped; kept as done", file=sys.stderr)
# `python -m ebd2n` of this checkout (prepare, freeze, collect) or, TRAINER, of the campaign's
# frozen copy (plan, resolve): the trainer is passed by path, never as an input. Training and
# validation jobs start through the warm-start launcher, LAUNCHED_TRAINER (`-m ebd2n.warm`), or
# torchrun (get_launcher).
PYTHON = shlex.quote(sys.executable)
EBD2N = f"PYTHONPATH={shlex.quote(str(SRC))} {PYTHON} -m ebd2n"
FROZEN_SRC = named_campaign("{wildcards.campaign}").frozen_src
TRAINER = f"PYTHONPATH={FROZEN_SRC} {PYTHON} -m ebd2n"
LAUNCHED_TRAINER = f"PYTHONPATH={FROZEN_SRC} {PYTHON} {{params.launcher}}"
WARM = "-m ebd2n.warm"
# Local runs: the launcher forks training and validation jobs from one process that has torch
# imported already, which saves seconds per job on a laptop. EBD2N_WARM=0 in the environment turns
# it off. Cluster jobs always start cold: the job's own Snakemake (remote mode) turns it off for the
# commands it runs, whatever environment the controller exported, and the controller turns it on
# only in onstart, once the executor is known (while the Snakefile is parsed it is not yet).
if workflow.remote_exec:
    os.environ["EBD2N_WARM"] = "0"


# At the start (the one onstart of the workflow): warm start for local runs, and the campaign's plan
# for `ebd2n status` (every run, its slices and resources), as this run sees it.
onstart:
    from ebd2n.campaign.status import write_plan

    if workflow.local_exec:
        os.environ.setdefault("EBD2N_WARM", "1")
    write_plan(CAMPAIGN, PLANS)


# How many jobs run at once: --jobs on a cluster, else the local cores (campaign.json records it).
MAX_JOBS = workflow.resource_settings.nodes or workflow.resource_settings.cores

# Every path comes from the store's layout (ebd2n.layout), with wildcards for names.
C = named_campaign("{campaign}")
R = C.run("{run}")
RUN_DIR = str(named_campaign("{wildcards.campaign}").run("{wildcards.run}").directory)
CAMPAIGN_DIR = str(named_campaign("{wildcards.campaign}").directory)


def log_of(path):
    """The log of the job writing `path`: the same path under the campaign's logs/, ending .log."""
    return str(C.logs / Path(path).relative_to(C.directory).with_suffix(".log"))


def benchmark_of(path):
    """The benchmark file of the job writing `path`, under the campaign's benchmarks/."""
    return str(C.benchmarks / Path(path).relative_to(C.directory).with_suffix(".tsv"))


def slice_output():
    """A slice's checkpoint. The trainer owns checkpoint lifetime: under the `final` policy it
    deletes a slice checkpoint once the next slice has consumed it, and temp() only tells Snakemake
    that the file may be gone; `epoch` and `all` keep every one, so it is a plain output there."""
    path = str(R.checkpoint("{epoch}"))
    return temp(path) if CAMPAIGN.checkpoint_policy == "final" else path


wildcard_constraints:
    campaign=re.escape(CAMPAIGN.name),
    run=r"[^/]+",
    epoch=r"[0-9]+",
    base=r"[^/]+",


def get_final_output():
    """The audit's seal: written once the published report has been verified against the runs."""
    return [str(CAMPAIGN.paths.audit_passed)]


def get_run_results(wildcards):
    return [str(named_campaign(wildcards.campaign).run(run.id).results) for run in CAMPAIGN.runs()]


def get_frozen_base(wildcards):
    return named_campaign(wildcards.campaign).base_recipe(_run(wildcards).base)


def get_plan_file(wildcards):
    return str(named_campaign(wildcards.campaign).slice_plan(_run(wildcards).base))


def get_expected_ends(wildcards):
    """The slice ends this workflow planned for a base recipe, which the frozen trainer must confirm."""
    return ",".join(map(str, PLANS[wildcards.base].ends))


def get_resume_checkpoint(wildcards):
    """The checkpoint the slice ending at {epoch} (the final slice: the whole budget) resumes from."""
    plan = PLANS[_run(wildcards).base]
    try:
        previous = plan.previous(int(wildcards.epoch) if "epoch" in wildcards.keys() else plan.epochs)
    except UserError as error:
        raise WorkflowError(f"{wildcards.run}: {error}") from None
    return [] if previous is None else [str(named_campaign(wildcards.campaign).run(wildcards.run).checkpoint(previous))]


def get_resume_input(wildcards):
    """The resume checkpoint as a rule input: under `final` a temp() file; under `epoch` and `all` a
    kept one, so ancient(): its time (a touch, a copy) never retrains; the trainer checks its content."""
    paths = get_resume_checkpoint(wildcards)
    return paths if CAMPAIGN.checkpoint_policy == "final" else [ancient(path) for path in paths]


def get_resume_arg(wildcards):
    return " ".join(f"--resume {path}" for path in get_resume_checkpoint(wildcards))


def get_run_resource(wildcards, field):
    """One field of the run's resources (see config/README.md: the most specific scope wins)."""
    run = _run(wildcards)
    return getattr(CAMPAIGN.job_resources(run.base, run.mode), field) or ""


def _per_run(field, scopes):
    """A constant when every job asks the same (Snakemake then evaluates nothing per job, which
    keeps planning 324 runs quick), else a function of the run id."""
    values = {getattr(scope, field) for scope in scopes}
    return values.pop() if len(values) == 1 else functools.partial(get_run_resource, field=field)


def _slurm_resources(scopes):
    """Job resources in the SLURM plugin's names; partition and account only where the campaign sets them."""
    names = {"gpu": "gpus", "runtime": "minutes", "mem_mb": "mem_mb", "slurm_partition": "partition", "slurm_account": "account"}
    return {name: _per_run(field, scopes) for name, field in names.items() if any(getattr(s, field) for s in scopes)}


# Resources come from the campaign file, and are set here only: training and validation jobs take
# their run's scope, the data-cache job the prepare scope.
RUN_SCOPES = [CAMPAIGN.job_resources(base, mode) for base in CAMPAIGN.bases for mode in CAMPAIGN.modes]
RUN_RESOURCES = _slurm_resources(RUN_SCOPES)
RUN_THREADS = _per_run("cpus", RUN_SCOPES)
PREPARE_SCOPE = [CAMPAIGN.job_resources(CAMPAIGN.bases[0], None)]
PREPARE_RESOURCES = _slurm_resources(PREPARE_SCOPE)
PREPARE_THREADS = _per_run("cpus", PREPARE_SCOPE)


# Runs of S pipeline stages x D replicas start S x D processes through torchrun (one node).
PROCESSES = {
    base: recipe.parallel.pipeline_stages * recipe.parallel.data_parallel for base, recipe in current_bases(CAMPAIGN).items()
}


def get_launcher(wildcards):
    """`-m torch.distributed.run ... -m ebd2n` for a multi-process run, else the warm-start launcher."""
    processes = PROCESSES[_run(wildcards).base]
    return f"-m torch.distributed.run --standalone --nproc-per-node {processes} -m ebd2n" if processes > 1 else WARM


def _run(wildcards):
    try:
        run = parse_run_id(wildcards.run)
    except UserError as error:
        raise WorkflowError(str(error)) from None
    if run.base not in CAMPAIGN.bases:
        raise WorkflowError(f"run {wildcards.run}: preset {run.preset} is not in grid.presets of {CAMPAIGN_FILE}")
    return run

