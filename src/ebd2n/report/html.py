"""The Jinja2 environment every ebd2n page is rendered with (campaign report, run dashboard).

Autoescaping is always on, so run names, purposes and config strings appear as text, never markup.
"""

from __future__ import annotations

import functools
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parent / "templates"


@functools.cache
def environment() -> Environment:
    """One shared, autoescaping, strict environment over report/templates."""
    return Environment(
        loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
