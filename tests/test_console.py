"""The quiet console (Snakemake's `--logger ebd2n`, set by profiles/default): real Snakemake on a
two-job workflow shaped like a campaign, one job failing. One line per finished job, the failure
in full with its log, and each campaign's status page rewritten as jobs finish and fail."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_support import REPO, copy_repo

from ebd2n.layout import campaign_of_job_file
from snakemake_logger_plugin_ebd2n import job_label

SRC = Path(__file__).resolve().parents[1] / "src"
GOOD, BAD = "synchronous-lr0.001-beta20.95-seed1", "synchronous-lr0.001-beta20.95-seed2"
SNAKEFILE = f"""
rule all:
    input:
        "results/sweep/runs/{GOOD}/results.json",
        "results/sweep/runs/{BAD}/results.json",

rule validate:
    output:
        "results/sweep/runs/{{run}}/results.json",
    log:
        "results/sweep/logs/runs/{{run}}/final.log",
    shell:
        "if [ {{wildcards.run}} = {BAD} ]; then "
        "echo 'ebd2n train: run failed: loss is NaN at step 9' > {{log}}; exit 1; fi; "
        "echo '{{{{}}}}' > {{output}}"
"""


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    workdir = tmp_path_factory.mktemp("console")
    (workdir / "Snakefile").write_text(SNAKEFILE)
    grid = {"presets": None, "modes": ["synchronous"], "learning_rates": {"synchronous": [0.001]}, "beta2": [0.95]}
    plan = {
        "campaign": "sweep",
        "cost_per_gpu_hour": None,
        "grid": grid,
        "seeds": [1, 2],
        "jobs": {"synchronous": {"gpus": 0, "cpus": 1}},
        "slices": {"base": {"epochs": 1, "epochs_per_slice": 1, "slice_ends": [1]}},
    }
    (workdir / "results/sweep/status").mkdir(parents=True)
    (workdir / "results/sweep/status/plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    completed = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--keep-going", "--logger", "ebd2n"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return completed, workdir


def test_console_one_line_per_finished_job(console) -> None:
    completed, _ = console
    done = [line.split("] ", 1)[1] for line in completed.stderr.splitlines() if " done  " in line]
    assert (completed.returncode, done) == (1, [f"1/3 done  validate sweep/{GOOD}"])


def test_console_shows_the_failure_in_full(console) -> None:
    completed, _ = console
    text = completed.stderr
    result = (
        "Error in rule validate:" in text,
        f"Logfile results/sweep/logs/runs/{BAD}/final.log:" in text,
        "ebd2n train: run failed: loss is NaN at step 9" in text,
        "reason:" in text,
        "message: None" in text,
    )
    assert result == (True, True, True, False, False)


def test_console_rewrites_the_status_page(console) -> None:
    _, workdir = console
    page = (workdir / "results/sweep/status.html").read_text()
    assert "campaign sweep: 2 runs: 1 done, 0 running, 1 failed, 0 pending" in page


DRY_SNAKEFILE = """
RUNS = ["old", "r1", "r2", "r3", "r4", "r5", "r6"]

rule all:
    input:
        "results/sweep/runs.csv",

rule train_final:
    output:
        "results/sweep/runs/{run}/final.pt",
    log:
        "results/sweep/logs/runs/{run}/final.log",
    shell:
        "touch {output}"

rule validate_run:
    input:
        "results/sweep/runs/{run}/final.pt",
    output:
        "results/sweep/runs/{run}/results.json",
    log:
        "results/sweep/logs/runs/{run}/results.log",
    shell:
        "touch {output}"

rule collect_runs:
    input:
        expand("results/sweep/runs/{run}/results.json", run=RUNS),
    output:
        "results/sweep/runs.csv",
    log:
        "results/sweep/logs/runs.log",
    shell:
        "touch {output}"
"""


def _dry_run(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "Snakefile").write_text(DRY_SNAKEFILE)
    old = tmp_path / "results/sweep/runs/old"
    old.mkdir(parents=True)
    (old / "final.pt").touch()
    os.utime(old / "final.pt", (1, 1))  # older than its results.json: the run is complete
    (old / "results.json").touch()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", *flags, "--cores", "1", "--logger", "ebd2n"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_console_dry_run_shows_the_plan(tmp_path: Path) -> None:
    """Snakemake's job table once (its rows in Snakemake's order, which releases differ in), then
    which runs would train or validate, which are reused, and that nothing ran."""
    completed = _dry_run(tmp_path)
    lines = completed.stderr.split("Job stats:\n", 1)[-1].splitlines()
    result = [*lines[:2], *sorted(lines[2:6]), *lines[6:]]
    expected = [
        "job             count",
        "------------  -------",
        "all                 1",
        "collect_runs        1",
        "train_final         6",
        "validate_run        6",
        "total              14",
        "",
        "Dry run of campaign sweep: 14 jobs would run.",
        "would train: 6 runs: r1, r2, r3, r4, r5 and 1 more",
        "would validate: 6 runs: r1, r2, r3, r4, r5 and 1 more",
        "reused untouched: 1 run: old",
        "dry run: nothing was executed",
    ]
    assert (completed.returncode, result) == (0, expected)


def test_console_dry_run_with_p_shows_each_rules_command(tmp_path: Path) -> None:
    completed = _dry_run(tmp_path, "-p")
    text = completed.stderr.split("The first job's command of each rule:\n", 1)[-1]
    result = [re.sub(r"/r[0-9]/", "/R/", line) for line in text.splitlines()[:3]]
    expected = [
        "  train_final: touch results/sweep/runs/R/final.pt",
        "  validate_run: touch results/sweep/runs/R/results.json",
        "  collect_runs: touch results/sweep/runs.csv",
    ]
    assert result == expected


def test_console_quiet_dry_run_shows_the_table_alone(tmp_path: Path) -> None:
    """Under --quiet Snakemake lists no job and ends after its table: the table is all there is to show."""
    completed = _dry_run(tmp_path, "--quiet")
    result = (
        completed.stderr.count("Job stats:"),
        "total              14" in completed.stderr,
        "would train" in completed.stderr,
    )
    assert result == (1, True, False)


def test_console_dry_run_of_the_demo_matches_the_readme(tmp_path: Path) -> None:
    """The README's "36 runs, 152 jobs" of the demo is what its own dry run plans."""
    repo = copy_repo(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    completed = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n"], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    planned = re.search(r"^Dry run of campaign demo: ([0-9]+) jobs would run\.$", completed.stderr, re.M)
    trained = re.search(r"^would train: ([0-9]+) runs:", completed.stderr, re.M)
    claimed = re.search(r"([0-9]+) runs, ([0-9]+) jobs", (REPO / "README.md").read_text(encoding="utf-8"))
    result = (trained and trained.group(1), planned and planned.group(1))
    assert result == (claimed and claimed.group(1), claimed and claimed.group(2))


def test_dry_run_names_the_campaign_and_the_file_it_read(tmp_path: Path) -> None:
    """Without --configfile the workflow plans the demo: it says so before anything else."""
    repo = copy_repo(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    completed = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n"], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    named = [line for line in completed.stderr.splitlines() if line.startswith("ebd2n: campaign ")]
    assert named == ["ebd2n: campaign demo from config/config.yaml -> results/demo"]


def test_dry_run_warns_of_a_null_slurm_account(tmp_path: Path) -> None:
    """The 324-run campaign leaves `account: null`: its dry run says so, before the plan."""
    repo = copy_repo(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "slurm",
            "-n",
            "--configfile",
            "config/campaigns/recipe-sweep-20m.yaml",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    warning = "config/campaigns/recipe-sweep-20m.yaml: resources.default.account is null"
    result = (completed.returncode, warning in completed.stderr.split("Job stats:")[0])
    assert result == (0, True)


@pytest.mark.parametrize(
    ("log", "campaign"),
    [
        ("results/sweep/logs/runs/r1/final.log", "sweep"),
        ("results/sweep/logs/audit.log", "sweep"),
        ("results/logs/caches/tinystories-gpt2.log", None),  # the shared token cache's job: no campaign
        ("results/sweep/runs/r1/final.pt", "sweep"),  # a packed run's own job: its outputs only
        ("results/sweep/report/index.html", None),
        ("logs/sweep/x.log", None),
    ],
)
def test_console_reads_a_jobs_campaign_from_its_files(log: str, campaign: str | None) -> None:
    """The workflow has no campaign wildcard: a job's log or run output, under results/<campaign>/, names it."""
    assert campaign_of_job_file(log) == campaign


@pytest.mark.parametrize(
    ("rule", "wildcards", "label"),
    [
        ("train_final", {"run": "synchronous-lr0.003", "epoch": "2"}, "train_final demo/synchronous-lr0.003 epoch 2"),
        ("train_pack", {"base": "base", "epoch": "1", "digest": "ab12"}, "train_pack demo/base epoch 1 digest ab12"),
        ("all", {}, "all demo"),
    ],
)
def test_a_jobs_label_says_where_it_works_then_the_rest(rule: str, wildcards: dict, label: str) -> None:
    assert job_label(rule, "demo", wildcards) == label
