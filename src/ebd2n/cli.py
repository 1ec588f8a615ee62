"""ebd2n: train GPT recipes, run LR x beta2 campaigns and read their reports.

Each command parses its arguments and calls one package function.

Bad input (`UserError`, or arguments argparse refuses) becomes a one-line message on stderr and
exit status 2; a reader that stops early (`ebd2n recipe demo | head -1`) ends the command quietly.
Heavy imports (torch, polars, matplotlib) happen inside the commands so `ebd2n --help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ebd2n.errors import AuditFailed, RunFailed, UserError
from ebd2n.layout import (
    AUDIT_JSON,
    AUDIT_RUNS,
    CAMPAIGN_JSON,
    DASHBOARD,
    FINAL,
    GROUPS_CSV,
    METRICS,
    PRIVATE_KEY,
    PUBLIC_KEY,
    RECIPE,
    RESULTS_JSON,
    RUN_RECORD,
    RUNS_CSV,
    SELECTION_JSON,
    SIGNATURES,
)


def _add_recipe_args(parser: argparse.ArgumentParser, positional: bool = True) -> None:
    if positional:
        parser.add_argument("recipe", help="recipe file or preset name (demo, 20m, 254m, ...)")
    else:
        parser.add_argument("--config", dest="recipe", required=True, help="recipe file or preset name")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one recipe key, value parsed as YAML (repeatable), e.g. optimizer.lr=1e-3",
    )


def cmd_recipe(args: argparse.Namespace) -> None:
    from ebd2n.config import count_parameters, dump_recipe, load_recipe, recipe_identity
    from ebd2n.data import find_cache_identity
    from ebd2n.train.budget import budget_of

    recipe = load_recipe(args.recipe, args.overrides)
    budget_of(recipe)  # the checks `train` applies: a recipe shown here is one that trains
    cache_identity = find_cache_identity(recipe.data.cache_dir)
    print(dump_recipe(recipe), end="")
    print("---")
    print(f"mode: {recipe.mode}")
    print(f"parameters: {count_parameters(recipe.model):,}")
    budget = budget_of(recipe)
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

    plan = recipe_plan(load_recipe(args.recipe, args.overrides), args.epochs_per_slice)
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
        print(f"{plan.epochs} epochs in {len(plan.ends)} slice(s) ending at epochs {', '.join(map(str, plan.ends))}{where}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from ebd2n.config import load_recipe
    from ebd2n.data import prepare_cache

    recipe = load_recipe(args.recipe, args.overrides)
    cache = prepare_cache(recipe.data, recipe.model.vocab_size, progress=not args.quiet and sys.stderr.isatty(),
                          context_length=recipe.model.context_length)
    print(f"cache {cache.directory}  identity {cache.identity}")
    for line in cache.record_counts():
        print(line)


def cmd_train(args: argparse.Namespace) -> None:
    from ebd2n.config import load_recipe, resolve_recipe_path
    from ebd2n.parallel.distributed import is_main_process
    from ebd2n.provenance import job_usage
    from ebd2n.report.dashboard import write_dashboard
    from ebd2n.train import train
    from ebd2n.train.runlog import append_to_train_log

    recipe = load_recipe(args.recipe, args.overrides)
    run_dir = Path(recipe.runtime.output_dir)
    trained = train(
        recipe,
        config_path=resolve_recipe_path(args.recipe),
        resume=args.resume,
        until_epoch=args.until_epoch,
        progress=not args.quiet and sys.stderr.isatty(),
        wait=args.wait,
    )
    if not is_main_process():  # torchrun: the main process writes and speaks for the run
        return
    complete = (run_dir / FINAL).is_file()
    if complete and (trained or not (run_dir / DASHBOARD).is_file()):  # this job completed the run
        append_to_train_log(run_dir, f"dashboard {write_dashboard(run_dir)}")
    if trained:
        append_to_train_log(run_dir, job_usage())
    print(_train_summary(run_dir, trained, args.until_epoch))


def _train_summary(run_dir: Path, trained: bool, until_epoch: int | None) -> str:
    """One line on what the job left: final.pt, or how far the run is (the same command goes on),
    and the last subset loss."""
    from ebd2n.train.runlog import read_metrics

    epochs = [record for record in read_metrics(run_dir) if record["type"] == "epoch"]
    last = epochs[-1]
    loss = f"validation loss {last['val_loss']:.4f}, accuracy {100 * last['val_accuracy']:.2f} % (epoch {last['epoch']} subset)"
    done = "done" if trained else "done already (nothing trained)"
    if (run_dir / FINAL).is_file():
        return f"{done}: {run_dir / FINAL}, dashboard {run_dir / DASHBOARD}; {loss}"
    return f"slice {done}: epoch {until_epoch} of {run_dir}; `ebd2n train` without --until-epoch resumes it; {loss}"


def cmd_validate(args: argparse.Namespace) -> None:
    from ebd2n.evaluate import validate_run
    from ebd2n.provenance import job_usage

    run_dir = Path(args.run_dir)
    trained = all((run_dir / name).is_file() for name in (FINAL, RUN_RECORD))
    if trained and not (run_dir / DASHBOARD).is_file():  # its training job was killed just before writing it
        from ebd2n.report.dashboard import write_dashboard

        write_dashboard(run_dir)
    results = validate_run(run_dir, device=args.device, wait=args.wait)
    if results["status"] == "failed":  # recorded in results.json, which the report and the audit show
        print(f"{args.run_dir}: failed run: {results['reason']}")
    else:
        print(f"{args.run_dir}: full-validation loss {results['loss']:.6f} nats over {results['targets']:,} targets")
    print(job_usage())  # the job's log: results.json holds only what the checkpoint determines


def cmd_export(args: argparse.Namespace) -> None:
    from ebd2n.export import export_run

    print(f"exported {export_run(args.run_dir, args.out_dir)} (adapters merged)")


def cmd_hf_init(args: argparse.Namespace) -> None:
    from ebd2n.hf_init import tiny_hf_model

    out = tiny_hf_model(args.family, args.out_dir, args.vocab_size, seed=args.seed, tokenizer=args.tokenizer)
    print(f"wrote a random {args.family} model to {out}")


def cmd_campaign(args: argparse.Namespace) -> None:
    from ebd2n.campaign.describe import describe_campaign, prepare_campaign_cache
    from ebd2n.campaign.check import load_campaign

    campaign = load_campaign(args.campaign_file)
    print(prepare_campaign_cache(campaign) if args.action == "prepare" else describe_campaign(campaign))


def cmd_freeze(args: argparse.Namespace) -> None:
    from ebd2n.campaign.freeze import freeze_base, freeze_trainer
    from ebd2n.campaign.check import load_campaign

    campaign = load_campaign(args.campaign_file)
    print(freeze_base(campaign, args.base) if args.base else f"frozen trainer, source {freeze_trainer(campaign)}")


def cmd_resolve(args: argparse.Namespace) -> None:
    from ebd2n.campaign.resolve import resolve_run

    print(resolve_run(args.run_dir))


def cmd_collect(args: argparse.Namespace) -> None:
    from ebd2n.campaign.collect import collect_campaign
    from ebd2n.campaign.check import load_campaign

    print(collect_campaign(load_campaign(args.campaign_file), max_jobs=args.max_jobs))


def cmd_decide(args: argparse.Namespace) -> None:
    from ebd2n.campaign.check import load_campaign
    from ebd2n.campaign.workflow import decide_rung

    path, written = decide_rung(load_campaign(args.campaign_file), args.bracket, args.epoch, args.digest)
    decision = json.loads(path.read_text(encoding="utf-8"))
    promoted = ", ".join(decision["continuing"])
    print(f"{path} {'written' if written else 'unchanged'}: bracket {decision['bracket']} rung {args.epoch}: "
          f"{len(decision['continuing'])} of {decision['candidates']} point(s) train on ({promoted})")


def cmd_select(args: argparse.Namespace) -> None:
    from ebd2n.campaign.analysis import failed_runs, group_runs, load_runs, select, write_selection
    from ebd2n.campaign.optimum import lr_optima, optimum_lines

    runs = load_runs(args.runs)
    groups = group_runs(runs)
    optima = lr_optima(groups, runs)
    write_selection(groups, select(groups), args.out, optima)
    for run, why in failed_runs(runs).items():
        print(f"not counted: {run} ({why})")
    for line in optimum_lines(optima):
        print(line)
    print(f"{args.out / GROUPS_CSV} and {args.out / SELECTION_JSON} written")


def cmd_extend(args: argparse.Namespace) -> None:
    from ebd2n.campaign.extend import extend_campaign

    extension = extend_campaign(args.campaign_dir, args.campaign_file)
    if extension is None:
        print(f"{args.campaign_dir}: nothing to add: no mode's winner lies at an edge of its LR range that the "
              "campaign file does not already extend past (run the campaign, then extend again)")
        return
    print(extension.diff, end="")
    print(extension.summary())


def cmd_sweep(args: argparse.Namespace) -> None:
    from ebd2n.campaign.sweep import sweep

    sweep(args.campaign_file, args.snakemake_args, args.until_bracketed, args.max_extensions)


def cmd_report(args: argparse.Namespace) -> None:
    from ebd2n.report import build_report

    print(f"report {build_report(args.campaign_dir)}")


def cmd_export_tracker(args: argparse.Namespace) -> None:
    from ebd2n.report.tracker import export_mlflow

    print(f"mlflow store {export_mlflow(args.campaign_dir, args.out)}")


def cmd_dashboard(args: argparse.Namespace) -> None:
    from ebd2n.report.dashboard import write_dashboard

    if args.self_contained is None:
        print(f"dashboard {write_dashboard(args.run_dir)}")
    else:
        print(f"dashboard {write_dashboard(args.run_dir, args.self_contained, self_contained=True)}")


def cmd_status(args: argparse.Namespace) -> None:
    from ebd2n.campaign.status import campaign_status, finished, format_status, write_status_page

    status = campaign_status(args.campaign_dir)
    page = write_status_page(args.campaign_dir, status)
    print(format_status(status, colour=sys.stdout.isatty()))
    print(f"page {page}" + ("" if finished(status) else " (reloads itself while runs are left; run ebd2n status again to refresh it)"))


def cmd_audit(args: argparse.Namespace) -> None:
    from ebd2n.audit import audit_campaign, violations
    from ebd2n.audit.sign import sign_audit
    from ebd2n.signing.keys import key_id
    from ebd2n.signing.statement import signing_key

    if args.sign and args.stage != "full":
        raise UserError("--sign: only the full audit signs (drop --stage runs)")
    key = signing_key(args.campaign_dir, args.sign) if args.stage == "full" else None  # a bad key: refused before any write
    record = audit_campaign(args.campaign_dir, stage=args.stage, accept=args.accept)
    marks = {"passed": "ok  ", "failed": "FAIL", "not applicable": "n/a "}
    for check in record["checks"]:
        print(f"{marks[check['status']]} {check['name']} ({check['scope']})")
        for note in check.get("notes", []):
            print(f"     {note}")
    print(record["summary"])
    if not record["passed"]:
        raise AuditFailed("\n".join(violations(record)))
    if key is not None:
        print(f"signed {sign_audit(args.campaign_dir, key, record)} with key id {key_id(key.public_key())}")


def cmd_verify(args: argparse.Namespace) -> None:
    from ebd2n.signing.keys import key_id, load_public
    from ebd2n.signing.statement import verify_campaign

    public = load_public(args.key)
    result = verify_campaign(args.campaign_dir, public)
    if result.problems:
        raise AuditFailed("\n".join(result.problems))
    audited = result.predicate.get("audit", {}).get("audited")
    print(f"verified {args.campaign_dir}: {result.files:,} files as signed by key id {key_id(public)} "
          f"(statement {result.statements} of its chain, audit of {audited})")


def cmd_key(args: argparse.Namespace) -> None:
    from ebd2n.signing.keys import key_id, load_public, new_key_pair

    private, public = new_key_pair(args.directory)
    print(f"private key {private} (mode 600): keep it outside results/, never publish or commit it")
    print(f"public key {public} (key id {key_id(load_public(public))}): publish it, readers verify with it")


DESCRIPTION = """Train GPT recipes and run learning-rate x beta2 campaigns, from data cache to report.

A whole campaign runs through Snakemake (`./run.sh demo`, or `snakemake --cores all`);
these commands do one step each, e.g. `ebd2n train --config demo` trains one run and writes
its dashboard, `ebd2n report results/demo` rebuilds a campaign's report."""


def _epoch_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected epochs like 2,4,5, got {text!r}") from None


class _Parser(argparse.ArgumentParser):
    """argparse, with its refusals on one line like every other bad input."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from ebd2n import __version__

    parser = _Parser(prog="ebd2n", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ebd2n {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    p = commands.add_parser("recipe", help="print a resolved recipe, its identity and parameter count")
    _add_recipe_args(p)
    p.set_defaults(func=cmd_recipe)

    p = commands.add_parser("plan", help="the slices a run of the recipe trains in (a campaign's frozen trainer plans its runs)")
    _add_recipe_args(p)
    p.add_argument("--epochs-per-slice", type=int, required=True, help="epochs one job trains")
    p.add_argument("--output", type=Path, help="also write the plan as JSON (the workflow reads it)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--expect", type=_epoch_list, metavar="E1,E2,...",
                   help="refuse (exit 2, nothing written) unless the slices end at exactly these epochs")
    p.set_defaults(func=cmd_plan)

    p = commands.add_parser("prepare", help="build (or reuse) the recipe's tokenized data cache")
    _add_recipe_args(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_prepare)

    p = commands.add_parser("train", help="train one run, or one slice of it")
    _add_recipe_args(p, positional=False)
    p.add_argument("--resume", type=Path, help="a checkpoint to resume from (default: the run directory's newest valid one)")
    p.add_argument("--until-epoch", type=int, help="stop at this epoch boundary (default: the whole budget)")
    p.add_argument("--wait", action="store_true", help="wait for a live trainer holding the run directory to end (workflow jobs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    p = commands.add_parser("validate", help=f"full validation of a run's {FINAL} -> {RESULTS_JSON}")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--device", default=None, help="override the recipe's device")
    p.add_argument("--wait", action="store_true", help="wait for a live trainer holding the run directory to end (workflow jobs)")
    p.set_defaults(func=cmd_validate)

    p = commands.add_parser("export", help="write a Hugging Face run's final model, adapters merged, in the HF layout")
    p.add_argument("run_dir", type=Path)
    p.add_argument("out_dir", type=Path)
    p.set_defaults(func=cmd_export)

    p = commands.add_parser("hf-init", help="write a tiny random-weights Hugging Face model (llama, qwen2, qwen2_moe)")
    p.add_argument("family", choices=["llama", "qwen2", "qwen2_moe"])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--tokenizer", type=Path,
                   help="tokenizer.json: its vocabulary size, copied into the model (default: a BPE trained on the "
                        "embedded text-to-SQL set)")
    p.add_argument("--vocab-size", type=int, default=512, help="vocabulary of the trained BPE (default 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.set_defaults(func=cmd_hf_init)

    p = commands.add_parser("campaign", help="check a campaign file (say what it trains), or prepare its data cache")
    p.add_argument("action", choices=["check", "prepare"])
    p.add_argument("campaign_file", type=Path)
    p.set_defaults(func=cmd_campaign)

    p = commands.add_parser("freeze", help="snapshot the trainer (or, with --base, one base recipe) for a campaign")
    p.add_argument("campaign_file", type=Path)
    p.add_argument("--base", help="freeze this base recipe (a preset of the campaign, or 'base')")
    p.set_defaults(func=cmd_freeze)

    p = commands.add_parser("resolve", help=f"write a run's {RECIPE} from the frozen base and its run id")
    p.add_argument("run_dir", type=Path, help="results/<campaign>/runs/<run-id>")
    p.set_defaults(func=cmd_resolve)

    p = commands.add_parser("collect", help=f"tabulate a campaign's runs ({RUNS_CSV}, {CAMPAIGN_JSON})")
    p.add_argument("campaign_file", type=Path)
    p.add_argument("--max-jobs", type=int, help="jobs the orchestrator ran at once (recorded in the campaign's record)")
    p.set_defaults(func=cmd_collect)

    p = commands.add_parser("decide", help="successive halving: decide which points of a bracket train on after a rung")
    p.add_argument("campaign_file", type=Path)
    p.add_argument("--bracket", required=True, help="a preset x mode of the grid: the mode, or <preset>-<mode>")
    p.add_argument("--epoch", type=int, required=True, help="the rung (a slice end)")
    p.add_argument("--digest", help="the decision the workflow expects (refused when the campaign file decides another)")
    p.set_defaults(func=cmd_decide)

    p = commands.add_parser("select", help="group a runs table (CSV or JSON) and pick the best recipe per mode")
    p.add_argument("runs", type=Path, help="per-run CSV or JSON (run, mode, lr, beta2, seed, status, loss)")
    p.add_argument("--out", type=Path, required=True, help=f"directory for {GROUPS_CSV} and {SELECTION_JSON}")
    p.set_defaults(func=cmd_select)

    p = commands.add_parser("extend", help="write the campaign file's next revision: LRs beyond each winner at a grid edge")
    p.add_argument("campaign_dir", type=Path, help="results/<campaign>")
    p.add_argument("--campaign-file", type=Path,
                   help="the campaign's file (default: the one of config/config.yaml, config/campaigns/*.yaml naming it)")
    p.set_defaults(func=cmd_extend)

    p = commands.add_parser("sweep", help="run a campaign with Snakemake; with --until-bracketed, extend and rerun until bracketed")
    p.add_argument("campaign_file", type=Path)
    p.add_argument("--until-bracketed", action="store_true",
                   help="after each run, extend the grid past every winner at an LR edge and run again")
    p.add_argument("--max-extensions", type=int, default=3, help="stop (exit 1) after this many extensions (default 3)")
    p.set_defaults(func=cmd_sweep, snakemake_args=[])
    p.epilog = "Arguments after -- go to snakemake as typed: ebd2n sweep FILE --until-bracketed -- --profile slurm"

    p = commands.add_parser("report", help="regenerate a campaign's report from disk, without training")
    p.add_argument("campaign_dir", type=Path, help="results/<campaign>")
    p.set_defaults(func=cmd_report)

    p = commands.add_parser("export-tracker", help="write a campaign's runs into a new MLflow file store (ebd2n[track])")
    p.add_argument("campaign_dir", type=Path, help="results/<campaign>")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the new store: mlflow ui --backend-store-uri DIR")
    p.set_defaults(func=cmd_export_tracker)

    p = commands.add_parser("dashboard", help=f"rewrite a finished run's {DASHBOARD}, or export it as one file")
    p.add_argument("run_dir", type=Path, help=f"a finished run directory ({RUN_RECORD}, {RECIPE}, {METRICS})")
    p.add_argument("--self-contained", type=Path, metavar="OUT.html",
                   help="write a single-file page (plotly.js inlined) to OUT.html, for sharing one run")
    p.set_defaults(func=cmd_dashboard)

    p = commands.add_parser("status", help="where a campaign stands: every run's state, loss, hours and an ETA")
    p.add_argument("campaign_dir", type=Path, help="results/<campaign>")
    p.set_defaults(func=cmd_status)

    p = commands.add_parser("audit", help=f"check a campaign's completeness and integrity -> {AUDIT_JSON}")
    p.add_argument("campaign_dir", type=Path, help="results/<campaign>")
    p.add_argument(
        "--stage", choices=["runs", "full"], default="full",
        help=f"runs: every check but the report's (before it is built; writes {AUDIT_RUNS}); full (default): all of them",
    )
    p.add_argument(
        "--accept", action="store_true",
        help="re-baseline the ledger on the current files (recorded in its history); only when every other check passes",
    )
    p.add_argument(
        "--sign", type=Path, metavar="KEY",
        help=f"once the audit passed, sign what it saw with this private key (default: $EBD2N_SIGNING_KEY, else the "
             f"campaign file's signing_key) -> {SIGNATURES}/<n>.dsse.json",
    )
    p.set_defaults(func=cmd_audit)

    p = commands.add_parser("verify", help="check a campaign, or a copy of one, against its signed statements (no torch needed)")
    p.add_argument("campaign_dir", type=Path, help="results/<campaign>, or a copy of it")
    p.add_argument("--key", type=Path, required=True, help=f"the signer's public key ({PUBLIC_KEY})")
    p.set_defaults(func=cmd_verify)

    p = commands.add_parser("key", help="make an Ed25519 key pair to sign audited campaigns with")
    p.add_argument("action", choices=["new"])
    p.add_argument("directory", type=Path, help=f"where {PRIVATE_KEY} (mode 600) and {PUBLIC_KEY} go; outside results/")
    p.set_defaults(func=cmd_key)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    passed = argv[argv.index("--") + 1 :] if "--" in argv else None  # `ebd2n sweep FILE -- SNAKEMAKE ARGS`
    parser = build_parser()
    args = parser.parse_args(argv[: argv.index("--")] if passed is not None else argv)
    if passed is not None:
        if not hasattr(args, "snakemake_args"):
            parser.error(f"ebd2n {args.command} takes no arguments after --")
        args.snakemake_args = passed
    try:
        args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say, nowhere to say it
        return 141  # 128 + SIGPIPE, what `yes | head -1` reports
    except UserError as error:
        print(f"ebd2n {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except AuditFailed as error:  # one line per violation, each saying what is wrong where
        for line in str(error).splitlines():
            print(f"ebd2n {args.command}: {line}", file=sys.stderr)
        return 1
    except RunFailed as error:
        print(f"ebd2n {args.command}: run failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ebd2n {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


def _one_line(error: Exception) -> str:
    """The message with any line breaks joined, so stderr holds exactly one line."""
    return re.sub(r"\s*\n\s*", " ", str(error).strip())


if __name__ == "__main__":
    sys.exit(main())
