"""What every subcommand's parser is made of: its help with examples, and the recipe and campaign
arguments several subcommands share."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from pathlib import Path

CAMPAIGN_HELP = "results/<campaign>, or the campaign file naming it (config/config.yaml, ...)"


def command(
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


def recipe_args(parser: argparse.ArgumentParser, positional: bool = True) -> None:
    if positional:
        parser.add_argument("recipe", help="recipe file or preset name (demo, 20m, 254m, ...)")
    else:
        parser.add_argument(
            "--config",
            dest="recipe",
            action="append",
            required=True,
            help="recipe file or preset name; repeated, later files merge over earlier ones (tiny-llm's overlays)",
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one recipe key, value parsed as YAML (repeatable), e.g. optimizer.lr=1e-3",
    )


def campaign_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("campaign", metavar="CAMPAIGN", type=Path, help=CAMPAIGN_HELP)


def epoch_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected epochs like 2,4,5, got {text!r}") from None


def days(text: str) -> float:
    """A non-negative, finite number of days (0: every hash is computed again)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days like 7 or 0.5, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of days of 0 or more, got {text!r}")
    return value
