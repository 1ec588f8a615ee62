# All workflow Python: validate the campaign, then the input functions get_<thing>(wildcards).
# Per-run functions read only their wildcards (and the campaign's fixed settings), never the grid.
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


validate(config, schema="../schemas/campaign.schema.yaml")

# The package of this checkout (not an installed copy): the same code the rules run.
SRC = Path(workflow.basedir).parent / "src"
sys.path.insert(0, str(SRC))

from ebd2n.campaign.runs import campaign_dir, frozen_base, parse_run_id, previous_end
from ebd2n.campaign.spec import base_epochs, campaign_from_dict, current_bases
from ebd2n.errors import UserError


def _campaign_file():
    """The campaign file this run reads: the one --configfile, else config/config.yaml."""
    if workflow.config_settings.config:
        raise WorkflowError("--config is not supported: put the change in the campaign file (--configfile FILE)")
    files = workflow.overwrite_configfiles
    if len(files) > 1:
        raise WorkflowError(f"give one campaign file, got --configfile {' '.join(map(str, files))}")
    path = Path(files[0]) if files else Path("config/config.yaml")
    return os.path.relpath(path) if path.is_absolute() else str(path)


CAMPAIGN_FILE = _campaign_file()
try:
    CAMPAIGN = campaign_from_dict(config, source=CAMPAIGN_FILE)
    EPOCHS = base_epochs(CAMPAIGN)
except UserError as error:
    raise WorkflowError(str(error)) from None
CACHE = Path(next(iter(current_bases(CAMPAIGN).values())).data.cache_dir)
# `python -m ebd2n` of this checkout (prepare, freeze, collect) or, TRAINER, of the campaign's
# frozen copy (resolve, train, validate): the trainer is passed by path, never as an input.
PYTHON = shlex.quote(sys.executable)
EBD2N = f"PYTHONPATH={shlex.quote(str(SRC))} {PYTHON} -m ebd2n"
TRAINER = f"PYTHONPATH=results/{{wildcards.campaign}}/frozen/src {PYTHON} -m ebd2n"
RUN = "results/{campaign}/runs/{run}"
RUN_DIR = "results/{wildcards.campaign}/runs/{wildcards.run}"


wildcard_constraints:
    campaign=re.escape(CAMPAIGN.name),
    run=r"[^/]+",
    epoch=r"[0-9]+",
    base=r"[^/]+",


def get_final_output():
    return [f"{CAMPAIGN.directory}/runs.csv"]


def get_run_results(wildcards):
    return [f"{campaign_dir(wildcards.campaign)}/runs/{run.id}/results.json" for run in CAMPAIGN.runs()]


def get_frozen_base(wildcards):
    return frozen_base(campaign_dir(wildcards.campaign), _run(wildcards).base)


def get_resume_checkpoint(wildcards):
    """The checkpoint the slice ending at {epoch} (the final slice: the whole budget) resumes from."""
    epochs = EPOCHS[_run(wildcards).base]
    end = int(wildcards.epoch) if "epoch" in wildcards.keys() else epochs
    previous = previous_end(end, epochs, CAMPAIGN.epochs_per_slice)
    return [] if previous is None else [f"{campaign_dir(wildcards.campaign)}/runs/{wildcards.run}/checkpoints/epoch-{previous}.pt"]


def get_resume_arg(wildcards):
    return " ".join(f"--resume {path}" for path in get_resume_checkpoint(wildcards))


def get_threads(wildcards):
    return _resources(wildcards).cpus


def get_gpus(wildcards):
    return _resources(wildcards).gpus


def get_minutes(wildcards):
    return _resources(wildcards).minutes


def get_mem_mb(wildcards):
    return _resources(wildcards).mem_mb


def get_partition(wildcards):
    return _resources(wildcards).partition or ""


def get_account(wildcards):
    return _resources(wildcards).account or ""


# Job resources from the campaign file, in one place for every rule that runs a job on the cluster.
JOB_RESOURCES = dict(
    gpu=get_gpus,
    runtime=get_minutes,
    mem_mb=get_mem_mb,
    slurm_partition=get_partition,
    slurm_account=get_account,
)


def _run(wildcards):
    try:
        run = parse_run_id(wildcards.run)
    except UserError as error:
        raise WorkflowError(str(error)) from None
    if run.base not in EPOCHS:
        raise WorkflowError(f"run {wildcards.run}: preset {run.preset} is not in grid.presets of {CAMPAIGN_FILE}")
    return run


def _resources(wildcards):
    """The run's resources; jobs without a run (the data cache) take the prepare scope."""
    if "run" not in wildcards.keys():
        return CAMPAIGN.job_resources(CAMPAIGN.bases[0], None)
    run = _run(wildcards)
    return CAMPAIGN.job_resources(run.base, run.mode)
