"""How plotly.js and figure specs get into the HTML pages.

Pages must open offline, so plotly.js comes from the installed plotly package. A campaign's pages
(its report and every run dashboard) load one shared copy from `results/<campaign>/report/assets/`
by relative path; a page that travels alone (a run trained on its own, an exported dashboard)
inlines it. Figures are plain JSON handed to `Plotly.newPlot`. JSON placed inside a <script>
element has `<`, `>` and `&` escaped, so no string in it can close the element.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from ebd2n.atomic import atomic_write_text, remove_temporaries
from ebd2n.layout import REPORT_ASSETS

MODEBAR_BAND = 32
"""Pixels at the top of every figure kept for Plotly's toolbar: titles and legends sit below it,
so the toolbar, when it shows, covers neither."""
_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


ASSETS = REPORT_ASSETS
"""Folder of a campaign's report directory holding the shared plotly.js."""


@functools.cache
def plotly_source() -> str:
    """plotly.js from the installed package, checked safe to inline in a <script> element."""
    from plotly.offline import get_plotlyjs

    source = get_plotlyjs()
    if "</script" in source.lower():
        raise RuntimeError("the installed plotly.js contains '</script' and cannot be inlined")
    return source


def plotly_asset_name() -> str:
    """File name of the shared copy; versioned, so pages written before an upgrade keep theirs."""
    import plotly

    return f"plotly-{plotly.__version__}.min.js"


def shared_plotly(report_dir: Path) -> Path:
    """`report_dir/assets/plotly-<version>.min.js`, written once (atomically) and reused after."""
    path = Path(report_dir) / ASSETS / plotly_asset_name()
    source = plotly_source()
    if not path.is_file() or path.stat().st_size != len(source.encode("utf-8")):
        remove_temporaries(path.parent)  # of a killed write of it
        atomic_write_text(path, source)
    return path


def plotly_tag(page: Path, report_dir: Path | None) -> Markup:
    """The <script> element that gives `page` plotly.js: the shared copy of the campaign whose
    report directory is `report_dir`, by relative path and deferred (the page paints its text while
    the 4.8 MB library loads; the page's script waits for DOMContentLoaded), or (None) the whole
    library inlined."""
    if report_dir is None:
        return Markup(f"<script>{plotly_source()}</script>")
    relative = Path(os.path.relpath(shared_plotly(report_dir).resolve(), Path(page).resolve().parent)).as_posix()
    return Markup(f'<script src="{escape(relative)}" defer></script>')


def figure_json(figure: dict[str, Any]) -> Markup:
    """A figure as JSON that is safe inside <script type="application/json">."""
    text = json.dumps(figure, separators=(",", ":"), allow_nan=False)
    for char, escaped in _UNSAFE.items():
        text = text.replace(char, escaped)
    return Markup(text)
