"""ebd2n: train GPT recipes, run LR x beta2 campaigns and read their reports.

This module is the command line: its parser, whose subcommands `ebd2n.subcommands` declares by
group (arguments, --help with what each does and an example), and the exit statuses; each
subcommand then calls one function of `ebd2n.commands`.

Bad input (`UserError`, or arguments argparse refuses) becomes a one-line message on stderr and
exit status 2; a reader that stops early (`ebd2n recipe demo | head -1`) ends the command quietly.
A command that takes a campaign says on stderr which one it resolved, once it is done.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from ebd2n.errors import AuditFailed, RunFailed, UserError
from ebd2n.faults import slow_start
from ebd2n.subcommands.campaigns import add_campaign_commands
from ebd2n.subcommands.results import add_result_commands
from ebd2n.subcommands.runs import add_run_commands

DESCRIPTION = """Train GPT recipes and run learning-rate x beta2 campaigns, from data cache to report.

A whole campaign runs through Snakemake (`./run.sh demo`, or `snakemake --cores all`);
these commands do one step each, e.g. `ebd2n train --config demo` trains one run and writes
its dashboard, `ebd2n report results/demo` rebuilds a campaign's report. A command that takes
a CAMPAIGN accepts its directory (results/<campaign>) or its campaign file, either way."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its refusals on one line like every other bad input."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from ebd2n import __version__

    parser = _Parser(prog="ebd2n", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ebd2n {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    add_run_commands(subcommands)
    add_campaign_commands(subcommands)
    add_result_commands(subcommands)
    return parser


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """The arguments before `--`, and those after it (None without one): `ebd2n sweep FILE -- SNAKEMAKE ARGS`."""
    if "--" not in argv:
        return argv, None
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def main(argv: list[str] | None = None) -> int:
    slow_start()
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
