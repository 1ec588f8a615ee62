# All workflow Python: validate the campaign, then the input functions get_<thing>(wildcards).
# Nothing else happens while the Snakefile is parsed: no file is written or deleted, no process is
# started, nothing of Snakemake's own records is read. Per-run functions read only their
# wildcards (and the campaign's fixed settings), never the grid.
import functools
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from ebd2n.campaign.runs import parse_run_id
from ebd2n.campaign.search import campaign_halving, read_decision
from ebd2n.campaign.spec import (
    SCHEMA_PATH,
    base_plans,
    campaign_from_dict,
    campaign_warnings,
    current_bases,
)
from ebd2n.errors import UserError
from ebd2n.layout import BENCHMARKS, LOGS, RESULTS, named_campaign
from ebd2n.slots import machine_pool, pool_warnings
from ebd2n.yamlio import read_yaml_mapping


def refuse(message):
    """A bad campaign file: one line naming it and exit status 2, as `ebd2n campaign check` does."""
    print(f"snakemake: error: {message}", file=sys.stderr)
    sys.exit(2)


def campaign_file():
    """The campaign file this run reads: the one --configfile, else config/config.yaml."""
    if workflow.config_settings.config:
        refuse(
            "--config is not supported: put the change in the campaign file (--configfile FILE)"
        )
    files = workflow.overwrite_configfiles
    if len(files) > 1:
        refuse(f"give one campaign file, got --configfile {' '.join(map(str, files))}")
    if not files:
        return "config/config.yaml"
    path = Path(
        files[0]
    )  # Snakemake made it absolute: inside the working directory, as typed
    return (
        str(path.relative_to(Path.cwd()))
        if path.is_relative_to(Path.cwd())
        else str(path)
    )


# The campaign file is read again with ebd2n's YAML reader (3e-3 is a number there), on its own:
# Snakemake's `config` merges it into config/config.yaml. Snakemake has checked already that it
# exists and is a YAML mapping (see docs/configuration.md).
CAMPAIGN_FILE = campaign_file()
try:
    CAMPAIGN_CONFIG = read_yaml_mapping(CAMPAIGN_FILE, "campaign file")
    # The package's checks first: the schema and what a schema cannot say, in one line.
    CAMPAIGN = campaign_from_dict(CAMPAIGN_CONFIG, source=CAMPAIGN_FILE)
    # Each base recipe's slices: the frozen trainer's plan file once written (see base_plans).
    PLANS = base_plans(CAMPAIGN)
except UserError as error:
    refuse(error)
validate(CAMPAIGN_CONFIG, schema=str(SCHEMA_PATH), set_default=False)


def asked_gpus():
    """The local controller's `--resources gpu=N`, None where not given or not local (Snakemake
    9.27 hands a Resource, 9.15 a number)."""
    asked = (
        workflow.resource_settings.resources.get("gpu") if workflow.local_exec else None
    )
    return getattr(asked, "value", asked)


# The campaign's warnings, from the controller only (each cluster job parses this file again).
if not workflow.remote_exec:
    try:
        warnings = campaign_warnings(CAMPAIGN) + pool_warnings(
            asked_gpus(), machine_pool()
        )
    except UserError as error:
        refuse(error)
    for line in warnings:
        print(f"ebd2n: warning: {line}", file=sys.stderr)
BASES = current_bases(CAMPAIGN)
# Successive halving (campaign `search`): the rungs each bracket's runs are compared at; None: the full grid.
HALVING = (
    campaign_halving(CAMPAIGN.paths, CAMPAIGN.search, CAMPAIGN.runs(), PLANS)
    if CAMPAIGN.search.halving
    else None
)
CACHE = Path(next(iter(BASES.values())).data.cache_dir)

# `python -m ebd2n` of the installed package (prepare, freeze, collect, audit, report) or, TRAINER,
# of the campaign's frozen copy (plan, resolve, train, validate): the trainer is passed by path,
# never as an input. Training and validation start through the warm-start launcher (`-m
# ebd2n.warm`, local runs only) or torchrun, after taking the job's GPU slots (get_launcher).
PYTHON = shlex.quote(sys.executable)
EBD2N = f"{PYTHON} -m ebd2n"
FROZEN_SRC = named_campaign("{wildcards.campaign}").frozen_src
TRAINER = f"PYTHONPATH={FROZEN_SRC} {PYTHON} -m ebd2n"
LAUNCHED_TRAINER = f"PYTHONPATH={FROZEN_SRC} {PYTHON} {{params.launcher}}"
# The software of every rule, for `--use-conda` (by default the jobs use the environment Snakemake runs in).
CONDA_ENV = str(Path(workflow.basedir).parent / "environment.yml")


# When jobs are about to run (not while the Snakefile is parsed, not in a dry run): the runs
# `ebd2n status` expects, with their resources.
onstart:
    from ebd2n.campaign.status import write_plan

    write_plan(CAMPAIGN)


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


wildcard_constraints:
    campaign=re.escape(CAMPAIGN.name),
    run=r"[^/]+",
    epoch=r"[0-9]+",
    base=r"[^/]+",
    bracket=r"[^/]+",
    digest=r"[0-9a-f]{16}",


def decided(bracket, epoch, path):
    """A rung decision, through Snakemake's checkpoint: asking for one not made yet makes it a job,
    and Snakemake plans what depends on it (the bracket's next slices) once it is made.
    """
    if not Path(
        path
    ).is_file():  # one on disk is read as it is: each is written once, atomically
        digest = Path(path).stem.removeprefix(f"rung-{epoch}-")
        checkpoints.decide_rung.get(
            campaign=CAMPAIGN.name, bracket=bracket, epoch=epoch, digest=digest
        )
    return read_decision(Path(path))


def run_fates():
    """Each run's fate: None (trains its whole budget), or the rung it stopped at; a run whose
    bracket still waits for a decision has none yet (a dry run stops there)."""
    if HALVING is None:
        return {run.id: None for run in CAMPAIGN.runs()}
    try:
        return HALVING.outcome(read=decided)
    except UserError as error:
        raise WorkflowError(str(error)) from None


def get_final_output(wildcards):
    """What `all` audits each time jobs run: the published report and every file the jobs before it
    leave. Naming them here, not only through the report, makes a deleted run (or its final
    checkpoint, or a record) a missing input that Snakemake remakes, not an intermediate it skips;
    and it ties every job whose output a later job reads through ancient() straight to `all`, so a
    job of those that Snakemake runs again after a crash never leaves `all` unevaluated. Under
    successive halving this is what every run has up to the first rung; get_bracket_output adds
    the rest, which waits for decisions (separate functions, so that while a decision is not made
    `all` still names these: Snakemake replaces only that function's files by the decision).
    """
    paths = CAMPAIGN.paths
    records = [
        paths.report_index,
        paths.audit_runs,
        paths.runs_csv,
        paths.campaign_json,
        CACHE,
        paths.source_hash,
    ]
    for base in CAMPAIGN.bases:
        records += [paths.base_recipe(base), paths.slice_plan(base)]
    for run in CAMPAIGN.runs():
        files = paths.run(run.id)
        ends = PLANS[run.base].ends[:-1]
        if HALVING is not None:
            first = HALVING.search.rung_epochs(PLANS[run.base])[0]
            ends = [end for end in ends if end <= first]
        records += [files.recipe, *(files.slice_record(end) for end in ends)]
        if HALVING is None:
            records += [files.final, files.best, files.results]
    return [str(path) for path in records]


def get_bracket_output(wildcards, bracket):
    """What successive halving's decisions add to `all` for one bracket: each run's records as far
    as its fate takes it (its rung, or its whole budget), and every decision. One function per
    bracket (BRACKET_OUTPUTS), so that a rung waits only for its own bracket: Snakemake asks for
    every bracket's next decision at once."""
    group = HALVING.bracket(bracket)
    try:
        fates = HALVING.fates(group, read=decided)
    except UserError as error:
        raise WorkflowError(str(error)) from None
    paths, records = CAMPAIGN.paths, []
    for run in group.runs():
        files, stop = paths.run(run.id), fates.get(run.id, 0)
        ends = [e for e in PLANS[run.base].ends[:-1] if stop is None or e <= stop]
        records += [files.slice_record(end) for end in ends]
        if stop is None:
            records += [files.final, files.best, files.results]
    decisions = [rung.path for rung in HALVING.walk(group, read=decided)]
    return [str(path) for path in records + decisions]


# The inputs of `all` that wait for decisions, one per bracket (none for the full grid).
BRACKET_OUTPUTS = {
    f"bracket_{index}": functools.partial(get_bracket_output, bracket=group.name)
    for index, group in enumerate(HALVING.groups if HALVING else ())
}


def get_decisions(wildcards):
    """Every rung decision of the campaign's search (none for the full grid)."""
    if HALVING is None:
        return []
    return [
        str(rung.path)
        for bracket in HALVING.groups
        for rung in HALVING.walk(bracket, read=decided)
    ]


def get_run_results(wildcards):
    """The results of every run that trains its whole budget, and the decisions that say which."""
    fates = run_fates()
    return [
        str(named_campaign(wildcards.campaign).run(run.id).results)
        for run in CAMPAIGN.runs()
        if fates.get(run.id, 0) is None
    ] + get_decisions(wildcards)


def get_rung_slices(wildcards):
    """The slice records, at the rung, of every seed of the points a rung decision compares. Not
    ancient(): while a later rung is undecided, `all` reaches the slices before it only through
    its decision, and Snakemake passes a needed rerun on through files that are not ancient (a
    repeated decision writes the same file)."""
    bracket = HALVING.bracket(wildcards.bracket)
    epoch = int(wildcards.epoch)
    try:
        points = HALVING.candidates(bracket, epoch, read=decided)
    except UserError as error:
        raise WorkflowError(str(error)) from None
    path = HALVING.decision_path(bracket, epoch, points)
    if path.name != f"rung-{epoch}-{wildcards.digest}.json":
        raise WorkflowError(
            f"{CAMPAIGN_FILE}: bracket {bracket.name} rung {epoch} decides {path.name} now, not the one asked for"
        )
    run = named_campaign(wildcards.campaign).run
    return [str(run(member.id).slice_record(epoch)) for member in bracket.runs(points)]


def get_frozen_base(wildcards):
    return named_campaign(wildcards.campaign).base_recipe(get_run(wildcards).base)


def get_plan_file(wildcards):
    """The frozen trainer's confirmation of the slice chain (written once; its time never retrains)."""
    return ancient(
        str(named_campaign(wildcards.campaign).slice_plan(get_run(wildcards).base))
    )


def get_slice_epochs(wildcards):
    return CAMPAIGN.slice_epochs(wildcards.base)


def get_expected_ends(wildcards):
    """The slice ends this workflow planned for a base recipe, which the frozen trainer must confirm."""
    return ",".join(map(str, PLANS[wildcards.base].ends))


def get_previous_slice(wildcards):
    """The record of the slice before the one ending at {epoch} (the final slice: the whole budget);
    none for the first. The trainer finds its starting checkpoint itself."""
    plan = PLANS[get_run(wildcards).base]
    try:
        previous = plan.previous(
            int(wildcards.epoch) if "epoch" in wildcards.keys() else plan.epochs
        )
    except UserError as error:
        raise WorkflowError(f"{wildcards.run}: {error}") from None
    run = named_campaign(wildcards.campaign).run(wildcards.run)
    if previous is None:
        return []
    return [ancient(str(run.slice_record(previous)))] + get_promotion(
        wildcards, previous
    )


def get_promotion(wildcards, epoch):
    """Under successive halving, a slice that starts at a rung waits for the rung's decision (a
    checkpoint, no input: a later decision, an extension's, must not make the slice look changed),
    and every rung up to it must let the run's point train on. A stopped run is refused, named at
    the rung it stopped at, whoever asks for it."""
    run = get_run(wildcards)
    if HALVING is None:
        return []
    try:
        bracket = HALVING.bracket_of(run)
        if epoch not in HALVING.rungs(bracket):
            return []
        for rung in HALVING.walk(bracket, read=decided):
            if rung.past is not None and (run.lr, run.beta2) not in rung.past:
                raise WorkflowError(
                    f"{wildcards.run}: stopped at rung {rung.epoch} of bracket {bracket.name} ({rung.path}): it trains "
                    "on only once a decision promotes it (a larger search.keep, or more points)"
                )
            if rung.epoch == epoch:
                break
    except UserError as error:
        raise WorkflowError(f"{wildcards.run}: {error}") from None
    return []


def get_run_resource(wildcards, field):
    """One field of the run's resources (see docs/configuration.md: the most specific scope wins)."""
    run = get_run(wildcards)
    return getattr(CAMPAIGN.job_resources(run.base, run.mode), field) or ""


def per_run(field, scopes):
    """A constant when every job asks the same (Snakemake then evaluates nothing per job, which
    keeps planning 324 runs quick), else a function of the run id."""
    values = {getattr(scope, field) for scope in scopes}
    return (
        values.pop()
        if len(values) == 1
        else functools.partial(get_run_resource, field=field)
    )


def get_slurm_resource(wildcards, name):
    """One of the run's SLURM resources (None: its job asks for none, and Snakemake leaves it out)."""
    run = get_run(wildcards)
    return CAMPAIGN.job_resources(run.base, run.mode).slurm.get(name)


def slurm_resources(scopes):
    """Job resources in the SLURM plugin's names (ebd2n.campaign.spec.Resources.slurm), each a
    constant when every job asks the same, else a function of the run id."""
    asked = [scope.slurm for scope in scopes]
    values = {name: {a.get(name) for a in asked} for a in asked for name in a}
    return {
        name: (
            found.pop()
            if len(found) == 1
            else functools.partial(get_slurm_resource, name=name)
        )
        for name, found in values.items()
    }


# Resources come from the campaign file, and are set here only: training and validation jobs take
# their run's scope, the data-cache job the prepare scope.
RUN_SCOPES = [
    CAMPAIGN.job_resources(base, mode)
    for base in CAMPAIGN.bases
    for mode in CAMPAIGN.modes
]
RUN_RESOURCES = slurm_resources(RUN_SCOPES)
RUN_THREADS = per_run("cpus", RUN_SCOPES)
PREPARE_SCOPE = [CAMPAIGN.job_resources(CAMPAIGN.bases[0], None)]
PREPARE_RESOURCES = slurm_resources(PREPARE_SCOPE)
PREPARE_THREADS = per_run("cpus", PREPARE_SCOPE)


def get_launcher(wildcards):
    """`-m ebd2n.launch`: the run's local GPU slots, then its S x D processes (torchrun, or srun +
    torchrun over the job's nodes) or the warm-start launcher for one."""
    run = get_run(wildcards)
    parallel = BASES[run.base].parallel
    resources = CAMPAIGN.job_resources(run.base, run.mode)
    processes = parallel.pipeline_stages * parallel.data_parallel
    return f"-m ebd2n.launch --gpus {resources.job_gpus} --processes {processes} --nodes {resources.nodes}"


def get_validation_launcher(wildcards):
    """Full validation is one process, on the GPU slots its job asked for."""
    run = get_run(wildcards)
    return (
        f"-m ebd2n.launch --gpus {CAMPAIGN.job_resources(run.base, run.mode).job_gpus}"
    )


def get_run(wildcards):
    """The run a job's wildcards name."""
    try:
        run = parse_run_id(wildcards.run)
    except UserError as error:
        raise WorkflowError(str(error)) from None
    if run.base not in CAMPAIGN.bases:
        raise WorkflowError(
            f"run {wildcards.run}: preset {run.preset} is not in grid.presets of {CAMPAIGN_FILE}"
        )
    return run
