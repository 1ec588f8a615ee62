"""What every ebd2n page shares (campaign report, run dashboard): the Jinja2 environment and the
way a missing or percent value reads.

Autoescaping is always on, so run names, purposes and config strings appear as text, never markup.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parent / "templates"
DASH = "—"
"""A value that is missing or not finite."""


@functools.cache
def template_environment() -> Environment:
    """One shared, autoescaping, strict environment over report/templates."""
    return Environment(
        loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )


def percent(value: float | None) -> str:
    """`12.34 %`, or DASH for a missing or non-finite value."""
    return f"{100 * value:.2f} %" if value is not None and math.isfinite(value) else DASH
