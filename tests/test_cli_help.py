"""What a new user first types: `ebd2n --version`, `ebd2n --help` and each subcommand's --help, whose
description says what it does and whose examples are command lines the parser accepts."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ebd2n.cli import build_parser, main, split_passthrough

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "ebd2n", *args], capture_output=True, text=True, env=env, timeout=60)


def test_cli_version_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    completed = _cli("--version")
    assert (completed.returncode, completed.stdout) == (0, f"ebd2n {version}\n")


def test_cli_help_speaks_to_users_and_lists_every_command() -> None:
    text = _cli("--help").stdout
    commands = ["recipe", "prepare", "train", "validate", "campaign", "status", "dashboard", "report", "audit"]
    listed = {line.split()[0] for line in text.splitlines() if line.startswith("    ") and not line.startswith("     ")}
    result = ("thin wrappers" in text, [command for command in commands if command not in listed])
    assert result == (False, [])


def _subcommands() -> list[str]:
    """The subcommands `ebd2n --help` lists."""
    text = _cli("--help").stdout
    return [line.split()[0] for line in text.splitlines() if line.startswith("    ") and not line.startswith("     ")]


SUBCOMMANDS = _subcommands()


def _help(command: str, capsys: pytest.CaptureFixture) -> str:
    """`ebd2n COMMAND --help`, run in this process."""
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    return capsys.readouterr().out


def _examples(text: str) -> list[str]:
    """The command lines under the help's closing `example:` (or `examples:`) heading."""
    _, heading, tail = text.rpartition("\nexample")
    lines = tail.splitlines()
    if not heading or lines[0] not in (":", "s:"):
        return []
    return [line.strip() for line in lines[1:] if line.strip()]


def test_cli_help_lists_every_subcommand_the_parser_has() -> None:
    """The listing the tests below walk is every choice argparse names when refusing an unknown command."""
    refused = _cli("no-such-command").stderr
    choices = refused.split("choose from ")[1].split(")")[0].replace("'", "").split(", ")
    assert (len(SUBCOMMANDS), SUBCOMMANDS) == (len(choices), choices)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_cli_help_of_each_subcommand_describes_it_and_shows_an_example(
    command: str, capsys: pytest.CaptureFixture
) -> None:
    text = _help(command, capsys)
    usage, _, rest = text.partition("\n\n")
    description = rest.split("\n\n")[0]
    examples = _examples(text)
    result = (
        usage.startswith(f"usage: ebd2n {command}"),
        len(description.split()) >= 8,
        description.startswith(("positional", "options")),
        bool(examples),
        all(example.startswith(f"ebd2n {command} ") for example in examples),
    )
    assert result == (True, True, False, True, True), text


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_cli_help_examples_parse(command: str, capsys: pytest.CaptureFixture) -> None:
    """Each example line of a subcommand's --help is a command line the parser accepts, as `main` splits it."""
    examples = _examples(_help(command, capsys))
    parsed = []
    for example in examples:
        own, passed = split_passthrough(shlex.split(example)[1:])
        args = build_parser().parse_args(own)
        parsed.append((args.command, passed is None or hasattr(args, "snakemake_args")))
    assert parsed == [(command, True)] * len(examples)


def test_cli_help_examples_refuse_what_the_parser_refuses(capsys: pytest.CaptureFixture) -> None:
    """The check above can fail: a line with an unknown option exits 2, as every bad command line does."""
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["status", "results/demo", "--colour"])
    assert (exit.value.code, "unrecognized arguments: --colour" in capsys.readouterr().err) == (2, True)
