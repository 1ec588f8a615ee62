"""The Snakemake workflow, run for real on a tiny campaign in a copy of the repository.

Every test works in tmp_path on a copy of workflow/, config/, profiles/, slurm/ and src/ (which
holds the presets), so editing "the package" or "a preset" never touches this checkout. One finished
campaign (one run, two slices) is built per module and copied into each test that needs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import torch
import yaml
from workflow_support import TIMEOUT, TINY, assert_states_equal, copy_repo, environment, snakemake, write_campaign

from ebd2n.campaign.check import load_campaign
from ebd2n.errors import UserError
from ebd2n.provenance import source_hash
from ebd2n.quantities import format_duration

RUN = "synchronous-lr0.003-beta20.99-seed42"
PER_RUN_RULES = ("resolve_recipe", "train_slice", "train_final", "validate_run")


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a Snakemake run, without the total."""
    block = output.split("Job stats:", 1)[1]
    rows = re.findall(r"^(\w+)\s+(\d+)$", block.split("\n\n", 1)[0], flags=re.MULTILINE)
    return {name: int(count) for name, count in rows if name != "total"}


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def engine_state(path: Path) -> dict:
    return torch.load(path, weights_only=True, map_location="cpu")["engine"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository copy holding the tiny campaign, finished (one run, two slices)."""
    repo = copy_repo(tmp_path_factory.mktemp("finished"))
    snakemake(repo, "--configfile", write_campaign(repo, TINY))
    return repo


@pytest.fixture
def repo(finished: Path, tmp_path: Path) -> Path:
    """A private copy of the finished campaign (timestamps and Snakemake's records kept)."""
    destination = tmp_path / "repo"
    shutil.copytree(finished, destination, symlinks=True)
    return destination


@pytest.mark.slow
def test_workflow_finished_campaign_has_every_artifact(repo: Path) -> None:
    run = repo / "results/tiny/runs" / RUN
    result = {path.name for path in run.iterdir()}
    assert {"best.json", "final.pt", "metrics.jsonl", "recipe.yaml", "results.json", "train.log"} <= result
    assert not (run / "checkpoints").exists()  # the slice checkpoint was let go, with its folder (policy final)
    assert (
        (repo / "results/tiny/runs.csv")
        .read_text()
        .splitlines()[1]
        .startswith(f"{RUN},synchronous,0.003,0.99,42,complete,")
    )
    assert (run / "train.log").read_text().count("########## job ") == 2


@pytest.mark.slow
def test_workflow_report_cost_is_the_jobs_recorded_time_with_the_wall_clock_beside_it(repo: Path) -> None:
    """The run's hours on the page are the seconds its three jobs (two slices, the full validation)
    recorded, times the CPUs they asked for. Each record spans what Snakemake's benchmark file of
    the job measures, start-up included, short of the shell's start and what the job does after its
    work is committed (its page, the interpreter's exit: under 2 s); the
    campaign's wall-clock time stands beside, from the first job's start to the last one's end."""
    campaign = repo / "results/tiny"
    records = [json.loads(line) for line in (campaign / "runs" / RUN / "jobs.jsonl").read_text().splitlines()]
    benchmarks = {
        path.relative_to(campaign / "benchmarks/runs" / RUN).as_posix(): float(
            path.read_text().splitlines()[1].split()[0]
        )
        for path in (campaign / "benchmarks/runs" / RUN).rglob("*.tsv")
    }
    measured = {"slices/epoch-1.tsv": records[0], "final.tsv": records[1], "results.tsv": records[2]}
    cost = json.loads((campaign / "report/results.json").read_text())["cost"]
    run = cost["runs"][0]
    page = (campaign / "report/index.html").read_text()
    started = datetime.fromisoformat(records[0]["started"])
    ended = max(datetime.fromisoformat(r["started"]) + timedelta(seconds=r["seconds"]) for r in records)
    result = (
        [(record["kind"], record["epoch"]) for record in records],
        sorted(benchmarks) == sorted(measured),
        [name for name, record in measured.items() if not 0 < benchmarks[name] - record["seconds"] < 2.0],
        round(run["cpu_hours"] * 3600, 6),
        "3 training and validation jobs recorded, each from its process&#39;s start (start-up included)" in page,
        f"Wall-clock time: {format_duration((ended - started).total_seconds())}, from the first job" in page,
    )
    seconds = sum(record["seconds"] for record in records)
    assert result == (
        [("train", 1), ("train", 2), ("validate", None)],  # a training line names the epoch it trained to
        True,
        [],
        round(seconds * run["cpus"], 6),
        True,
        True,
    ), benchmarks


@pytest.mark.slow
def test_workflow_rerun_of_finished_campaign_only_audits(repo: Path) -> None:
    """Nothing trains again: the only job is `all`, the audit that runs each time."""
    result = snakemake(repo, "-n", "--configfile", "config/campaigns/tiny.yaml")
    output = result.stdout + result.stderr
    assert "Using workflow specific profile profiles/default" in output  # rerun-triggers: [mtime, input]
    assert job_counts(output) == {"all": 1}


@pytest.mark.slow
@pytest.mark.parametrize("removed", ["", "final.pt"], ids=["run-directory", "final-checkpoint"])
def test_workflow_deleted_run_is_retrained_alone_and_audited(repo: Path, finished: Path, removed: str) -> None:
    """`rm -rf` of a run directory, or of its final.pt, and the same command: exactly that run
    trains again, bitwise as before, and the campaign ends audited (the run named as trained again)."""
    run = repo / "results/tiny/runs" / RUN
    shutil.rmtree(run) if not removed else (run / removed).unlink()
    result = snakemake(repo, "--configfile", "config/campaigns/tiny.yaml")
    counts = job_counts(result.stdout + result.stderr)
    trained = {rule: counts.get(rule, 0) for rule in ("train_slice", "train_final", "validate_run")}
    audit = (repo / "results/tiny/logs/audit.log").read_text()
    assert trained == (
        {"train_slice": 1, "train_final": 1, "validate_run": 1}
        if not removed
        else {"train_slice": 0, "train_final": 1, "validate_run": 1}
    )
    assert (repo / "results/tiny/audit.passed").is_file() and f"{RUN}: trained again since the last audit" in audit
    assert_states_equal(engine_state(run / "final.pt"), engine_state(finished / "results/tiny/runs" / RUN / "final.pt"))


@pytest.mark.slow
def test_workflow_run_file_changed_with_its_time_restored_fails_the_audit(repo: Path) -> None:
    """An edited results.json whose modification time is put back: the same command never says
    "Nothing to be done" over a stale audit.passed; its audit fails, naming the file."""
    path = repo / "results/tiny/runs" / RUN / "results.json"
    times = path.stat()
    path.write_text(json.dumps(json.loads(path.read_text()) | {"accuracy": 0.99}, indent=2) + "\n")
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    result = snakemake(repo, "--configfile", "config/campaigns/tiny.yaml", check=False)
    output = result.stdout + result.stderr
    assert (result.returncode != 0, "Nothing to be done" in output) == (True, False)
    assert f"runs/{RUN}/results.json: changed since the last audit" in output
    assert not (repo / "results/tiny/audit.passed").exists()


@pytest.mark.slow
def test_workflow_extension_trains_only_new_runs(repo: Path) -> None:
    before = tree_hashes(repo / "results/tiny/runs") | tree_hashes(repo / "results/tiny/frozen")
    raw = json.loads(json.dumps(TINY))
    raw["grid"]["learning_rates"]["synchronous"].append(0.004)
    result = snakemake(repo, "--configfile", write_campaign(repo, raw))
    after = tree_hashes(repo / "results/tiny/runs") | tree_hashes(repo / "results/tiny/frozen")
    counts = job_counts(result.stdout + result.stderr)
    per_run = {rule: count for rule, count in counts.items() if rule in PER_RUN_RULES}
    assert per_run == {"resolve_recipe": 1, "train_slice": 1, "train_final": 1, "validate_run": 1}
    assert {key: after[key] for key in before} == before
    assert len((repo / "results/tiny/runs.csv").read_text().splitlines()) == 3


@pytest.mark.slow
def test_workflow_code_and_preset_edits_retrain_nothing(repo: Path) -> None:
    frozen_hash = (repo / "results/tiny/frozen/SOURCE_HASH").read_text().strip()
    before = tree_hashes(repo / "results/tiny/runs")
    trainer = repo / "src/ebd2n/train/trainer.py"
    trainer.write_text(trainer.read_text() + "\n# edited after the campaign started\n")
    preset = repo / "src/ebd2n/config/recipes/demo.yaml"
    preset.write_text(preset.read_text().replace("log_every: 8", "log_every: 4"))
    planner = (
        repo / "src/ebd2n/train/plan.py"
    )  # this checkout would now train a run in one job; the frozen trainer plans 2
    planner.write_text(
        planner.read_text().replace(
            "return [*range(epochs_per_slice, epochs, epochs_per_slice), epochs]", "return [epochs]"
        )
    )
    dry = snakemake(repo, "-n", "--configfile", "config/campaigns/tiny.yaml")
    raw = json.loads(json.dumps(TINY))
    raw["seeds"].append(43)
    snakemake(repo, "--configfile", write_campaign(repo, raw))
    new_run = repo / "results/tiny/runs" / RUN.replace("seed42", "seed43")
    recorded = json.loads((new_run / "results.json").read_text())["source_hash"]
    assert job_counts(dry.stdout + dry.stderr) == {"all": 1}
    assert recorded == frozen_hash != source_hash(repo / "src/ebd2n")
    assert yaml.safe_load((new_run / "recipe.yaml").read_text())["training"]["log_every"] == 8
    assert (new_run / "train.log").read_text().count("########## job ") == 2  # slices 1 and 2, as frozen/plans/ says
    assert json.loads((repo / "results/tiny/frozen/plans/base.json").read_text())["slice_ends"] == [1, 2]
    assert {key: value for key, value in tree_hashes(repo / "results/tiny/runs").items() if key in before} == before


@pytest.mark.slow
def test_workflow_killed_slice_resumes_bitwise(repo: Path, finished: Path) -> None:
    run = repo / "results/tiny/runs" / RUN
    shutil.rmtree(run)
    checkpoint = run / "checkpoints/epoch-1.pt"
    # the run's results as the target: the campaign's own outputs still exist, and Snakemake would
    # take the run's missing files for deleted intermediates
    target = [(run / "results.json").relative_to(repo).as_posix(), "--configfile", "config/campaigns/tiny.yaml"]
    command = [sys.executable, "-m", "snakemake", *target]
    with subprocess.Popen(
        command, cwd=repo, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        pids = wait_for_slice_two(run, process)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # hold it midway through slice 2, then kill it as a node failure would
        slice_one = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
        assert not (run / "final.pt").exists()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=TIMEOUT)
    assert process.returncode != 0, output
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == slice_one
    assert json.loads((run / "checkpoints.json").read_text())["checkpoints/epoch-1.pt"] == slice_one
    result = snakemake(repo, *target)
    log = (run / "train.log").read_text()
    counts = job_counts(result.stdout + result.stderr)
    assert (counts["train_final"], "train_slice" in counts, "resolve_recipe" in counts) == (1, False, False)
    assert log.count("########## job ") == 3
    assert "slice: resume from checkpoints/epoch-1.pt at epoch 1" in log.rsplit("########## job ", 1)[1]
    assert_states_equal(engine_state(run / "final.pt"), engine_state(finished / "results/tiny/runs" / RUN / "final.pt"))


def wait_for_slice_two(run: Path, snakemake: subprocess.Popen, timeout: float = TIMEOUT) -> list[int]:
    """The pids running the run's second slice, once its trainer has opened its job block."""
    deadline = time.monotonic() + timeout
    log = run / "train.log"
    while time.monotonic() < deadline and snakemake.poll() is None:
        if log.exists() and log.read_text().count("########## job ") == 2:
            pids = slice_pids(run)
            if len(pids) == (1 if os.environ.get("EBD2N_WARM") == "0" else 2):  # cold: no fork
                return pids
        time.sleep(0.01)
    raise AssertionError(f"slice 2 of {run.name} never started:\n{snakemake.communicate()[0]}")


def slice_pids(run: Path) -> list[int]:
    """The `python -m ebd2n train --resume` client and the trainer it runs: locally, a process
    forked from the warm-start server (ebd2n.warm); both write to the job's log. Matched by the whole
    path: other tests (another pytest worker's too) train a run of the same name in their copies."""
    log = str(run.parents[1] / "logs/runs" / run.name / "final.log")
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if os.readlink(entry / "fd/1") == log:
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


SLURM_TOOLS = {
    "sbatch": """
        args = sys.argv[1:]
        job_id = 1000 + len(list(STATE.glob("*.job")))
        name = args[args.index("--job-name") + 1]
        (STATE / f"{job_id}.job").write_text(f"{name}|RUNNING")
        with open(STATE / "sbatch.jsonl", "a") as record:
            record.write(json.dumps(args) + "\\n")
        wrap = next(arg[len("--wrap="):] for arg in args if arg.startswith("--wrap="))
        log = args[args.index("--output") + 1].replace("%j", str(job_id))
        env = {**os.environ, "SLURM_JOB_ID": str(job_id)}
        with open(log, "w") as out:
            code = subprocess.call(["sh", "-c", wrap], cwd=args[args.index("-D") + 1], env=env, stdout=out, stderr=out)
        (STATE / f"{job_id}.job").write_text(f"{name}|{'COMPLETED' if code == 0 else 'FAILED'}")
        print(job_id)
    """,
    "squeue": """
        args = sys.argv[1:]
        if "--name" in args:  # a status query: answer once the run's jobs ended, so checks never back off
            name = args[args.index("--name") + 1]
            jobs = [job for job in sorted(STATE.glob("*.job")) if job.read_text().startswith(f"{name}|")]
            for _ in range(500):
                if not any(job.read_text().endswith("|RUNNING") for job in jobs):
                    break
                time.sleep(0.1)
            for job in jobs:
                print(f"{job.stem}|{job.read_text().split('|')[1]}")
    """,
    "srun": """
        args = sys.argv[1:]
        with open(STATE / "srun.jsonl", "a") as record:
            record.write(json.dumps(args) + "\\n")
        command = next(i for i, arg in enumerate(args) if not arg.startswith("-"))
        tasks = int(next((arg.split("=")[1] for arg in args[:command] if arg.startswith("--ntasks=")), 1))
        if tasks == 1:
            os.execvp(args[command], args[command:])
        steps = [subprocess.Popen(args[command:]) for _ in range(tasks)]  # one task per node, all on this machine
        sys.exit(max(step.wait() for step in steps))
    """,
    "sinfo": 'print("PARTITION")\nprint("testpart*")',
    "sacctmgr": 'print("testacct")',
    "sacct": "pass",
    "scancel": "pass",
    "scontrol": 'print("MaxArraySize = 1001")\nprint("MinJobAge = 300 sec")',
}


def install_slurm_tools(bin_dir: Path, state: Path) -> None:
    """Stand-ins for the SLURM commands the executor plugin calls; sbatch runs the job at once."""
    bin_dir.mkdir()
    state.mkdir()
    for name, body in SLURM_TOOLS.items():
        header = (
            f"#!{sys.executable}\nimport json, os, subprocess, sys, time\nfrom pathlib import Path\n"
            f"STATE = Path({str(state)!r})\n"
        )
        path = bin_dir / name
        path.write_text(header + textwrap.dedent(body).strip() + "\n")
        path.chmod(0o755)


@pytest.mark.slow
def test_workflow_slurm_profile_submits_chain_with_campaign_resources(tmp_path: Path, finished: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    shutil.copytree(finished / "results/caches", repo / "results/caches")  # the data-cache job is not submitted
    raw = json.loads(json.dumps(TINY))
    raw["resources"] = {
        "default": {"gpus": 1, "minutes": 7, "mem_mb": 1234, "cpus": 1, "partition": "testpart", "account": "testacct"}
    }
    campaign = write_campaign(repo, raw)
    install_slurm_tools(tmp_path / "bin", tmp_path / "slurm")
    env = environment(tmp_path / "bin")
    target = f"results/tiny/runs/{RUN}/results.json"  # the chain of one run; campaign-level rules run locally
    snakemake(
        repo,
        target,
        "--profile",
        "slurm",
        "--configfile",
        campaign,
        "--slurm-init-seconds-before-status-checks",
        "1",
        env=env,
    )
    submissions = [json.loads(line) for line in (tmp_path / "slurm/sbatch.jsonl").read_text().splitlines()]
    rules = [args[args.index("--comment") + 1].split("_wildcards_")[0] for args in submissions]
    log = (repo / "results/tiny/runs" / RUN / "train.log").read_text()
    assert rules == ["rule_train_slice", "rule_train_final", "rule_validate_run"]
    assert all(
        {"--gpus=1", "-t", "7", "--mem", "1234", "-p", "testpart", "-A", "testacct", "--requeue"} <= set(args)
        for args in submissions
    )
    assert re.findall(r"########## job (\S+) ##########", log) == ["1000", "1001"]


@pytest.mark.slow
def test_workflow_slurm_two_node_job_submits_nodes_and_starts_one_agent_per_node(
    tmp_path: Path, finished: Path
) -> None:
    """A 2-stage x 2-replica run on `nodes: 2, gpus_per_node: 2`: sbatch gets the node layout, and
    the job srun-s a torchrun agent per node (the stand-in srun starts both here, on the CPU)."""
    repo = copy_repo(tmp_path / "repo")
    shutil.copytree(finished / "results/caches", repo / "results/caches")
    raw = json.loads(json.dumps(TINY))
    raw["overrides"].update(
        {
            "training.max_tokens": 8192,
            "training.epoch_tokens": 4096,
            "parallel.pipeline_stages": 2,
            "parallel.data_parallel": 2,
            "parallel.pipeline_depth": 2,
        }
    )
    raw["resources"] = {"default": {"nodes": 2, "gpus_per_node": 2, "minutes": 7, "mem_mb": 1234, "cpus": 1}}
    campaign = write_campaign(repo, raw)
    install_slurm_tools(tmp_path / "bin", tmp_path / "slurm")
    env = environment(tmp_path / "bin") | {"OMP_NUM_THREADS": "1"}
    target = f"results/tiny/runs/{RUN}/results.json"
    snakemake(
        repo,
        target,
        "--profile",
        "slurm",
        "--configfile",
        campaign,
        "--slurm-init-seconds-before-status-checks",
        "1",
        env=env,
    )
    submissions = [json.loads(line) for line in (tmp_path / "slurm/sbatch.jsonl").read_text().splitlines()]
    steps = [json.loads(line) for line in (tmp_path / "slurm/srun.jsonl").read_text().splitlines()]
    record = json.loads((repo / "results/tiny/runs" / RUN / "run.json").read_text())
    assert all(
        {"--nodes=2", "--gres=gpu:2", "--ntasks=2", "-t", "7", "--mem", "1234"} <= set(args) for args in submissions
    )
    assert not any(arg.startswith(("--gpus", "--ntasks-per-gpu")) for args in submissions for arg in args)
    assert [args[:3] for args in steps] == [
        ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1"]
    ] * 2  # one a training slice
    assert all(args[args.index("--nnodes") + 1] == "2" and "c10d" in args for args in steps)
    assert [(entry["stage"], entry["replica"]) for entry in record["placement"]] == [(0, 0), (1, 0), (0, 1), (1, 1)]


def count_planned(repo: Path, campaign: str) -> dict[str, int]:
    result = snakemake(repo, "--profile", "slurm", "-n", "--quiet", "rules", "--configfile", campaign)
    return job_counts(result.stdout + result.stderr)


@pytest.mark.slow
def test_workflow_recipe_sweep_plans_324_runs_and_18_more(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    planned = count_planned(repo, "config/campaigns/recipe-sweep-20m.yaml")
    raw = yaml.safe_load((repo / "config/campaigns/recipe-sweep-20m.yaml").read_text())
    raw["grid"]["learning_rates"]["packed-8"] += [0.0056, 0.006]
    extended = count_planned(repo, write_campaign(repo, raw, "sweep-extended.yaml"))
    result = [
        (counts["train_final"], counts["validate_run"], counts.get("train_slice", 0)) for counts in (planned, extended)
    ]
    assert result == [(324, 324, 0), (342, 342, 0)]


@pytest.mark.slow
def test_workflow_scaling_campaign_plans_the_seeds_jobs(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    result = snakemake(
        repo, "--profile", "slurm", "--summary", "--configfile", "config/campaigns/scaling-minipile.yaml"
    )
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    runs = [
        row[0].split("/")[3] for row in rows if len(row) > 2 and (row[0].endswith("final.pt") or "/slices/" in row[0])
    ]  # one a job
    counts = {run.split("-")[0]: runs.count(run) for run in runs}
    assert counts == {"254m": 2, "483m": 3, "778m": 6, "1.41b": 5}


@pytest.mark.slow
def test_workflow_scaling_campaign_dry_run_shows_the_two_node_submissions(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    result = snakemake(repo, "--profile", "slurm", "-n", "--configfile", "config/campaigns/scaling-minipile.yaml")
    lines = [
        line.strip() for line in (result.stdout + result.stderr).splitlines() if "training jobs asking nodes=" in line
    ]
    assert lines == [
        "11 training jobs asking nodes=2 gres=gpu:4 tasks=2 runtime=1440 mem_mb=256000: 2 runs: "
        "1.41b-synchronous-lr0.0004-beta20.95-seed42, 778m-synchronous-lr0.0005-beta20.95-seed42"
    ], result.stdout


def bad(change) -> dict:
    raw = json.loads(json.dumps(TINY))
    change(raw)
    return raw


BAD = [
    pytest.param(
        bad(lambda r: r.update(epochs=3)),
        "top level: unknown key 'epochs' (the keys here: campaign, description, recipe, ",
        id="unknown-key",
    ),
    pytest.param(
        bad(lambda r: r["grid"]["learning_rates"].update(synchronous=[0.003, 0.003])),
        "[0.003, 0.003] has non-unique elements",
        id="duplicate-lr",
    ),
    pytest.param(bad(lambda r: r.update(seeds=[])), "[] should be non-empty", id="empty-seeds"),
    pytest.param(
        bad(lambda r: r["grid"].update(modes=["packed-1"])),
        "unknown mode 'packed-1' (modes: synchronous, packed-K for K >= 2)",
        id="unknown-mode",
    ),
    pytest.param(
        bad(lambda r: (r.pop("recipe"), r["grid"].update(presets=["99m"]))),
        "recipe 99m: no such file and no such preset",
        id="unknown-preset",
    ),
    pytest.param(
        bad(
            lambda r: (
                r["grid"].update(modes=["packed-4"], learning_rates={"packed-4": [0.003]}),
                r["resources"]["default"].update(gpus=2),
            )
        ),
        "resources for packed-4: gpus 2, but packed-K mode trains its K models on one device",
        id="packed-on-two-gpus",
    ),
]


@pytest.fixture(scope="module")
def bare_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("bare"))


@pytest.mark.slow
@pytest.mark.parametrize(("raw", "message"), BAD)
def test_workflow_bad_campaign_stops_before_any_job(raw: dict, message: str, bare_repo: Path) -> None:
    campaign = write_campaign(bare_repo, raw, "bad.yaml")
    result = snakemake(bare_repo, "--configfile", campaign, check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (bare_repo / "results").exists()


@pytest.mark.slow
def test_workflow_bad_campaign_outside_the_checkout_is_named_as_given(bare_repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "bad.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(bad(lambda r: r.update(seeds=[]))))
    result = snakemake(bare_repo, "-n", "--configfile", str(path), check=False)
    assert (result.returncode, f"campaign file {path}: seeds: [] should be non-empty" in result.stderr) == (2, True), (
        result.stderr
    )


@pytest.mark.parametrize(("raw", "message"), BAD)
def test_package_bad_campaign_same_error(
    raw: dict, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match=re.escape(message)):
        load_campaign(path)
    assert not (tmp_path / "results").exists()


def test_workflow_refuses_a_campaign_frozen_by_an_older_ebd2n(tmp_path: Path) -> None:
    """Its frozen trainer has no `ebd2n plan` and its warm.py no launcher (jobs would exit 0 having
    trained nothing): the workflow refuses at parse, one line, exit status 2."""
    repo = copy_repo(tmp_path / "repo")
    campaign = write_campaign(repo, TINY)
    for extra in ([], ["--base", "base"]):
        subprocess.run(
            [sys.executable, "-m", "ebd2n", "freeze", campaign, *extra],
            cwd=repo,
            check=True,
            env=environment() | {"PYTHONPATH": str(repo / "src")},
            capture_output=True,
            timeout=TIMEOUT,
        )
    frozen = repo / "results/tiny/frozen/src/ebd2n"
    (frozen / "train/plan.py").unlink()
    warm = frozen / "warm.py"
    warm.write_text(warm.read_text().split('\nif __name__ == "__main__":')[0])
    result = snakemake(repo, "--configfile", campaign, check=False)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("Using workflow specific profile")]
    assert (result.returncode, len(lines)) == (2, 1), result.stderr
    assert (
        "frozen by an older ebd2n" in lines[0]
        and "finish the campaign with the ebd2n checkout that froze it" in lines[0]
    )
    assert not (repo / "results/tiny/frozen/plans").exists() and not (repo / "results/tiny/runs").exists()
