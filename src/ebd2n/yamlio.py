"""YAML reading for recipes, overrides and campaign files.

PyYAML follows YAML 1.1, where `1e-3` (no dot) is a *string*: a researcher typing
`--set optimizer.lr=1e-3` would get a type error. This loader is `yaml.SafeLoader` plus the
YAML 1.2 float syntax, so exponent floats read as numbers everywhere ebd2n reads YAML.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-3` and `5E+2` as floats."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no object construction), YAML 1.2 floats included."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


YAMLError = yaml.YAMLError
