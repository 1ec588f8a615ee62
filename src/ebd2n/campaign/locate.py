"""Name a campaign by its directory (results/<name>) or by its file (a YAML whose `campaign:` key
names it): every command that takes a campaign resolves its argument here, so each accepts both.

Commands that read only what the campaign left on disk (status, report, audit, verify) need the
directory; its frozen/ record holds what the file said. Commands that act on the file's settings
(check, freeze, collect, decide, extend, sweep) need the file: given the directory, they find the
one file under config/ naming it. Light on purpose: `ebd2n verify` runs without torch.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ebd2n.errors import UserError
from ebd2n.layout import CAMPAIGN_JSON, FROZEN, RESULTS, RUNS, STATUS_PLAN, named_campaign
from ebd2n.yamlio import load_yaml, read_yaml_mapping

if TYPE_CHECKING:
    from ebd2n.campaign.file import Campaign

CAMPAIGN_FILES = ("config/config.yaml", "config/campaigns/*.yaml")
"""Where the file of a campaign named by its directory is looked for, relative to the working directory."""
MARKERS = (FROZEN, RUNS, CAMPAIGN_JSON, STATUS_PLAN)
"""What a campaign directory holds at least one of, from the workflow's start on."""
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Located:
    """A campaign as a command line named it: its name, its directory, and its file when known."""

    name: str
    directory: Path
    file: Path | None
    from_file: bool
    """True when the command line gave the file, False when it gave the directory."""

    def describe(self) -> str:
        """One line saying what was resolved, e.g. `campaign demo: results/demo (from config/config.yaml)`."""
        if self.file is None:
            return f"campaign {self.name}: {self.directory}"
        how = f"from {self.file}" if self.from_file else f"file {self.file}, found by its name"
        return f"campaign {self.name}: {self.directory} ({how})"

    def campaign(self) -> Campaign:
        """The checked campaign file (only for a Located that has one)."""
        from ebd2n.campaign.check import load_campaign

        assert self.file is not None, "located without its file"
        return load_campaign(self.file)


def locate_campaign(argument: str | os.PathLike, need_file: bool = False) -> Located:
    """Resolve a command line's campaign: a directory holding a campaign, or a campaign file.

    `need_file`: the command acts on the file's settings, so a directory is matched with the one
    file under config/ naming it (one line, UserError, when none or several do). Otherwise the
    directory must hold a campaign (one line listing the campaigns under results/ when not).
    """
    given = Path(argument)
    if given.is_file():
        name = _named(given)
        located = Located(name, named_campaign(name).directory, given, from_file=True)
        if not need_file:
            _require_campaign_directory(located.directory, f"{given} names campaign {name}, but ")
        return located
    name = Path(os.path.abspath(given)).name  # `.` inside results/<name> names <name>
    if need_file:
        if given.suffix in YAML_SUFFIXES:
            raise UserError(f"{given}: no such campaign file")
        _require_same_directory(given, name)
        return Located(name, given, find_campaign_file(name), from_file=False)
    _require_campaign_directory(given)
    return Located(name, given, None, from_file=False)


def find_campaign_file(name: str, root: Path = Path(".")) -> Path:
    """The one campaign file under `root` (config/config.yaml, config/campaigns/*.yaml) naming `name`."""
    candidates = [path for pattern in CAMPAIGN_FILES for path in sorted(root.glob(pattern))]
    matches = [path for path in candidates if _names(path, name)]
    if len(matches) != 1:
        found = "none" if not matches else ", ".join(map(str, matches))
        raise UserError(
            f"campaign {name}: {len(matches)} campaign files name it under {root.resolve()} ({found}); "
            "give the campaign file itself"
        )
    return matches[0]


def campaigns_under(results: Path = RESULTS) -> list[str]:
    """The names of the campaign directories in `results`, sorted."""
    if not results.is_dir():
        return []
    return sorted(path.name for path in results.iterdir() if is_campaign_directory(path))


def is_campaign_directory(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in MARKERS)


def _require_campaign_directory(directory: Path, lead: str = "") -> None:
    if is_campaign_directory(directory):
        return
    known = campaigns_under()
    listed = f"campaigns under {RESULTS}/: {', '.join(known)}" if known else f"no campaign under {RESULTS}/ here"
    held = f"none of {FROZEN}/, {RUNS}/, {CAMPAIGN_JSON}, {STATUS_PLAN}"
    what = held if directory.exists() else "no such directory"
    raise UserError(f"{lead}{directory}: not a campaign directory ({what}); {listed}")


def _require_same_directory(given: Path, name: str) -> None:
    """A command acting on the campaign file writes to results/<name> under the working directory:
    refused for a directory elsewhere, which it would not touch."""
    expected = named_campaign(name).directory
    if os.path.abspath(given) != os.path.abspath(expected):
        raise UserError(
            f"{given}: this command works on {expected} under the working directory; "
            f"run it from the folder holding {RESULTS}/, or give the campaign file"
        )


def _named(path: Path) -> str:
    """The campaign a file names (its `campaign:` key), refused unless it is a plain directory name."""
    raw = read_yaml_mapping(path, "campaign file")
    name = raw.get("campaign")
    if not isinstance(name, str):
        from ebd2n.campaign.file import validate_schema

        try:  # a campaign file with a typo, or another file: the schema's first complaint says which
            validate_schema(raw, str(path))
            mistake = ""
        except UserError as error:
            mistake = f"; {str(error).removeprefix(f'campaign file {path}: ')}"
        raise UserError(f"{path}: not a campaign file (no campaign: key naming one{mistake}) nor a campaign directory")
    if not re.fullmatch(_name_pattern(), name):
        raise UserError(f"{path}: campaign: {name!r} is not a campaign name (letters, digits, '.', '_', '-')")
    return name


@functools.cache
def _name_pattern() -> str:
    """The campaign schema's pattern for a name: one folder under results/, never a path out of it."""
    schema = load_yaml((files("ebd2n.campaign") / "campaign.schema.yaml").read_text(encoding="utf-8"))
    return schema["properties"]["campaign"]["pattern"]


def _names(path: Path, name: str) -> bool:
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(raw, dict) and raw.get("campaign") == name
