"""Per-run verdicts remembered by content: a run whose files hash as they did, checked by the same
code, gets the verdict it got, without its histories being read again.

The checks that read a run's whole metrics.jsonl and train.log (megabytes per real run) are pure
functions of the run's files and the package's source. Their verdicts are kept in the audit's hash
memory beside metrics.jsonl's entry, under the SHA-256 of every file of the run and of the source:
any changed byte, or a new ebd2n, and the run is read and judged again.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from ebd2n.atomic import sha256_bytes
from ebd2n.audit.runs import RunView
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import METRICS
from ebd2n.provenance import source_hash

Verdict = tuple[bool, list[str]]
"""(examined, problems) of one run under one check."""
KEPT = "verdicts"


def remembered(view: RunView, memory: HashMemory, check: str, judge: Callable[[], Verdict]) -> Verdict:
    """`judge()` of this run for `check`, or what it returned for the same content and code."""
    key = view.prefix + METRICS
    basis = _basis(view)
    kept = memory.extra(key, KEPT)
    if not isinstance(kept, dict) or kept.get("basis") != basis or not isinstance(kept.get("checks"), dict):
        kept = {"basis": basis, "checks": {}}
    kept = {"basis": basis, "checks": dict(kept["checks"])}  # a copy: the memory sees what changed
    if isinstance(known := kept["checks"].get(check), list) and len(known) == 2:
        return bool(known[0]), list(known[1])
    examined, problems = judge()
    kept["checks"][check] = [examined, problems]
    memory.keep(key, KEPT, kept)
    return examined, problems


def _basis(view: RunView) -> str:
    content = {"files": view.hashes, "listed": view.files, "problems": view.problems, "source": package_source()}
    return sha256_bytes(json.dumps(content, sort_keys=True).encode("utf-8"))


@functools.cache
def package_source() -> str:
    """The running package's source hash, once per process (a verdict or report of other code is not reused)."""
    return source_hash()
