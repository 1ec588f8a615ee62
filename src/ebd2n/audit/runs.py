"""What the audit reads of one run directory, read once and defensively.

Every file may be missing, truncated, not JSON/YAML, or a symbolic link to another run's file:
each becomes a named problem of the run, never a traceback. Hashes are computed once per file,
or reused while its identity holds (ebd2n.fileidentity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebd2n.campaign.runs import Run
from ebd2n.config import Recipe, load_recipe
from ebd2n.errors import UserError
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import BEST, CHECKPOINT_LEDGER, RESULTS_JSON, RUN_ARTIFACTS, RUN_RECORD, RunPaths
from ebd2n.train.budget import budget_of


@dataclass
class RunView:
    """One run directory as the checks see it."""

    run: Run
    paths: RunPaths
    files: list[str]
    """Every file under the run directory, relative to it (symbolic links included)."""
    hashes: dict[str, str]
    """SHA-256 of every regular file under the run directory."""
    prefix: str = ""
    """What names the run's files in the audit's hash memory: `prefix` + the name relative to the run."""
    problems: list[str] = field(default_factory=list)
    """Missing, linked or unreadable artifacts."""
    recipe: Recipe | None = None
    results: dict[str, Any] | None = None
    best: dict[str, Any] | None = None
    record: dict[str, Any] | None = None
    checkpoints: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def finished(self) -> bool:
        return self.results is not None

    @property
    def recorded(self) -> dict[str, Any]:
        """The SHA-256 of each artifact as full validation recorded it (empty when it recorded none)."""
        artifacts = (self.results or {}).get("artifacts")
        return artifacts if isinstance(artifacts, dict) else {}


def read_run(paths: RunPaths, run: Run, memory: HashMemory, prefix: str) -> RunView:
    """Hash every file of a run directory (named `prefix` + its name in `memory`) and parse its
    records; note what is wrong."""
    files = sorted(
        p.relative_to(paths.directory).as_posix()
        for p in paths.directory.rglob("*")
        if not p.is_dir() or p.is_symlink()
    )
    view = RunView(run, paths, files, {}, prefix)
    for name in files:
        path = paths / name
        if path.is_symlink():
            view.problems.append(f"{name} is a symbolic link (to {path.readlink()}), not the run's own file")
        elif path.is_file():
            view.hashes[name] = memory.sha256(path, prefix + name)
    if paths.recipe.name in view.hashes:  # a stopped run's checkpoints are measured against its budget too
        try:
            recipe = load_recipe(paths.recipe)
            budget_of(recipe)  # the checks below read its budget
            view.recipe = recipe
        except UserError as error:
            view.problems.append(f"{paths.recipe.name}: not a valid recipe ({error})")
    if RESULTS_JSON not in view.hashes and RESULTS_JSON not in files:
        return view  # not finished: the grid check says so; nothing else to read
    for name in RUN_ARTIFACTS:
        if name not in files:
            view.problems.append(f"{name} missing")
    view.results = _json(view, RESULTS_JSON)
    view.best = _json(view, BEST)
    view.record = _json(view, RUN_RECORD)
    view.checkpoints = _json(view, CHECKPOINT_LEDGER)
    if view.results is None and RESULTS_JSON in view.hashes:
        view.results = {}  # unreadable: finished in name, every check of it fails
    return view


def _json(view: RunView, name: str) -> dict[str, Any] | None:
    if name not in view.hashes:
        return None
    value, problem = json_object(view.paths / name)
    if problem:
        view.problems.append(f"{name}: {problem}")
    return value


def json_object(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON object file's content, or what is wrong with it."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return None, f"not valid JSON ({error})"
    return (value, None) if isinstance(value, dict) else (None, "not a JSON object")
