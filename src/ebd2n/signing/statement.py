"""The signed statement of a passing audit, and its verification on any copy of a campaign.

The audit's evidence lives beside the results, so whoever rewrites a file and every hash recorded
for it consistently passes it. A statement closes that: an in-toto statement (every file of the
campaign with its SHA-256, the selection per mode, source hash, cache identity, package versions,
the audit's checks) in a DSSE envelope signed with a key kept elsewhere, written to
`signatures/<n>.dsse.json`. Each names the SHA-256 of statement n-1, so a campaign's extensions
form a chain in which a dropped or replaced link shows.

Verifying imports neither torch nor the audit: a reader checks a copy on any machine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ebd2n.atomic import atomic_write_bytes, atomic_write_text, serialized, sha256_file
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import (
    CACHE_MANIFEST_COPY,
    CAMPAIGN_JSON,
    FROZEN,
    LATEST_STATEMENT,
    REPORT,
    RUNS,
    SELECTION_JSON,
    UNSIGNED,
    CampaignPaths,
    statement,
    statement_sequence,
)
from ebd2n.provenance import software_versions, timestamp
from ebd2n.signing.dsse import open_envelope, sign_envelope
from ebd2n.signing.keys import KEY_VARIABLE, key_id, load_private

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://ebd2n.invalid/signed-audit/v1"
GUARDED = (f"{RUNS}/", f"{FROZEN}/", f"{REPORT}/")
"""Where the audit admits no file it did not expect (run directories, the frozen trainer and base
recipes, the report): a file added there after signing is named. Elsewhere only signed files count."""


def signing_key(campaign_dir: Path, given: Path | None) -> Ed25519PrivateKey | None:
    """The key a full audit signs with: --sign, else $EBD2N_SIGNING_KEY, else campaign.json's; None
    for none. Refused when campaign.json (and so the report) names another key id."""
    try:
        configured = (read_json(CampaignPaths(campaign_dir).campaign_json) or {}).get("signing")
    except (UserError, AttributeError):
        configured = None  # unreadable or of the wrong shape: the audit names it
    configured = configured if isinstance(configured, dict) else {}
    path = given or os.environ.get(KEY_VARIABLE) or configured.get("key")
    if path is None:
        return None
    key = load_private(Path(path).expanduser())
    named, actual = configured.get("key_id"), key_id(key.public_key())
    if named and named != actual:
        raise UserError(
            f"{path}: key id {actual[:16]}…, but {CAMPAIGN_JSON} (and so the report) names key id {named[:16]}…: sign "
            f"with that key, or name this one (signing_key in the campaign file, or {KEY_VARIABLE}) "
            "and run the workflow again"
        )
    return key


def signed_files(paths: CampaignPaths) -> tuple[dict[str, Path], list[str]]:
    """Every file a statement covers, by path relative to the campaign, and the symbolic links found
    in their place. Not covered: UNSIGNED entries (the cache manifest copy excepted) and compiled
    Python the frozen trainer leaves (`__pycache__`, never part of its source hash)."""
    files: dict[str, Path] = {}
    links: list[str] = []
    for root, directories, names in os.walk(paths.directory):
        here = Path(root)
        relative = here.relative_to(paths.directory).as_posix()
        if relative == ".":  # the folder of the manifest copy is walked; the other UNSIGNED ones are not
            directories[:] = [d for d in directories if d not in UNSIGNED or CACHE_MANIFEST_COPY.startswith(f"{d}/")]
        directories[:] = sorted(d for d in directories if d != "__pycache__")
        for name in [*names, *(d for d in directories if (here / d).is_symlink())]:
            path = here / name
            entry = name if relative == "." else f"{relative}/{name}"
            if entry.split("/")[0] in UNSIGNED and entry != CACHE_MANIFEST_COPY:
                continue
            if path.is_symlink():
                links.append(entry)
            elif path.is_file():
                files[entry] = path
    return dict(sorted(files.items())), sorted(links)


def sign_campaign(campaign_dir: Path, key: Ed25519PrivateKey, audit: dict[str, Any], manifest: Path) -> Path:
    """Write the next statement of a campaign whose full audit (`audit`, as just written) passed;
    `manifest` is the campaign cache's, which the audit verified (copied into the campaign)."""
    paths = CampaignPaths(campaign_dir)
    if not audit.get("passed"):
        raise UserError(f"{paths.directory}: the audit failed; only a passing audit is signed")
    with serialized(paths.directory):  # two signers at once (two controllers): the second finds the first's statement
        return _sign(paths, key, audit, manifest)


def _sign(paths: CampaignPaths, key: Ed25519PrivateKey, audit: dict[str, Any], manifest: Path) -> Path:
    atomic_write_bytes(paths.cache_manifest_copy, manifest.read_bytes())
    files, links = signed_files(paths)
    if links:
        raise UserError(f"{paths.directory / links[0]}: a symbolic link; a signed campaign holds its own files")
    previous = max(_statements(paths), default=0)
    subject = [{"name": name, "digest": {"sha256": sha256_file(path)}} for name, path in files.items()]
    if previous and _signed_subject(paths, previous, key) == subject:
        _record_latest(paths, previous)  # (again, where a killed signer never wrote it)
        return paths.directory / statement(
            previous
        )  # the same files, already signed: the chain grows only with a change
    info = read_json(paths.campaign_json) or {}
    caches = info.get("cache_identities") or []
    body = {
        "_type": STATEMENT_TYPE,
        "subject": subject,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "campaign": audit.get("campaign", paths.name),
            "sequence": previous + 1,
            "previous": _link(paths, previous),
            "signed": timestamp(),
            "key_id": key_id(key.public_key()),
            "selection": read_json(paths.report / SELECTION_JSON),
            "source_hash": info.get("source_hash"),
            "cache_identity": caches[0] if len(caches) == 1 else None,
            "versions": software_versions(),
            "audit": {
                "record": {"name": paths.audit.name, "sha256": sha256_file(paths.audit)},
                "audited": audit.get("audited_at"),
                "checks": [{k: check[k] for k in ("name", "status", "scope")} for check in audit["checks"]],
            },
        },
    }
    payload = json.dumps(body, indent=1, sort_keys=True).encode("utf-8")
    target = paths.directory / statement(previous + 1)
    atomic_write_text(target, json.dumps(sign_envelope(payload, key), indent=2) + "\n")
    _record_latest(paths, previous + 1)
    return target


def _record_latest(paths: CampaignPaths, sequence: int) -> None:
    """Name the latest statement beside the chain, so its deletion alone is named as such."""
    text = json.dumps(_link(paths, sequence) | {"sequence": sequence}, sort_keys=True) + "\n"
    path = paths.latest_statement
    recorded = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    if recorded != text:
        atomic_write_text(path, text)


@dataclass
class Verification:
    """What `verify_campaign` found: the statements, the files checked, and every problem."""

    statements: int = 0
    files: int = 0
    problems: list[str] = field(default_factory=list)
    predicate: dict[str, Any] = field(default_factory=dict)
    """The latest statement's predicate (when its signature verified)."""


def verify_campaign(campaign_dir: Path, public: Ed25519PublicKey) -> Verification:
    """Check every statement's signature and link, then every file against the latest statement."""
    paths = CampaignPaths(campaign_dir)
    if not paths.directory.is_dir() or not (paths.campaign_json.is_file() or paths.runs.is_dir()):
        raise UserError(
            f"{paths.directory}: not a campaign directory (no {CAMPAIGN_JSON} or {RUNS}/); "
            "pass results/<campaign> or a copy"
        )
    result = Verification()
    sequences = _statements(paths)
    latest = _latest_named(paths)
    missing = [
        f"{statement(sequence)}: missing (deleted: {LATEST_STATEMENT} names {statement(latest)} the latest statement)"
        for sequence in range(max(sequences, default=0) + 1, latest + 1)
    ]
    if not sequences:
        result.problems.append(
            f"{paths.directory}: unsigned: no statement in {paths.signatures.name}/, so nothing is verified "
            "(the owner signs with `ebd2n audit --sign KEY`)"
        )
        result.problems += missing
        return result
    result.statements = max(sequences)
    result.problems += missing
    subjects = None
    for sequence in range(1, result.statements + 1):
        name = statement(sequence)
        if sequence not in sequences:
            result.problems.append(f"{name}: missing (a dropped link of the chain of {result.statements} statements)")
            continue
        try:
            predicate, subjects = _open(paths, sequence, public)
        except ValueError as error:
            result.problems.append(f"{name}: {error}")
            subjects = None
            continue
        result.predicate = predicate
    if subjects is None:
        return result  # the latest statement does not verify: nothing to compare the files with
    result.files = len(subjects)
    files, links = signed_files(paths)
    for entry in links:
        result.problems.append(
            f"{entry}: a symbolic link, not the signed file"
            if entry in subjects
            else f"{entry}: added (a symbolic link)"
        )
    for entry, digest in subjects.items():
        if entry in links:
            continue
        if entry not in files:
            result.problems.append(f"{entry}: missing")
        elif sha256_file(files[entry]) != digest:
            result.problems.append(f"{entry}: changed since it was signed")
    result.problems += [
        f"{entry}: added since the campaign was signed"
        for entry in files
        if entry not in subjects and entry.startswith(GUARDED)
    ]
    return result


def _signed_subject(paths: CampaignPaths, sequence: int, key: Ed25519PrivateKey) -> list[dict[str, Any]] | None:
    """The files statement `sequence` signed with `key`, as its subject lists them (None: unreadable)."""
    try:
        envelope = json.loads((paths.directory / statement(sequence)).read_text(encoding="utf-8"))
        return json.loads(open_envelope(envelope, key.public_key()).decode("utf-8"))["subject"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def _latest_named(paths: CampaignPaths) -> int:
    """The sequence number LATEST_STATEMENT names (0: none, or unreadable)."""
    try:
        sequence = json.loads(paths.latest_statement.read_text(encoding="utf-8")).get("sequence")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return 0
    return sequence if isinstance(sequence, int) else 0


def _statements(paths: CampaignPaths) -> set[int]:
    if not paths.signatures.is_dir():
        return set()
    found = (statement_sequence(f"{paths.signatures.name}/{p.name}") for p in paths.signatures.iterdir())
    return {n for n in found if n}


def _link(paths: CampaignPaths, sequence: int) -> dict[str, str] | None:
    """How statement `sequence` + 1 names statement `sequence` (None: the first has no predecessor)."""
    if sequence == 0:
        return None
    return {"name": statement(sequence), "sha256": sha256_file(paths.directory / statement(sequence))}


def _open(paths: CampaignPaths, sequence: int, public: Ed25519PublicKey) -> tuple[dict[str, Any], dict[str, str]]:
    """A statement's predicate and subjects, once its signature, place and link check; ValueError if not."""
    data = (paths.directory / statement(sequence)).read_bytes()
    try:
        envelope = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a JSON envelope") from None
    payload = open_envelope(envelope, public)
    try:
        body = json.loads(payload.decode("utf-8"))
        predicate = body["predicate"]
        subjects = {s["name"]: s["digest"]["sha256"] for s in body["subject"]}
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise ValueError("signed, but not a campaign statement") from None
    if body.get("_type") != STATEMENT_TYPE or body.get("predicateType") != PREDICATE_TYPE:
        raise ValueError(f"signed, but not an ebd2n campaign statement ({body.get('predicateType')!r})")
    if predicate.get("sequence") != sequence:
        raise ValueError(
            f"is statement {predicate.get('sequence')!r} of its chain, renamed (a link was dropped or reordered)"
        )
    previous = predicate.get("previous")
    if (
        sequence > 1
        and (paths.directory / statement(sequence - 1)).is_file()
        and previous != _link(paths, sequence - 1)
    ):
        raise ValueError(f"names another previous statement than {statement(sequence - 1)} (replaced)")
    if sequence == 1 and previous is not None:
        raise ValueError("names a previous statement, but it is the first (the chain before it was dropped)")
    return predicate, subjects
