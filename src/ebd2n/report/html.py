"""What every ebd2n page shares (campaign report, run dashboard): the Jinja2 environment and the
way a missing, percent, fixed-point or scientific value reads.

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
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def finite(value: float | None) -> bool:
    """A number a page can show as one: neither missing, NaN nor infinite."""
    return value is not None and math.isfinite(value)


def percent(value: float | None) -> str:
    """`12.34 %`, or DASH for a missing or non-finite value."""
    return f"{100 * value:.2f} %" if finite(value) else DASH


def fixed(value: float | None, digits: int) -> str:
    """`value` to `digits` decimals; a NaN or infinity as itself (`nan`), a missing value as DASH."""
    return f"{value:.{digits}f}" if finite(value) else str(value) if value is not None else DASH


def scientific(value: float | None) -> str:
    """`1.234e-04`, or DASH for a missing or non-finite value."""
    return f"{value:.3e}" if finite(value) else DASH
