"""The published report equals one rebuilt from the campaign's sources: checked by rebuilding it,
unless nothing it is built from and none of its files changed since an audit whose comparison passed.

Rebuilding costs seconds per hundred runs on every invocation, so the rebuild is skipped exactly
when it cannot find anything new: the report's files hash as they did when a rebuild matched them
(with their identities, ebd2n.fileidentity, the hashes cost nothing), and the same fingerprint of
what a build reads: every campaign file but the report, the audit's records and the logs of
anything but runs (a failed run's job log is shown), the campaign's place (its name and directory
appear in the selected recipes), the data cache's manifest, the recomputed campaign.json, the
package's source and its stack's versions. A symbolic link or a trainer's lease anywhere in the
campaign (what they lead to, or whether their holder lives, is no file's content) means a rebuild.
"""

from __future__ import annotations

import contextlib
import filecmp
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from ebd2n.atomic import sha256_bytes
from ebd2n.audit.checks import Check
from ebd2n.audit.run_memo import package_source
from ebd2n.data.cache import MANIFEST
from ebd2n.errors import UserError
from ebd2n.fileidentity import HashMemory
from ebd2n.layout import (
    AUDIT_JSON,
    AUDIT_LEDGER,
    AUDIT_PASSED,
    LEASE,
    REPORT,
    REPORT_ASSETS,
    REPORT_INDEX,
    RUNS,
    UNSIGNED,
    CampaignPaths,
)
from ebd2n.provenance import software_versions
from ebd2n.report.publish import report_files

NOT_READ = {*UNSIGNED, REPORT, AUDIT_JSON, AUDIT_LEDGER, AUDIT_PASSED}
"""Top-level entries a report build does not read (but logs/runs/, walked on its own)."""
COMPARED = "compared_with"
"""What the report's index entry in the hash memory keeps: the fingerprint, files and hashes of the
report when a rebuild last matched it, and what that comparison examined."""


class Rebuild:
    """The report rebuilt into a scratch folder by a thread, while the audit hashes: an audit that
    hashes everything (--full, a new host, a copy) always rebuilds, and the two overlap, the hashing
    reading files outside the interpreter lock and the figures drawing inside it."""

    def __init__(self, paths: CampaignPaths, info: dict | None, scratch: Path) -> None:
        import ebd2n.report.campaign_report  # noqa: F401 (imported here, never beside the audit's own imports)

        self.scratch = scratch
        self.error: UserError | None = None
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._build, args=(paths, info), name="ebd2n-report-rebuild", daemon=True)
        self.thread.start()

    def _build(self, paths: CampaignPaths, info: dict | None) -> None:
        try:
            _rebuilt(paths, info, self.scratch)
        except UserError as error:
            self.error = error
        except BaseException as failure:  # raised again in the audit's thread
            self.failure = failure

    def result(self) -> Path:
        """The rebuilt report's folder; a UserError when it cannot be rebuilt."""
        self.thread.join()
        if self.failure is not None:
            raise self.failure
        if self.error is not None:
            raise self.error
        return self.scratch


@contextlib.contextmanager
def early_rebuild(paths: CampaignPaths, info: dict | None, certain: bool) -> Iterator[Rebuild | None]:
    """A Rebuild started now when the audit will certainly rebuild (its memory is distrusted: the
    report's comparison cannot be reused), else None; its thread is waited for on the way out."""
    if not certain or not paths.report.is_dir():
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="ebd2n-report-") as scratch:
        rebuild = Rebuild(paths, info, Path(scratch))
        try:
            yield rebuild
        finally:
            rebuild.thread.join()


def check_report(
    paths: CampaignPaths,
    info: dict | None,
    memory: HashMemory,
    published: dict[str, str],
    cache_dir: Path | None,
    rebuild: Rebuild | None = None,
) -> Check:
    """The published report (`published`: its files' hashes, keyed relative to the campaign) equals
    one rebuilt from the runs and `info` (campaign.json as the campaign's sources make it; None: it
    cannot be recomputed, the file stands in), file for file, byte for byte; `rebuild`: one already
    under way."""
    check = Check("the published report equals a recomputation from the runs", unit="report files")
    if not paths.report.is_dir():
        check.violations.append(f"{REPORT}: missing; build it with `ebd2n report {paths.directory}`")
        return check
    index = f"{REPORT}/{REPORT_INDEX}"
    fingerprint = _fingerprint(paths, info, memory, cache_dir)
    state = {"fingerprint": fingerprint, "published": published, "files": sorted(report_files(paths.report))}
    kept = memory.extra(index, COMPARED)
    if fingerprint is not None and isinstance(kept, dict) and {k: kept.get(k) for k in state} == state:
        check.examined = int(kept.get("examined", 0))
        memory.notes.append("report: it and what it is built from are unchanged since it was compared, not rebuilt")
        return check
    if rebuild is not None:
        _compare(paths, check, rebuild.result)
    else:
        with tempfile.TemporaryDirectory(prefix="ebd2n-report-") as scratch:
            _compare(paths, check, lambda: _rebuilt(paths, info, Path(scratch)))
    if fingerprint is not None and not check.violations:
        memory.keep(index, COMPARED, {**state, "examined": check.examined})
    return check


def _rebuilt(paths: CampaignPaths, info: dict | None, scratch: Path) -> Path:
    from ebd2n.report.campaign_report import build_report  # plotting and statistics: only when rebuilding

    build_report(paths.directory, scratch, info=info)
    return scratch


def _compare(paths: CampaignPaths, check: Check, rebuilt: Callable[[], Path]) -> None:
    published = paths.report
    try:
        scratch = rebuilt()
    except UserError as error:
        check.violations.append(f"cannot rebuild the report: {error}")
        return
    expected = report_files(scratch)
    actual = report_files(published)
    check.examined = len(expected)
    for name in sorted(expected | actual):
        where = f"{published.name}/{name}"
        if name not in actual:
            check.violations.append(f"{where}: missing")
        elif name not in expected:
            if not name.startswith(f"{REPORT_ASSETS}/"):  # an older plotly.js stays for older run pages
                check.violations.append(f"{where}: not part of the report")
        elif not filecmp.cmp(scratch / name, published / name, shallow=False):
            check.violations.append(f"{where}: differs from a recomputation from the runs (rebuild: ebd2n report)")


def _fingerprint(paths: CampaignPaths, info: dict | None, memory: HashMemory, cache_dir: Path | None) -> str | None:
    """The SHA-256 of everything a report build reads (equal fingerprints, equal reports), None
    when the campaign holds what no fingerprint can stand for (a link, a lease) or changes under it."""
    inputs: dict[str, str] = {}
    roots = [paths.directory, paths.logs / RUNS]
    try:
        for root in roots:
            for directory, directories, files in os.walk(root):
                relative = Path(directory).relative_to(paths.directory)
                if relative == Path("."):
                    directories[:] = [name for name in directories if name not in NOT_READ]
                    files = [name for name in files if name not in NOT_READ]
                for name in [*directories, *files]:
                    if (Path(directory) / name).is_symlink() or name == LEASE:
                        return None
                for name in files:
                    key = (relative / name).as_posix()
                    inputs[key] = memory.sha256(Path(directory) / name, key)
        if cache_dir is not None:
            manifest = Path(cache_dir) / MANIFEST
            inputs[f"cache {manifest}"] = memory.sha256(manifest, os.path.relpath(manifest, paths.directory))
    except FileNotFoundError:
        return None  # a file came or went while it was walked (a job at work): rebuild
    basis = {
        "inputs": inputs,
        "info": info,
        "place": [str(paths.directory.resolve()), str(paths.repository.resolve())],
        "source": package_source(),
        "versions": software_versions(),
    }
    return sha256_bytes(json.dumps(basis, sort_keys=True, default=str).encode("utf-8"))
