"""ebd2n: train GPT recipes, run LR x beta2 campaigns and read their reports.

This module is the command line: every subcommand's arguments, its --help (what it does and an
example) and the exit statuses; each subcommand then calls one function of `ebd2n.commands`.

Bad input (`UserError`, or arguments argparse refuses) becomes a one-line message on stderr and
exit status 2; a reader that stops early (`ebd2n recipe demo | head -1`) ends the command quietly.
A command that takes a campaign says on stderr which one it resolved, once it is done.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from ebd2n import commands
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

DESCRIPTION = """Train GPT recipes and run learning-rate x beta2 campaigns, from data cache to report.

A whole campaign runs through Snakemake (`./run.sh demo`, or `snakemake --cores all`);
these commands do one step each, e.g. `ebd2n train --config demo` trains one run and writes
its dashboard, `ebd2n report results/demo` rebuilds a campaign's report. A command that takes
a CAMPAIGN accepts its directory (results/<campaign>) or its campaign file, either way."""

CAMPAIGN_HELP = "results/<campaign>, or the campaign file naming it (config/config.yaml, ...)"


class _Parser(argparse.ArgumentParser):
    """argparse, with its refusals on one line like every other bad input."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _command(
    subcommands: argparse._SubParsersAction,
    name: str,
    func: Callable[[argparse.Namespace], None],
    summary: str,
    about: str,
    *examples: str,
) -> argparse.ArgumentParser:
    """A subcommand: its one-line summary (listed by `ebd2n --help`), what it does and example
    command lines (its own --help)."""
    epilog = ("example:\n" if len(examples) == 1 else "examples:\n") + "\n".join(f"  {line}" for line in examples)
    parser = subcommands.add_parser(
        name,
        help=summary,
        description=textwrap.fill(about, 100),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=func)
    return parser


def _recipe_args(parser: argparse.ArgumentParser, positional: bool = True) -> None:
    if positional:
        parser.add_argument("recipe", help="recipe file or preset name (demo, 20m, 254m, ...)")
    else:
        parser.add_argument("--config", dest="recipe", required=True, help="recipe file or preset name")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one recipe key, value parsed as YAML (repeatable), e.g. optimizer.lr=1e-3",
    )


def _campaign_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("campaign", metavar="CAMPAIGN", type=Path, help=CAMPAIGN_HELP)


def _epoch_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected epochs like 2,4,5, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    from ebd2n import __version__

    parser = _Parser(prog="ebd2n", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ebd2n {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    wait = "wait for a live trainer holding the run directory to end (workflow jobs)"

    p = _command(
        subcommands,
        "recipe",
        commands.cmd_recipe,
        "print a resolved recipe, its identity and parameter count",
        "Print the recipe as it trains (preset or file, with every --set applied) and what follows from it: "
        "mode, parameters, token budget, epochs, optimizer steps, and the identity of recipe and cache.",
        "ebd2n recipe demo --set optimizer.lr=1e-3",
    )
    _recipe_args(p)

    p = _command(
        subcommands,
        "plan",
        commands.cmd_plan,
        "the slices a run of the recipe trains in (a campaign's frozen trainer plans its runs)",
        "Cut the recipe's epochs into slices of --epochs-per-slice epochs, as a campaign's jobs train them; "
        "print the epochs each slice ends at, or the plan as JSON.",
        "ebd2n plan demo --epochs-per-slice 1",
    )
    _recipe_args(p)
    p.add_argument("--epochs-per-slice", type=int, required=True, help="epochs one job trains")
    p.add_argument("--output", type=Path, help="also write the plan as JSON (the workflow reads it)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument(
        "--expect",
        type=_epoch_list,
        metavar="E1,E2,...",
        help="refuse (exit 2, nothing written) unless the slices end at exactly these epochs",
    )

    p = _command(
        subcommands,
        "prepare",
        commands.cmd_prepare,
        "build (or reuse) the recipe's tokenized data cache",
        "Tokenize the recipe's data into its cache directory, or reuse the cache already there when its "
        "identity matches; print the cache's identity and record counts.",
        "ebd2n prepare demo --quiet",
    )
    _recipe_args(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = _command(
        subcommands,
        "train",
        commands.cmd_train,
        "train one run, or one slice of it",
        "Train the run the recipe describes into its runtime.output_dir, resuming from its newest valid "
        f"checkpoint; the job that completes the run writes its {FINAL} and {DASHBOARD}.",
        "ebd2n train --config demo --set runtime.output_dir=runs/demo --until-epoch 1",
    )
    _recipe_args(p, positional=False)
    p.add_argument(
        "--resume", type=Path, help="a checkpoint to resume from (default: the run directory's newest valid one)"
    )
    p.add_argument("--until-epoch", type=int, help="stop at this epoch boundary (default: the whole budget)")
    p.add_argument(
        "--plan",
        type=Path,
        help="the run's slice plan (frozen/plans/<base>.json): a run that diverges records every slice end",
    )
    p.add_argument("--wait", action="store_true", help=wait)
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = _command(
        subcommands,
        "validate",
        commands.cmd_validate,
        f"full validation of a run's {FINAL} -> {RESULTS_JSON}",
        f"Evaluate a finished run's {FINAL} over every validation target once and write {RESULTS_JSON} "
        "(with the hash of every file the trainer left, for the audit).",
        "ebd2n validate runs/demo",
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("--device", default=None, help="override the recipe's device")
    p.add_argument("--wait", action="store_true", help=wait)

    p = _command(
        subcommands,
        "export",
        commands.cmd_export,
        "write a Hugging Face run's final model, adapters merged, in the HF layout",
        "Write the final model of a run fine-tuned from a Hugging Face model, its LoRA adapters merged, "
        "as a Hugging Face model directory.",
        "ebd2n export results/finetune-sql-demo/runs/RUN exported/sql-demo",
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("out_dir", type=Path)

    p = _command(
        subcommands,
        "hf-init",
        commands.cmd_hf_init,
        "write a tiny random-weights Hugging Face model (llama, qwen2, qwen2_moe)",
        "Write a tiny Hugging Face model with random weights, for trying fine-tuning offline.",
        "ebd2n hf-init llama models/tiny-llama --vocab-size 512",
    )
    p.add_argument("family", choices=["llama", "qwen2", "qwen2_moe"])
    p.add_argument("out_dir", type=Path)
    p.add_argument(
        "--tokenizer",
        type=Path,
        help="tokenizer.json: its vocabulary size, copied into the model (default: a BPE trained on the "
        "embedded text-to-SQL set)",
    )
    p.add_argument("--vocab-size", type=int, default=512, help="vocabulary of the trained BPE (default 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")

    p = _command(
        subcommands,
        "campaign",
        commands.cmd_campaign,
        "check a campaign file (say what it trains), or prepare its data cache",
        "check: read the campaign file and say what it trains (runs, slices, resources per mode); "
        "prepare: build its data cache. Given the directory, the file under config/ naming it is read.",
        "ebd2n campaign check config/config.yaml",
        "ebd2n campaign prepare results/demo",
    )
    p.add_argument("action", choices=["check", "prepare"])
    _campaign_arg(p)

    p = _command(
        subcommands,
        "freeze",
        commands.cmd_freeze,
        "snapshot the trainer (or, with --base, one base recipe) for a campaign",
        "Copy the trainer's source into the campaign's frozen/ (once: a frozen campaign is left as it is), "
        "or with --base write one base recipe there; every run of the campaign trains with these.",
        "ebd2n freeze config/config.yaml",
        "ebd2n freeze results/demo --base base",
    )
    _campaign_arg(p)
    p.add_argument("--base", help="freeze this base recipe (a preset of the campaign, or 'base')")

    p = _command(
        subcommands,
        "resolve",
        commands.cmd_resolve,
        f"write a run's {RECIPE} from the frozen base and its run id",
        f"Write {RECIPE} of a campaign's run: its frozen base recipe with the learning rate, beta2, seed "
        "and mode its run id names.",
        "ebd2n resolve results/demo/runs/synchronous-lr0.003-beta20.99-seed42",
    )
    p.add_argument("run_dir", type=Path, help="results/<campaign>/runs/<run-id>")

    p = _command(
        subcommands,
        "collect",
        commands.cmd_collect,
        f"tabulate a campaign's runs ({RUNS_CSV}, {CAMPAIGN_JSON})",
        f"Record the campaign's grid, then rewrite {CAMPAIGN_JSON} and {RUNS_CSV} from the runs on disk.",
        "ebd2n collect config/config.yaml --max-jobs 4",
    )
    _campaign_arg(p)
    p.add_argument("--max-jobs", type=int, help="jobs the orchestrator ran at once (recorded in the campaign's record)")

    p = _command(
        subcommands,
        "decide",
        commands.cmd_decide,
        "successive halving: decide which points of a bracket train on after a rung",
        "Rank a bracket's points by their loss at the rung and write which train on (the workflow's "
        "decide_rung job); a decision already written is left as it is.",
        "ebd2n decide config/campaigns/my-halving.yaml --bracket synchronous --epoch 2",
    )
    _campaign_arg(p)
    p.add_argument("--bracket", required=True, help="a preset x mode of the grid: the mode, or <preset>-<mode>")
    p.add_argument("--epoch", type=int, required=True, help="the rung (a slice end)")
    p.add_argument(
        "--digest", help="the decision the workflow expects (refused when the campaign file decides another)"
    )

    p = _command(
        subcommands,
        "select",
        commands.cmd_select,
        "group a runs table (CSV or JSON) and pick the best recipe per mode",
        f"Group a runs table by grid point, pick each mode's best point and estimate its LR optimum; "
        f"write {GROUPS_CSV} and {SELECTION_JSON}.",
        f"ebd2n select results/demo/{RUNS_CSV} --out selection/",
    )
    p.add_argument("runs", type=Path, help="per-run CSV or JSON (run, mode, lr, beta2, seed, status, loss)")
    p.add_argument("--out", type=Path, required=True, help=f"directory for {GROUPS_CSV} and {SELECTION_JSON}")

    p = _command(
        subcommands,
        "extend",
        commands.cmd_extend,
        "write the campaign file's next revision: LRs beyond each winner at a grid edge",
        "Where a mode's winner lies at an end of its LR range, add the next LRs beyond it to the campaign "
        "file (the revision before is kept under extensions/) and print the diff.",
        "ebd2n extend results/demo",
        "ebd2n extend config/campaigns/recipe-sweep-20m.yaml",
    )
    _campaign_arg(p)

    p = _command(
        subcommands,
        "sweep",
        commands.cmd_sweep,
        "run a campaign with Snakemake; with --until-bracketed, extend and rerun until bracketed",
        "Run the campaign with Snakemake; with --until-bracketed, extend its grid past every winner at an "
        "LR edge and run again, until none is. Arguments after -- go to snakemake as typed.",
        "ebd2n sweep config/config.yaml --until-bracketed -- --profile slurm",
    )
    _campaign_arg(p)
    p.add_argument(
        "--until-bracketed",
        action="store_true",
        help="after each run, extend the grid past every winner at an LR edge and run again",
    )
    p.add_argument("--max-extensions", type=int, default=3, help="stop (exit 1) after this many extensions (default 3)")
    p.set_defaults(snakemake_args=[])

    p = _command(
        subcommands,
        "report",
        commands.cmd_report,
        "regenerate a campaign's report from disk, without training",
        "Rebuild the campaign's report (tables, figures, selected recipes, one HTML page) from its files.",
        "ebd2n report results/demo",
    )
    _campaign_arg(p)

    p = _command(
        subcommands,
        "export-tracker",
        commands.cmd_export_tracker,
        "write a campaign's runs into a new MLflow file store (pip install ebd2n[track])",
        "Write one MLflow run per run of the campaign (its parameters, per-step and per-epoch metrics, final "
        "results, a link to its recipe) into a new local MLflow store, read by `mlflow ui` or MlflowClient.",
        "ebd2n export-tracker results/demo --out mlruns/demo",
    )
    _campaign_arg(p)
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="the new store (must not exist): mlflow ui --backend-store-uri DIR",
    )

    p = _command(
        subcommands,
        "dashboard",
        commands.cmd_dashboard,
        f"rewrite a finished run's {DASHBOARD}, or export it as one file",
        f"Rewrite a finished run's {DASHBOARD} from its records, or write it as a single self-contained page.",
        "ebd2n dashboard runs/demo --self-contained demo.html",
    )
    p.add_argument("run_dir", type=Path, help=f"a finished run directory ({RUN_RECORD}, {RECIPE}, {METRICS})")
    p.add_argument(
        "--self-contained",
        type=Path,
        metavar="OUT.html",
        help="write a single-file page (plotly.js inlined) to OUT.html, for sharing one run",
    )

    p = _command(
        subcommands,
        "status",
        commands.cmd_status,
        "where a campaign stands: every run's state, loss, hours and an ETA",
        "Print every run's state, losses and hours, and an ETA, from the campaign's files alone; rewrite "
        "its status.html.",
        "ebd2n status results/demo",
    )
    _campaign_arg(p)

    p = _command(
        subcommands,
        "audit",
        commands.cmd_audit,
        f"check a campaign's completeness and integrity -> {AUDIT_JSON}",
        "Check that every run finished and every record agrees with the files it describes; exit 1 with "
        "one line per violation. A passing full audit can sign what it saw.",
        "ebd2n audit results/demo --stage runs",
    )
    _campaign_arg(p)
    p.add_argument(
        "--stage",
        choices=["runs", "full"],
        default="full",
        help=f"runs: every check but the report's (before it is built; writes {AUDIT_RUNS}); "
        "full (default): all of them",
    )
    p.add_argument(
        "--accept",
        action="store_true",
        help="re-baseline the ledger on the current files (recorded in its history); "
        "only when every other check passes",
    )
    p.add_argument(
        "--sign",
        type=Path,
        metavar="KEY",
        help=f"once the audit passed, sign what it saw with this private key (default: $EBD2N_SIGNING_KEY, else the "
        f"campaign file's signing_key) -> {SIGNATURES}/<n>.dsse.json",
    )

    p = _command(
        subcommands,
        "verify",
        commands.cmd_verify,
        "check a campaign, or a copy of one, against its signed statements (no torch needed)",
        "Check every file of a campaign, or of a copy of it, against its chain of signed statements.",
        f"ebd2n verify results/demo --key keys/{PUBLIC_KEY}",
    )
    _campaign_arg(p)
    p.add_argument("--key", type=Path, required=True, help=f"the signer's public key ({PUBLIC_KEY})")

    p = _command(
        subcommands,
        "key",
        commands.cmd_key,
        "make an Ed25519 key pair to sign audited campaigns with",
        f"Write a new Ed25519 key pair: {PRIVATE_KEY} (mode 600, keep it private) and {PUBLIC_KEY}.",
        "ebd2n key new ~/keys",
    )
    p.add_argument("action", choices=["new"])
    p.add_argument("directory", type=Path, help=f"where {PRIVATE_KEY} (mode 600) and {PUBLIC_KEY} go; outside results/")
    return parser


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """The arguments before `--`, and those after it (None without one): `ebd2n sweep FILE -- SNAKEMAKE ARGS`."""
    if "--" not in argv:
        return argv, None
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def main(argv: list[str] | None = None) -> int:
    own, passed = split_passthrough(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    args = parser.parse_args(own)
    if passed is not None:
        if not hasattr(args, "snakemake_args"):
            parser.error(f"ebd2n {args.command} takes no arguments after --")
        args.snakemake_args = passed
    status = 0
    try:
        args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say, nowhere to say it
        return 141  # 128 + SIGPIPE, what `yes | head -1` reports
    except UserError as error:  # the one line names the file or directory: no line on what was resolved
        print(f"ebd2n {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except AuditFailed as error:  # one line per violation, each saying what is wrong where
        for line in str(error).splitlines():
            print(f"ebd2n {args.command}: {line}", file=sys.stderr)
        status = 1
    except RunFailed as error:
        print(f"ebd2n {args.command}: run failed: {error}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print(f"ebd2n {args.command}: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "resolved", None):
        print(f"ebd2n {args.command}: {args.resolved}", file=sys.stderr)
    return status


def _one_line(error: Exception) -> str:
    """The message with any line breaks joined, so stderr holds exactly one line."""
    return re.sub(r"\s*\n\s*", " ", str(error).strip())


if __name__ == "__main__":
    sys.exit(main())
