"""The campaign store's layout: every file and folder name of a campaign and of a run directory.

This module is the only place that spells those names; the package, the workflow
(`workflow/rules/common.smk`) and the test helpers ask it for paths. It imports nothing of the
package, so every layer (the trainer writing a run directory, the audit reading a campaign) can
use it.

```
results/<campaign>/
  campaign.json  runs.csv  audit-runs.json  audit.json  audit.passed  audit-ledger.json  status.html
  status/plan.json
  frozen/        SOURCE_HASH  freeze.json  spec/<n>.json  src/ebd2n/  recipes/<base>.yaml  plans/<base>.json
  runs/<run-id>/ recipe.yaml  train.log  metrics.jsonl  checkpoints.json  final.pt  best.json
                 run.json  report.html  results.json  checkpoints/epoch-<N>.pt  slices/epoch-<N>.json
  report/        index.html  runs.csv  runs.parquet  metrics/mode=<m>/run=<id>/part-0.parquet  results.json  ...
  signatures/    1.dsse.json  2.dsse.json ...  cache-manifest.json
  logs/  benchmarks/
  extensions/    history.json  revision-<n>.yaml
  search/        <bracket>/rung-<epoch>-<digest>.json   (successive halving: each rung's decision)
```
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path("results")
"""Where campaigns write, relative to the directory Snakemake (or ebd2n) runs in."""

# --- a run directory ---------------------------------------------------------------------------
RECIPE = "recipe.yaml"
TRAIN_LOG = "train.log"
METRICS = "metrics.jsonl"
CHECKPOINT_LEDGER = "checkpoints.json"
FINAL = "final.pt"
BEST = "best.json"
RUN_RECORD = "run.json"
DASHBOARD = "report.html"
LIVE_DASHBOARD = "live.html"
"""The page of a run not finished yet (or whose job failed), rewritten as it trains; the job that
completes the run writes DASHBOARD and removes it (ebd2n.report.live_dashboard)."""
RESULTS_JSON = "results.json"
CHECKPOINT_DIR = "checkpoints"
SLICE_RECORDS = "slices"
"""slices/epoch-<N>.json: a slice job's output, saying the run has reached epoch N (written once)."""
TENSORBOARD = "tensorboard"
"""tensorboard/events.out.tfevents.*: the run's metrics for TensorBoard, written as it trains (train.events)."""
JOB_RECORDS = "jobs.jsonl"
"""One line per training or validation job that did work: its start and seconds (ebd2n.job_time)."""
LINEAGE = "lineage.json"
"""A branched run's parent: the run, epoch and SHA-256 of the checkpoint it started from (train.branch)."""
PACKS = "packs.json"
"""The packs a run trained in (`ebd2n train-pack`): each slice end -> the runs it trained with."""
LEASE = "trainer.lease"
"""Held by the one trainer writing a run directory (ebd2n.train.lease); gone when it ends."""

TRAINING_ARTIFACTS = (RECIPE, FINAL, BEST, METRICS, TRAIN_LOG, RUN_RECORD, CHECKPOINT_LEDGER, DASHBOARD)
"""What a finished run's trainer leaves; full validation records the SHA-256 of each."""
RUN_ARTIFACTS = (*TRAINING_ARTIFACTS, RESULTS_JSON)
"""Every file a finished run keeps besides its policy's checkpoints (the audit ledger covers them)."""


def slice_checkpoint(epoch: int) -> str:
    """A checkpoint at an epoch boundary, relative to its run directory."""
    return f"{CHECKPOINT_DIR}/epoch-{epoch}.pt"


def slice_record(epoch: int) -> str:
    """The record a slice job ending at `epoch` leaves, relative to its run directory."""
    return f"{SLICE_RECORDS}/epoch-{epoch}.json"


def checkpoint_epoch(relative: str) -> int | None:
    """The epoch boundary of a `slice_checkpoint` name; None for any other file."""
    return _numbered(relative, slice_checkpoint)


def slice_record_epoch(relative: str) -> int | None:
    """The epoch of a `slice_record` name; None for any other file."""
    return _numbered(relative, slice_record)


def _numbered(relative: str, name: Callable[[int], str]) -> int | None:
    """The number N of a file named `name(N)`; None for any other name."""
    prefix, suffix = name(0).split("0", 1)
    number = relative.removeprefix(prefix).removesuffix(suffix)
    return int(number) if relative.startswith(prefix) and relative.endswith(suffix) and number.isdigit() else None


@dataclass(frozen=True)
class RunPaths:
    """The files of one run directory."""

    directory: Path

    def __truediv__(self, relative: str) -> Path:
        return self.directory / relative

    @property
    def recipe(self) -> Path:
        return self.directory / RECIPE

    @property
    def train_log(self) -> Path:
        return self.directory / TRAIN_LOG

    @property
    def metrics(self) -> Path:
        return self.directory / METRICS

    @property
    def checkpoint_ledger(self) -> Path:
        return self.directory / CHECKPOINT_LEDGER

    @property
    def final(self) -> Path:
        return self.directory / FINAL

    @property
    def best(self) -> Path:
        return self.directory / BEST

    @property
    def record(self) -> Path:
        return self.directory / RUN_RECORD

    @property
    def dashboard(self) -> Path:
        return self.directory / DASHBOARD

    @property
    def live_dashboard(self) -> Path:
        return self.directory / LIVE_DASHBOARD

    @property
    def results(self) -> Path:
        return self.directory / RESULTS_JSON

    @property
    def lease(self) -> Path:
        return self.directory / LEASE

    @property
    def lineage(self) -> Path:
        return self.directory / LINEAGE

    @property
    def packs(self) -> Path:
        return self.directory / PACKS

    def checkpoint(self, epoch: int) -> Path:
        return self.directory / slice_checkpoint(epoch)

    def slice_record(self, epoch: int) -> Path:
        return self.directory / slice_record(epoch)


def run_paths(directory: str | Path) -> RunPaths:
    return RunPaths(Path(directory))


# --- a campaign --------------------------------------------------------------------------------
CAMPAIGN_JSON = "campaign.json"
RUNS_CSV = "runs.csv"
STATUS_PLAN = "status/plan.json"
"""Every run of the campaign with its slices and job resources, written when the workflow starts."""
STATUS_PAGE = "status.html"
AUDIT_RUNS = "audit-runs.json"
AUDIT_JSON = "audit.json"
AUDIT_LEDGER = "audit-ledger.json"
AUDIT_HASHES = "audit-hashes.jsonl"
FIRST_AUDIT = "no earlier audit (this one sets the baseline)"
"""The scope an audit record gives its ledger check when no earlier audit was there to compare with."""
"""The content hashes the last audit verified, each with its file's identity (ebd2n.fileidentity):
a cache, reused only while a file is provably unchanged; never evidence, so never signed."""
AUDIT_PASSED = "audit.passed"
"""The SHA-256 of the audit.json of a passing full audit; absent otherwise (the workflow's target)."""
FROZEN = "frozen"
SOURCE_HASH = "SOURCE_HASH"
FREEZE_RECORD = "freeze.json"
FROZEN_SPEC = "spec"
"""frozen/spec/<n>.json: the campaign's grid and seeds as its campaign file declared them, one file
per change (1.json when first collected, the next with each extension), each written once: what the
audit recomputes campaign.json, runs.csv and the report from."""
SLICE_PLANS = "plans"
RUNS = "runs"
REPORT = "report"
LOGS = "logs"
BENCHMARKS = "benchmarks"
EXTENSIONS = "extensions"
"""extensions/: history.json (each automatic extension of the grid) and revision-<n>.yaml (the
campaign file as it was before extension n + 1)."""
EXTENSION_HISTORY = "history.json"
SEARCH = "search"
CONFIRM = "confirm"
"""search/<bracket>/rung-<epoch>-<digest>.json: one rung decision of a successive-halving campaign
(ebd2n.campaign.search), named by the runs and share it was decided from, written once."""
PACK_RECORDS = "packs"
"""packs/<base>/slice-<epoch>-<digest>.json: one packed-trials job's record (its members), named by
them (ebd2n.train.pack_record.pack_digest), written when the job ends."""
SIGNATURES = "signatures"
"""signatures/<n>.dsse.json: the signed statement of each signed audit, n = 1, 2, ..., each naming
the SHA-256 of the one before (ebd2n.signing)."""
LATEST_STATEMENT = f"{SIGNATURES}/latest.json"
"""The sequence number and SHA-256 of the latest statement, written after it: a deleted latest
statement is then named as missing, not taken for files changed since the one before."""
CACHE_MANIFEST_COPY = f"{SIGNATURES}/cache-manifest.json"
"""The campaign cache's manifest as the signed audit saw it: the cache itself lives outside the campaign."""
UNSIGNED = (LOGS, BENCHMARKS, STATUS_PAGE, STATUS_PLAN.split("/")[0], SIGNATURES, AUDIT_HASHES)
"""Top-level entries no statement covers: job logs and benchmarks, the live status page and plan
(rewritten by every workflow start), the statements themselves (the cache manifest copy excepted)
and the audit's hash memory (what a statement signs is hashed by content when it is signed)."""

# --- a campaign report ------------------------------------------------------------------------
REPORT_INDEX = "index.html"
GROUPS_CSV = "groups.csv"
SELECTION_JSON = "selection.json"
REPORT_RESULTS = "results.json"
LR_RESPONSE_CSV = "lr-response.csv"
CURVES_CSV = "curves.csv"
SCALING_CSV = "scaling.csv"
BRACKETS_CSV = "brackets.csv"
"""report/brackets.csv: each successive-halving bracket's points at every rung (ebd2n.report.halving)."""
RUNS_PARQUET = "runs.parquet"
METRICS_STORE = "metrics"
"""report/metrics/mode=<mode>/run=<run>/part-0.parquet: every run's metrics.jsonl as one Parquet dataset
(ebd2n.report.store)."""
REPORT_ASSETS = "assets"
"""report/assets/: what the report and the campaign's run pages load (plotly.js), kept across rebuilds."""
HISTORY = "history"
"""report/history/<time>/: earlier reports, kept when a report is rebuilt."""


def statement(sequence: int) -> str:
    """The signed statement of a campaign's `sequence`-th signed audit, relative to the campaign."""
    return f"{SIGNATURES}/{sequence}.dsse.json"


def statement_sequence(relative: str) -> int | None:
    """The sequence number of a `statement` name; None for any other file."""
    return _numbered(relative, statement)


# --- a signing key pair (ebd2n key new DIR), kept outside results/ -----------------------------
PRIVATE_KEY = "ebd2n-signing.key"
PUBLIC_KEY = "ebd2n-signing.pub"


def selected_recipe(mode: str) -> str:
    """The report's ready-to-train recipe of a mode's winner."""
    return f"selected-{mode}.yaml"


@dataclass(frozen=True)
class CampaignPaths:
    """The files of one campaign directory."""

    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def repository(self) -> Path:
        """Where the campaign's relative paths start (results/<campaign> lies in it): its
        directory's grandparent, never resolved through links (results/ may be a link to scratch
        space), so a campaign reached through a link, or copied elsewhere, names the same paths."""
        return Path(os.path.abspath(self.directory)).parent.parent

    def relative(self, path: str | Path) -> str:
        """`path` as the campaign's records name it: relative to the repository when under it
        (compared without resolving links), else as given."""
        candidate = Path(path)
        if not candidate.is_absolute():
            return candidate.as_posix()
        try:
            return Path(os.path.abspath(candidate)).relative_to(self.repository).as_posix()
        except ValueError:
            return candidate.as_posix()

    @property
    def campaign_json(self) -> Path:
        return self.directory / CAMPAIGN_JSON

    @property
    def runs_csv(self) -> Path:
        return self.directory / RUNS_CSV

    @property
    def audit_runs(self) -> Path:
        return self.directory / AUDIT_RUNS

    @property
    def audit(self) -> Path:
        return self.directory / AUDIT_JSON

    @property
    def ledger(self) -> Path:
        return self.directory / AUDIT_LEDGER

    @property
    def audit_hashes(self) -> Path:
        return self.directory / AUDIT_HASHES

    @property
    def audit_passed(self) -> Path:
        return self.directory / AUDIT_PASSED

    @property
    def frozen(self) -> Path:
        return self.directory / FROZEN

    @property
    def source_hash(self) -> Path:
        return self.frozen / SOURCE_HASH

    @property
    def freeze_record(self) -> Path:
        return self.frozen / FREEZE_RECORD

    @property
    def frozen_spec(self) -> Path:
        return self.frozen / FROZEN_SPEC

    def spec_version(self, number: int) -> Path:
        """The `number`th recording of the campaign's grid (1 first)."""
        return self.frozen_spec / f"{number}.json"

    @property
    def frozen_src(self) -> Path:
        """PYTHONPATH of the campaign's frozen trainer."""
        return self.frozen / "src"

    @property
    def frozen_package(self) -> Path:
        return self.frozen_src / "ebd2n"

    @property
    def frozen_recipes(self) -> Path:
        return self.frozen / "recipes"

    def base_recipe(self, base: str) -> Path:
        """Frozen base recipe `base` (a preset name, or `base` for a campaign without presets)."""
        return self.frozen_recipes / f"{base}.yaml"

    @property
    def slice_plans(self) -> Path:
        return self.frozen / SLICE_PLANS

    def slice_plan(self, base: str) -> Path:
        """The slice chain of base recipe `base`'s runs, as the frozen trainer plans it (`ebd2n plan`)."""
        return self.slice_plans / f"{base}.json"

    @property
    def runs(self) -> Path:
        return self.directory / RUNS

    def run(self, run_id: str) -> RunPaths:
        return RunPaths(self.runs / run_id)

    @property
    def report(self) -> Path:
        return self.directory / REPORT

    @property
    def report_index(self) -> Path:
        return self.report / REPORT_INDEX

    @property
    def status_plan(self) -> Path:
        return self.directory / STATUS_PLAN

    @property
    def status_page(self) -> Path:
        return self.directory / STATUS_PAGE

    @property
    def signatures(self) -> Path:
        return self.directory / SIGNATURES

    @property
    def latest_statement(self) -> Path:
        return self.directory / LATEST_STATEMENT

    @property
    def cache_manifest_copy(self) -> Path:
        return self.directory / CACHE_MANIFEST_COPY

    @property
    def logs(self) -> Path:
        return self.directory / LOGS

    @property
    def benchmarks(self) -> Path:
        return self.directory / BENCHMARKS

    @property
    def search(self) -> Path:
        return self.directory / SEARCH

    def rung_decision(self, bracket: str, epoch: int | str, digest: str) -> Path:
        """The decision at rung `epoch` of `bracket`, made from the runs and share `digest` names."""
        return self.search / bracket / f"rung-{epoch}-{digest}.json"

    def confirm_selection(self, digest: str) -> Path:
        """The points a confirmation trains again on fresh seeds, chosen from the runs `digest` names."""
        return self.directory / CONFIRM / f"selection-{digest}.json"

    @property
    def pack_records(self) -> Path:
        return self.directory / PACK_RECORDS

    def pack_record(self, base: str, epoch: int | str, digest: str) -> Path:
        """The record of the packed job training base `base`'s runs that `digest` names to `epoch`."""
        return self.pack_records / base / f"slice-{epoch}-{digest}.json"

    @property
    def extension_history(self) -> Path:
        return self.directory / EXTENSIONS / EXTENSION_HISTORY

    def campaign_revision(self, extension: int) -> Path:
        """The campaign file as it was before extension `extension` (1, 2, ...) rewrote it."""
        return self.directory / EXTENSIONS / f"revision-{extension - 1}.yaml"


def named_campaign(name: str) -> CampaignPaths:
    """results/<name>."""
    return CampaignPaths(RESULTS / name)


def campaign_of_job_file(path: str | Path) -> str | None:
    """The campaign whose logs/ or runs/ holds a job's log or output (results/<campaign>/logs/...),
    None for another file (the shared cache's): how the console names a job's campaign, which no
    wildcard carries (a packed run's own job has no log, only its outputs)."""
    parts = Path(path).parts
    if len(parts) > 3 and parts[0] == RESULTS.name and parts[2] in (LOGS, RUNS):
        return parts[1]
    return None


def campaign_of_run(run_dir: str | Path) -> CampaignPaths | None:
    """The campaign holding a run directory (results/<campaign>/runs/<run>), None for a run trained
    on its own: the one place that decides whether a run belongs to a campaign (and so whether its
    page shares the campaign's plotly.js)."""
    resolved = Path(run_dir).absolute()  # not resolve(): results/ may be a link to scratch space
    if len(resolved.parents) > 2 and resolved.parent.name == RUNS and resolved.parents[2].name == RESULTS.name:
        return CampaignPaths(Path(run_dir).parent.parent)
    return None
