"""Where the repository's shipped files live (presets, resources), for editable and source use."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""Repository root when the package runs from its checkout (src layout)."""


def resources_dir() -> Path:
    """Small inputs of the embedded default; EBD2N_RESOURCES overrides (installed copies)."""
    return Path(os.environ.get("EBD2N_RESOURCES", REPO_ROOT / "resources"))


def presets_dir() -> Path:
    """The shipped recipe presets (config/recipes)."""
    return REPO_ROOT / "config" / "recipes"
