"""What each `ebd2n` subcommand does: one package call, and what it prints.

`ebd2n.cli` parses the command line and hands the arguments to one of these. A command that takes a
campaign resolves it with `ebd2n.campaign.locate` (directory or file, either way) and leaves the line
saying what it resolved in `args.resolved`, for `ebd2n.cli.main` to print once the command is done
(not on a refusal, whose one line names the file already). Heavy imports (torch, polars,
matplotlib) happen inside the commands so `ebd2n --help` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ebd2n.errors import AuditFailed, UserError
from ebd2n.layout import GROUPS_CSV, SELECTION_JSON
from ebd2n.outcomes import CheckStatus

if TYPE_CHECKING:
    from ebd2n.campaign.locate import Located


def cmd_recipe(args: argparse.Namespace) -> None:
    from ebd2n.config import count_parameters, dump_recipe, load_recipe, recipe_identity
    from ebd2n.data import find_cache_identity
    from ebd2n.train.budget import budget_of

    recipe = load_recipe(args.recipe, args.overrides)
    budget = budget_of(recipe)  # the checks `train` applies: a recipe shown here is one that trains
    cache_identity = find_cache_identity(recipe.data.cache_dir)
    print(dump_recipe(recipe), end="")
    print("---")
    print(f"mode: {recipe.mode}")
    print(f"parameters: {count_parameters(recipe.model):,}")
    epoch = budget.epoch_tokens
    print(f"training tokens: {budget.total_tokens:,}")
    print(f"epochs: {budget.epochs}")
    print(f"tokens per epoch: {epoch:,.0f}" if epoch.is_integer() else f"tokens per epoch: {epoch:,.2f}")
    print(f"optimizer steps: {budget.total_steps:,}")
    print(f"cache identity: {cache_identity or 'not prepared (identity below assumes no cache)'}")
    print(f"recipe identity: {recipe_identity(recipe, cache_identity)}")


def cmd_plan(args: argparse.Namespace) -> None:
    from ebd2n.config import load_recipe
    from ebd2n.train.plan import plan_json, recipe_plan, write_slice_plan

    parent = load_recipe(args.parent) if args.parent else None
    plan = recipe_plan(load_recipe(args.recipe, args.overrides), args.epochs_per_slice, parent)
    if args.expect is not None and list(plan.ends) != args.expect:
        raise UserError(
            f"--expect {','.join(map(str, args.expect))}: this trainer cuts {plan.epochs} epochs into slices ending at "
            f"{','.join(map(str, plan.ends))} (was the checkout's budget edited while the campaign was being frozen? "
            "run the workflow again: it plans with the frozen trainer)"
        )
    if args.output:
        write_slice_plan(plan, args.output)
    if args.json:
        print(plan_json(plan), end="")
    else:
        where = f" -> {args.output}" if args.output else ""
        ends = ", ".join(map(str, plan.ends))
        branch = f", branching at epoch {plan.branch} from {args.parent}'s trunk" if plan.branch else ""
        print(f"{plan.epochs} epochs in {len(plan.ends)} slice(s) ending at epochs {ends}{branch}{where}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from ebd2n.config import load_recipe
    from ebd2n.data import prepare_cache

    recipe = load_recipe(args.recipe, args.overrides)
    cache = prepare_cache(
        recipe.data,
        recipe.model.vocab_size,
        progress=not args.quiet and sys.stderr.isatty(),
        context_length=recipe.model.context_length,
    )
    print(f"cache {cache.directory}  identity {cache.identity}")
    for line in cache.record_counts():
        print(line)


def cmd_train(args: argparse.Namespace) -> None:
    summary = train_job(
        args.recipe,
        args.overrides,
        resume=args.resume,
        until_epoch=args.until_epoch,
        progress=not args.quiet and sys.stderr.isatty(),
        wait=args.wait,
        plan=args.plan,
        branch_from=args.branch_from,
    )
    if summary is not None:
        print(summary)


def cmd_train_pack(args: argparse.Namespace) -> None:
    lines = train_pack_job(
        args.run_dirs, until_epoch=args.until_epoch, wait=args.wait, plan=args.plan, record=args.record
    )
    print("\n".join(lines))


def cmd_validate(args: argparse.Namespace) -> None:
    print("\n".join(validate_job(args.run_dir, device=args.device, wait=args.wait)))


def train_job(recipe: str | list[str], overrides: list[str], **options: Any) -> str | None:
    """`ebd2n train`'s job: ebd2n.train.jobs.train_job (the same options) keeping the run's dashboards."""
    from ebd2n.report.run_pages import RunDashboards
    from ebd2n.train import jobs

    return jobs.train_job(recipe, overrides, pages=RunDashboards(), **options)


def train_pack_job(run_dirs: list[Path], **options: Any) -> list[str]:
    """`ebd2n train-pack`'s job: ebd2n.train.jobs.train_pack_job (the same options) keeping each run's dashboards."""
    from ebd2n.report.run_pages import RunDashboards
    from ebd2n.train import jobs

    return jobs.train_pack_job(run_dirs, pages=RunDashboards(), **options)


def validate_job(run_dir: Path, device: str | None = None, wait: bool = False) -> list[str]:
    """Fully validate a run's final model and write its dashboard with the result (also where its
    training job was killed before the page); return the lines the job prints: the result, then the
    job's usage."""
    from ebd2n.evaluate import validate_run
    from ebd2n.provenance import job_usage
    from ebd2n.report.run_pages import RunDashboards
    from ebd2n.train.records import RunRecord

    pages = RunDashboards()
    run_dir = Path(run_dir)
    trained = RunRecord(run_dir).finished
    if trained:
        pages.remove_live(run_dir)  # a killed training job's, left beside the finished run's page
    from ebd2n.outcomes import Outcome
    from ebd2n.train.records import DIVERGENCE, Divergence

    page = (lambda result: pages.final(run_dir, result)) if trained else None  # with the result it ranks by
    results = validate_run(run_dir, device=device, wait=wait, page=page)
    if results["status"] == Outcome.DIVERGED:
        outcome = f"{run_dir}: {Divergence.of(results[DIVERGENCE]).describe()}; full validation {results['validation']}"
    elif results["status"] == Outcome.FAILED:  # recorded in results.json, which the report and the audit show
        outcome = f"{run_dir}: failed run: {results['reason']}"
    else:
        outcome = f"{run_dir}: full-validation loss {results['loss']:.6f} nats over {results['targets']:,} targets"
    return [outcome, job_usage()]  # the job's log: results.json holds only what the checkpoint determines


def cmd_export(args: argparse.Namespace) -> None:
    from ebd2n.export import export_run

    print(f"exported {export_run(args.run_dir, args.out_dir)} (adapters merged)")


def cmd_hf_init(args: argparse.Namespace) -> None:
    from ebd2n.hf_init import tiny_hf_model

    out = tiny_hf_model(args.family, args.out_dir, args.vocab_size, seed=args.seed, tokenizer=args.tokenizer)
    print(f"wrote a random {args.family} model to {out}")


def cmd_campaign(args: argparse.Namespace) -> None:
    from ebd2n.campaign.describe import describe_campaign, prepare_campaign_cache

    campaign = _locate(args, need_file=True).campaign()
    print(prepare_campaign_cache(campaign) if args.action == "prepare" else describe_campaign(campaign))


def cmd_freeze(args: argparse.Namespace) -> None:
    from ebd2n.campaign.freeze import freeze_base, freeze_trainer

    campaign = _locate(args, need_file=True).campaign()
    print(freeze_base(campaign, args.base) if args.base else f"frozen trainer, source {freeze_trainer(campaign)}")


def cmd_resolve(args: argparse.Namespace) -> None:
    from ebd2n.campaign.resolve import resolve_run

    print(resolve_run(args.run_dir, args.settings))


def cmd_collect(args: argparse.Namespace) -> None:
    from ebd2n.campaign.collect import collect_campaign

    print(collect_campaign(_locate(args, need_file=True).campaign(), max_jobs=args.max_jobs))


def cmd_decide(args: argparse.Namespace) -> None:
    from ebd2n.campaign.decide import decide_rung

    print(decide_rung(_locate(args, need_file=True).campaign(), args.bracket, args.epoch, args.digest))


def cmd_confirm_select(args: argparse.Namespace) -> None:
    from ebd2n.campaign.confirm_select import write_selection

    print(write_selection(_locate(args, need_file=True).campaign(), args.digest))


def cmd_select(args: argparse.Namespace) -> None:
    from ebd2n.campaign.analysis import failed_runs, group_runs, load_runs, select, table_axes, write_selection
    from ebd2n.campaign.optimum import lr_optima, optimum_lines

    runs = load_runs(args.runs)
    groups = group_runs(runs, axes=table_axes(runs))
    optima = lr_optima(groups, runs)
    write_selection(groups, select(groups), args.out, optima)
    for run, why in failed_runs(runs).items():
        print(f"not counted: {run} ({why})")
    for line in optimum_lines(optima):
        print(line)
    print(f"{args.out / GROUPS_CSV} and {args.out / SELECTION_JSON} written")


def cmd_extend(args: argparse.Namespace) -> None:
    from ebd2n.campaign.extend import extend_campaign

    located = _locate(args, need_file=True)
    extension = extend_campaign(located.directory, located.file)
    if extension is None:
        print(
            f"{located.directory}: nothing to add: no mode's winner lies at an edge of its LR range that the "
            "campaign file does not already extend past (run the campaign, then extend again)"
        )
        return
    print(extension.diff, end="")
    print(extension.summary())


def cmd_sweep(args: argparse.Namespace) -> None:
    from ebd2n.campaign.sweep import sweep

    sweep(_locate(args, need_file=True).file, args.snakemake_args, args.until_bracketed, args.max_extensions)


def cmd_report(args: argparse.Namespace) -> None:
    from ebd2n.report import build_report

    print(f"report {build_report(_locate(args).directory)}")


def cmd_export_tracker(args: argparse.Namespace) -> None:
    from ebd2n.report.tracker import export_mlflow

    print(f"mlflow store {export_mlflow(_locate(args).directory, args.out)}")


def cmd_dashboard(args: argparse.Namespace) -> None:
    from ebd2n.layout import CampaignPaths
    from ebd2n.report.dashboard import write_dashboard

    if CampaignPaths(args.run_dir).status_plan.is_file():  # a campaign: its live page, the explorer included
        from ebd2n.campaign.status import campaign_status
        from ebd2n.report.status_page import write_status_page

        if args.self_contained is not None:
            raise UserError(
                f"--self-contained: {args.run_dir} is a campaign directory; only a run's page travels alone "
                f"(ebd2n dashboard {args.run_dir}/runs/RUN --self-contained OUT.html)"
            )
        print(f"status page {write_status_page(args.run_dir, campaign_status(args.run_dir))}")
    elif args.self_contained is None:
        print(f"dashboard {write_dashboard(args.run_dir)}")
    else:
        print(f"dashboard {write_dashboard(args.run_dir, args.self_contained, self_contained=True)}")


def cmd_status(args: argparse.Namespace) -> None:
    from ebd2n.campaign.status import campaign_status
    from ebd2n.campaign.status_display import finished, format_status
    from ebd2n.report.status_page import write_status_page

    directory = _locate(args).directory
    status = campaign_status(directory)
    page = write_status_page(directory, status)
    print(format_status(status, colour=sys.stdout.isatty()))
    left = "" if finished(status) else " (reloads itself while runs are left; run ebd2n status again to refresh it)"
    print(f"page {page}{left}")


def cmd_audit(args: argparse.Namespace) -> None:
    from ebd2n.audit import audit_campaign, violations
    from ebd2n.audit.sign import sign_audit
    from ebd2n.signing.keys import key_id
    from ebd2n.signing.statement import signing_key

    if args.sign and args.stage != "full":
        raise UserError("--sign: only the full audit signs (drop --stage runs)")
    directory = _locate(args).directory
    key = signing_key(directory, args.sign) if args.stage == "full" else None  # a bad key: refused before any write
    record = audit_campaign(
        directory, stage=args.stage, accept=args.accept, full=args.full, rehash_after_days=args.rehash_after
    )
    marks = {CheckStatus.PASSED: "ok  ", CheckStatus.FAILED: "FAIL", CheckStatus.NOT_APPLICABLE: "n/a "}
    for check in record["checks"]:
        print(f"{marks[check['status']]} {check['name']} ({check['scope']})")
        for note in check.get("notes", []):
            print(f"     {note}")
    print(record["hashing"])
    print(record["summary"])
    if not record["passed"]:
        raise AuditFailed("\n".join(violations(record)))
    if key is not None:
        print(f"signed {sign_audit(directory, key, record)} with key id {key_id(key.public_key())}")


def cmd_verify(args: argparse.Namespace) -> None:
    from ebd2n.signing.keys import key_id, load_public
    from ebd2n.signing.statement import verify_campaign

    public = load_public(args.key)
    directory = _locate(args).directory
    result = verify_campaign(directory, public)
    if result.problems:
        raise AuditFailed("\n".join(result.problems))
    audited = result.predicate.get("audit", {}).get("audited")
    print(
        f"verified {directory}: {result.files:,} files as signed by key id {key_id(public)} "
        f"(statement {result.statements} of its chain, audit of {audited})"
    )


def cmd_key(args: argparse.Namespace) -> None:
    from ebd2n.signing.keys import key_id, load_public, new_key_pair

    private, public = new_key_pair(args.directory)
    print(f"private key {private} (mode 600): keep it outside results/, never publish or commit it")
    print(f"public key {public} (key id {key_id(load_public(public))}): publish it, readers verify with it")


def _locate(args: argparse.Namespace, need_file: bool = False) -> Located:
    """The campaign the command line names (directory or file); the line saying which is kept for main."""
    from ebd2n.campaign.locate import locate_campaign

    located = locate_campaign(args.campaign, need_file)
    args.resolved = located.describe()
    return located
