"""The published report equals one rebuilt from the campaign's sources: checked by rebuilding it,
unless nothing it is built from and none of its files changed since an audit that did.

Rebuilding costs seconds per hundred runs on every invocation, so the rebuild is skipped exactly
when it cannot find anything new: every published file unchanged by identity since it was
compared (ebd2n.fileidentity), and the same fingerprint of what a build reads (every file of the
campaign outside the report and the audit's own records, the recomputed campaign.json, the source
of the package and the versions of its stack). Anything else is rebuilt and compared byte for byte.
"""

from __future__ import annotations

import filecmp
import json
import os
import tempfile
from pathlib import Path

from ebd2n.atomic import sha256_bytes
from ebd2n.audit.checks import Check
from ebd2n.errors import UserError
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import (
    AUDIT_HASHES,
    AUDIT_JSON,
    AUDIT_LEDGER,
    AUDIT_PASSED,
    REPORT,
    REPORT_ASSETS,
    REPORT_INDEX,
    UNSIGNED,
    CampaignPaths,
)
from ebd2n.provenance import software_versions, source_hash
from ebd2n.report.publish import report_files

NOT_READ = {*UNSIGNED, REPORT, AUDIT_JSON, AUDIT_LEDGER, AUDIT_PASSED, AUDIT_HASHES}
"""Top-level entries a report build never reads: the report itself, logs, status, signatures, audit records."""
COMPARED = "compared_with"
"""What the report's index entry in the hash memory keeps: the fingerprint and files of its last comparison."""


def check_report(paths: CampaignPaths, info: dict | None, memory: HashMemory, published: dict[str, str]) -> Check:
    """The published report (`published`: its files' hashes, keyed relative to the campaign) equals
    one rebuilt from the runs and `info` (campaign.json as the campaign's sources make it; None: it
    cannot be recomputed, the file stands in), file for file, byte for byte."""
    check = Check("the published report equals a recomputation from the runs", unit="report files")
    if not paths.report.is_dir():
        check.violations.append(f"{REPORT}: missing; build it with `ebd2n report {paths.directory}`")
        return check
    index = f"{REPORT}/{REPORT_INDEX}"
    fingerprint = _fingerprint(paths, info, memory)
    compared = {"fingerprint": fingerprint, "files": sorted(published)}
    if memory.extra(index, COMPARED) == compared and set(published) <= memory.reused:
        check.examined = len(report_files(paths.report))
        memory.notes.append("report: it and what it is built from are unchanged since it was compared, not rebuilt")
        return check
    _compare(paths, info, check)
    if not check.violations:
        memory.keep(index, COMPARED, compared)
    return check


def _compare(paths: CampaignPaths, info: dict | None, check: Check) -> None:
    from ebd2n.report.campaign_report import build_report  # plotting and statistics: only when rebuilding

    published = paths.report
    with tempfile.TemporaryDirectory(prefix="ebd2n-report-") as scratch:
        try:
            build_report(paths.directory, Path(scratch), info=info)
        except UserError as error:
            check.violations.append(f"cannot rebuild the report: {error}")
            return
        expected = report_files(Path(scratch))
        actual = report_files(published)
        check.examined = len(expected)
        for name in sorted(expected | actual):
            where = f"{published.name}/{name}"
            if name not in actual:
                check.violations.append(f"{where}: missing")
            elif name not in expected:
                if not name.startswith(f"{REPORT_ASSETS}/"):  # an older plotly.js stays for older run pages
                    check.violations.append(f"{where}: not part of the report")
            elif not filecmp.cmp(Path(scratch) / name, published / name, shallow=False):
                check.violations.append(f"{where}: differs from a recomputation from the runs (rebuild: ebd2n report)")


def _fingerprint(paths: CampaignPaths, info: dict | None, memory: HashMemory) -> str:
    """The SHA-256 of everything a report build reads: equal fingerprints, equal reports."""
    inputs = {}
    for root, directories, files in os.walk(paths.directory):
        relative = Path(root).relative_to(paths.directory)
        if relative == Path("."):
            directories[:] = [name for name in directories if name not in NOT_READ]
            files = [name for name in files if name not in NOT_READ]
        for name in files:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                key = (relative / name).as_posix()
                inputs[key] = memory.sha256(path, key)
    basis = {"inputs": inputs, "info": info, "source": source_hash(), "versions": software_versions()}
    return sha256_bytes(json.dumps(basis, sort_keys=True, default=str).encode("utf-8"))
