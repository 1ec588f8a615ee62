"""YAML reading for recipes, overrides and campaign files: the one YAML reader of ebd2n.

PyYAML follows YAML 1.1, where `1e-3` (no dot) is a *string*: a researcher typing
`--set optimizer.lr=1e-3` would get a type error. This loader is PyYAML's safe loader plus the
YAML 1.2 float syntax, so exponent floats read as numbers everywhere ebd2n reads YAML. It parses
with libyaml where PyYAML has it (about 9x faster: an audit reads one recipe per run).
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

from ebd2n.errors import UserError


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader that also reads `1e-3` and `5E+2` as floats."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no object construction), YAML 1.2 floats included."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def compose_yaml(text: str) -> yaml.Node | None:
    """The node tree of YAML text (with each node's position), for edits that keep the rest of a file."""
    return yaml.compose(text, Loader=_Loader)


def read_text(path: str | os.PathLike, what: str) -> str:
    """A UTF-8 text file's content; a missing, unreadable or non-UTF-8 file is a UserError naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise UserError(f"{what} {path}: not found") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{what} {path}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise UserError(f"{what} {path}: cannot read ({error.strerror or type(error).__name__})") from None


def read_yaml_mapping(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping (empty: {}); every failure is one line naming the file."""
    text = read_text(path, what)
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as error:
        raise UserError(f"{what} {path}: not valid YAML ({first_line(error)})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"{what} {path}: expected a mapping of keys, got {type(raw).__name__}")
    return raw


def first_line(error: BaseException) -> str:
    """The first line of an error's message (parser errors span several)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
