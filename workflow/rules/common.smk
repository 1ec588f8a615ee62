# All workflow Python: validate the campaign, then the input functions get_<thing>(wildcards), each one
# call of ebd2n.campaign.workflow's WorkflowInputs. Parsing writes, deletes, starts and reads nothing else.
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from ebd2n.campaign.check import campaign_from_dict, campaign_warnings
from ebd2n.campaign.confirmation import read_selection
from ebd2n.campaign.file import SCHEMA_PATH
from ebd2n.campaign.rung_decision import read_decision
from ebd2n.campaign.workflow import WorkflowInputs, WorkflowPlan
from ebd2n.errors import UserError
from ebd2n.layout import BENCHMARKS, LOGS, RESULTS
from ebd2n.slots import asked_gpus, machine_pool, pool_warnings
from ebd2n.train.records import JOB_START_SHELL
from ebd2n.yamlio import read_yaml_mapping


def refuse(message):
    """A bad campaign file: one line naming it and exit status 2, as `ebd2n campaign check` does
    (a WorkflowError raised while parsing prints three lines and exits 1)."""
    print(f"snakemake: error: {message}", file=sys.stderr)
    sys.exit(2)


def campaign_file():
    """The campaign file this run reads: the one --configfile, else config/config.yaml."""
    if workflow.config_settings.config:
        refuse("--config is not supported: put the change in the campaign file (--configfile FILE)")
    files = workflow.overwrite_configfiles
    if len(files) > 1:
        refuse(f"give one campaign file, got --configfile {' '.join(map(str, files))}")
    if not files:
        return "config/config.yaml"
    path = Path(files[0])  # Snakemake made it absolute: inside the working directory, as typed
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


# The campaign file is read again with ebd2n's YAML reader (3e-3 is a number there), on its own:
# Snakemake's `config` merges it into config/config.yaml. The package checks the schema and what a
# schema cannot say, in one line; validate() then gives Snakemake's own record of the check.
CAMPAIGN_FILE = campaign_file()
try:
    CAMPAIGN_CONFIG = read_yaml_mapping(CAMPAIGN_FILE, "campaign file")
    PLAN = WorkflowPlan(campaign_from_dict(CAMPAIGN_CONFIG, source=CAMPAIGN_FILE))
    if not workflow.remote_exec:  # from the controller only (each cluster job parses this file again)
        warnings = campaign_warnings(PLAN.campaign) + pool_warnings(asked_gpus(workflow), machine_pool())
        for line in [PLAN.headline, *(f"warning: {warning}" for warning in warnings)]:
            print(f"ebd2n: {line}", file=sys.stderr)
except UserError as error:
    refuse(error)
validate(CAMPAIGN_CONFIG, schema=str(SCHEMA_PATH), set_default=False)
CAMPAIGN, CACHE = PLAN.campaign, PLAN.cache

# `python -m ebd2n` of the installed package or, TRAINER, of the campaign's frozen copy (by path).
PYTHON = shlex.quote(sys.executable)
EBD2N = f"{PYTHON} -m ebd2n"
# Every job's log begins with its start record (who runs it), before its Python starts: ebd2n.train.records.
JOB_START = f"{JOB_START_SHELL} > {{log}}; "
FROZEN_SRC = CAMPAIGN.paths.frozen_src
TRAINER = f"PYTHONPATH={FROZEN_SRC} {PYTHON} -m ebd2n"
LAUNCHED_TRAINER = f"PYTHONPATH={FROZEN_SRC} {PYTHON} {{params.launcher}}"
# The software of every rule, for `--use-conda` (by default the jobs use the environment Snakemake runs in).
CONDA_ENV = str(Path(workflow.basedir).parent / "environment.yml")
# How many jobs run at once: --jobs on a cluster, else the local cores (campaign.json records it).
MAX_JOBS = workflow.resource_settings.nodes or workflow.resource_settings.cores
# Resources come from the campaign file (ebd2n.campaign.resources), set here only.
RUN_RESOURCES, RUN_THREADS = PLAN.run_job_resources()
PREPARE_RESOURCES, PREPARE_THREADS = PLAN.prepare_job_resources()
PACK_RESOURCES, PACK_THREADS = PLAN.pack_job_resources()


# When jobs are about to run (not while parsing, not in a dry run): what `ebd2n status` expects.
onstart:
    from ebd2n.campaign.status_plan import write_plan

    write_plan(CAMPAIGN, PLAN.plans)


# Every path comes from the store's layout (ebd2n.layout), under the one campaign this run reads (no
# `campaign` wildcard: Snakemake would match one in every output; the console reads it from a log's path).
C = CAMPAIGN.paths
R = C.run("{run}")
RUN_DIR = str(C.run("{wildcards.run}").directory)
CAMPAIGN_DIR = str(CAMPAIGN.directory)
# A job's log and benchmark file: its output's path under the campaign's logs/ and benchmarks/.
log_of, benchmark_of = PLAN.log_of, PLAN.benchmark_of


wildcard_constraints:
    run=r"[^/]+",
    epoch=r"[0-9]+",
    base=r"[^/]+",
    bracket=r"[^/]+",
    digest=r"[0-9a-f]{16}",


def decided(bracket, epoch, path):
    """A rung decision through its checkpoint (one not made yet becomes a job); one on disk as it is."""
    if not Path(path).is_file():
        digest = Path(path).stem.removeprefix(f"rung-{epoch}-")
        checkpoints.decide_rung.get(bracket=bracket, epoch=epoch, digest=digest)
    return read_decision(Path(path))


def selected(path):
    """A confirmation's selection through Snakemake's checkpoint, as `decided` reads a rung decision."""
    if not Path(path).is_file():
        checkpoints.select_confirmation.get(digest=Path(path).stem.removeprefix("selection-"))
    return read_selection(Path(path))


# Every input and params function is one call of the plan with these checkpoint readers and the job's
# wildcards (ancient() and Snakemake's error passed in: the package imports no Snakemake).
INPUTS = WorkflowInputs(PLAN, read=decided, ancient=ancient, error=WorkflowError, selected=selected)
# The inputs of `all` that wait for decisions: one function per bracket (none for the full grid).
BRACKET_OUTPUTS = INPUTS.bracket_outputs()


def get_final_output(wildcards):
    return INPUTS.final_output(wildcards)


def get_run_results(wildcards):
    return INPUTS.run_results(wildcards)


def get_confirmation(wildcards):
    return INPUTS.confirmation(wildcards)


def get_rung_slices(wildcards):
    return INPUTS.rung_slices(wildcards)


def get_frozen_base(wildcards):
    return INPUTS.frozen_base(wildcards)


def get_resolve_settings(wildcards):
    return INPUTS.resolve_settings(wildcards)


def get_plan_file(wildcards):
    return INPUTS.plan_file(wildcards)


def get_slice_epochs(wildcards):
    return INPUTS.slice_epochs(wildcards)


def get_expected_ends(wildcards):
    return INPUTS.expected_ends(wildcards)


def get_plan_parent(wildcards):
    return INPUTS.plan_parent(wildcards)


def get_plan_parent_option(wildcards):
    return INPUTS.plan_parent_option(wildcards)


def get_branch(wildcards):
    return INPUTS.branch(wildcards)


def get_previous_slice(wildcards):
    return INPUTS.previous_slice(wildcards)


def get_launcher(wildcards):
    return INPUTS.launcher(wildcards)


def get_validation_launcher(wildcards):
    return INPUTS.validation_launcher(wildcards)


def get_pack_inputs(wildcards):
    return INPUTS.pack_inputs(wildcards)


def get_pack_run_dirs(wildcards):
    return INPUTS.pack_run_dirs(wildcards)


def get_pack_log_header(wildcards):
    return INPUTS.pack_log_header(wildcards)


def get_pack_launcher(wildcards):
    return INPUTS.pack_launcher(wildcards)


def get_member_pack(wildcards):
    return INPUTS.member_pack(wildcards)
