"""A file's identity, and the SHA-256s verified by content that may be reused while it holds.

Hashing every checkpoint of a campaign on every invocation costs minutes once checkpoints weigh
GBs. A content hash is reused only while the file's whole identity is unchanged: device, inode,
size, and modification and status-change times in nanoseconds (of the file a symbolic link leads
to). An edit whose modification time is put back still moves the status-change time, which no user
tool sets back; a copy, a restore or a swapped directory brings new inodes or devices. Anything
else is hashed again.

A `HashMemory` file is trusted only where it was written: it names its host and the directory it
describes (device and inode), and carries an HMAC-SHA256 under a key private to this user on this
host (`$XDG_STATE_HOME/ebd2n/hash-memory.key`, made 0600 on first use, never in results). Edited,
or beside a copy of its directory (another host, device or inode), it is simply not believed:
every file is hashed again. Entries older than `max_age_s` are hashed again too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebd2n.atomic import atomic_write_text, sha256_file, write_new_private

FORMAT = 1
FIELDS = ("device", "inode", "size", "modification time", "status-change time")
KEY_BYTES = 32
RACY_NS = 2_000_000_000
"""A file changed less than this before it was hashed is hashed again next time (coarse file system clocks)."""
REHASH_AFTER_DAYS = 7.0
"""The audit's default: a content hash reused by identity is computed again once this old."""


@dataclass(frozen=True)
class FileIdentity:
    """What the file system says about a file without reading it: while it holds, no write reached the file."""

    device: int
    inode: int
    size: int
    modified_ns: int
    changed_ns: int

    @classmethod
    def of(cls, path: str | os.PathLike) -> FileIdentity:
        info = os.stat(path)
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def record(self) -> list[int]:
        return [self.device, self.inode, self.size, self.modified_ns, self.changed_ns]

    def differences(self, recorded: Any) -> list[str]:
        """The fields in which `recorded` (a `record()`) differs from this identity, by name."""
        if not isinstance(recorded, list) or len(recorded) != len(FIELDS):
            return ["unreadable record"]
        return [name for name, now, then in zip(FIELDS, self.record(), recorded, strict=True) if now != then]


def directory_identity(directory: Path) -> list[int]:
    info = os.stat(directory)
    return [info.st_dev, info.st_ino]


@dataclass
class HashMemory:
    """Content hashes of the files under `directory`, each with the identity its file had when hashed.

    `sha256` answers from memory while a file's identity and the entry's age allow, else hashes
    it; `reasons` counts why each file was hashed, `reused` which were not. `keep` and `extra` hold
    what a caller read from a file's content (a checkpoint's metadata), valid exactly as long as its hash.
    """

    path: Path
    directory: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    distrust: str | None = None
    """Why no entry is believed (no record yet, another host, a copy, an edited record, --full)."""
    max_age_s: float | None = None
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    reasons: Counter = field(default_factory=Counter)
    reused: set[str] = field(default_factory=set)
    """The keys whose hash was reused: their files are unchanged since it was computed."""
    notes: list[str] = field(default_factory=list)
    """What the caller saved by trusting this memory, for the summary."""
    changed: bool = False
    """Whether anything was hashed or kept that the memory as read does not hold."""
    racy: set[str] = field(default_factory=set)
    """Keys hashed within RACY_NS of their file's change: used by this audit, never saved."""

    def sha256(self, path: Path, key: str) -> str:
        """The SHA-256 of `path` (named `key` in the memory): remembered, or hashed now."""
        started, identity = time.time_ns(), FileIdentity.of(path)
        if (entry := self._reusable(key, identity)) is not None:
            return entry["sha256"]
        digest = sha256_file(path)
        self.remember(path, key, identity, digest, started)
        return digest

    def recall(self, path: Path, key: str) -> str | None:
        """The remembered SHA-256 of `path` while its identity holds, else None (the caller hashes it
        and calls `remember`)."""
        entry = self._reusable(key, FileIdentity.of(path))
        return None if entry is None else entry["sha256"]

    def remember(self, path: Path, key: str, identity: FileIdentity, digest: str, started: int) -> None:
        """Record a hash computed from `path`, whose identity was `identity` at `started` (ns, taken
        before it): a file changed while it was read is not remembered, nor saved one changed so
        shortly before `started` that a change within the file system's time resolution could
        follow unseen ("racily clean", as git calls it): the next audit hashes it again."""
        try:
            unchanged = FileIdentity.of(path) == identity
        except FileNotFoundError:
            return  # gone since: the caller's next look finds out
        if unchanged:
            self.seen[key] = {"identity": identity.record(), "sha256": digest, "verified": time.time()}
            self.changed = True
            if started - identity.changed_ns <= RACY_NS:
                self.racy.add(key)  # this audit asks again without hashing again; the next one hashes

    def extra(self, key: str, name: str) -> Any:
        """What was kept with a file's entry under `name` (None: nothing, or the file was hashed anew)."""
        return self.seen.get(key, {}).get(name)

    def keep(self, key: str, name: str, value: Any) -> None:
        """Keep `value` (JSON) with the entry of a file this audit hashed or reused."""
        if key in self.seen and self.seen[key].get(name) != value:
            self.seen[key][name] = value
            self.changed = True

    def summary(self) -> str:
        """One line: how many files were hashed and why, how many reused by identity."""
        hashed = sum(self.reasons.values())
        why = ", ".join(f"{count:,} {reason}" for reason, count in sorted(self.reasons.items()))
        reused = len(self.reused)
        line = f"content hashes: {hashed + reused:,} files, {reused:,} reused by identity, {hashed:,} hashed"
        return "; ".join([line + (f" ({why})" if why else ""), *self.notes])

    def save(self, merge: bool = False) -> None:
        """Write what this audit verified (with `merge`, beside the trusted entries it did not visit),
        signed with this host's key; nothing when it would write what it read. Best effort: without
        a key or a writable directory, the next audit hashes again."""
        entries = {**self.entries, **self.seen} if merge and self.distrust is None else dict(self.seen)
        for key in self.racy:
            entries.pop(key, None)
        if self.distrust is None and not self.changed and entries.keys() == self.entries.keys():
            return
        body = {
            "host": socket.gethostname(),
            "directory": directory_identity(self.directory),
            "entries": dict(sorted(entries.items())),
        }
        text = json.dumps(body, separators=(",", ":"))
        try:
            key = _key(create=True)
            if key is not None:
                atomic_write_text(self.path, f"{json.dumps({'format': FORMAT, 'hmac': _mac(key, text)})}\n{text}\n")
        except OSError:
            return

    def _reusable(self, key: str, identity: FileIdentity) -> dict[str, Any] | None:
        if (known := self.seen.get(key)) is not None and not identity.differences(known["identity"]):
            return known  # asked twice in one audit
        entry = self.entries.get(key) if self.distrust is None else None
        if self.distrust is not None:
            self.reasons[self.distrust] += 1
        elif entry is None:
            self.reasons["new to the record"] += 1
        elif differs := identity.differences(entry.get("identity")):
            self.reasons[f"{' and '.join(differs)} changed"] += 1
        elif self.max_age_s is not None and time.time() - float(entry.get("verified", 0)) > self.max_age_s:
            self.reasons["verified longer ago than the allowed age"] += 1
        else:
            self.reused.add(key)
            self.seen[key] = entry
            return entry
        return None


def load_memory(path: Path, directory: Path, max_age_s: float | None, full: bool = False) -> HashMemory:
    """The hash memory at `path` for the files under `directory`; believed only when its HMAC,
    host and directory identity hold (`full`: never, everything is hashed).

    The file is two lines: a header with the HMAC-SHA256 of the second, and the second, the body
    (host, directory, entries) as compact JSON, so checking the HMAC costs one pass over its bytes."""
    memory = HashMemory(path, directory, max_age_s=max_age_s)
    if full:
        memory.distrust = "hashed in full (--full)"
        return memory
    try:
        header, text = path.read_text(encoding="utf-8").split("\n", 1)
    except FileNotFoundError:
        memory.distrust = "no earlier verification recorded"
        return memory
    except (OSError, UnicodeDecodeError, ValueError):
        header, text = "", ""
    memory.distrust, body = _distrust(header, text.rstrip("\n"), directory)
    if memory.distrust is None:
        memory.entries = body["entries"]
    return memory


def _distrust(header: str, text: str, directory: Path) -> tuple[str | None, dict[str, Any]]:
    """Why the memory (`header` and body `text`) is not believed, None when it is; and its body."""
    try:
        recorded, body = json.loads(header), json.loads(text)
    except ValueError:
        return "record unreadable", {}
    entries = body.get("entries") if isinstance(body, dict) else None
    well_formed = isinstance(entries, dict) and all(isinstance(e, dict) and "sha256" in e for e in entries.values())
    if not isinstance(recorded, dict) or recorded.get("format") != FORMAT or not well_formed:
        return "record unreadable", {}
    key = _key(create=False)
    if key is None or not hmac.compare_digest(str(recorded.get("hmac")), _mac(key, text)):
        return "record not signed by this host's key (edited, or written elsewhere)", {}
    if body.get("host") != socket.gethostname():
        return f"record written on host {body.get('host')}", {}
    if body.get("directory") != directory_identity(directory):
        return "record written for another directory (a copy, or a restore)", {}
    return None, body


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def _key(create: bool) -> bytes | None:
    """This user's key on this host for hash memories; made on first use when `create`. A key file
    that cannot be read, or not of KEY_BYTES bytes (a creation cut short), is no key."""
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    path = state / "ebd2n" / "hash-memory.key"
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            write_new_private(path, os.urandom(KEY_BYTES))
        except FileExistsError:
            pass  # another process made it first
    try:
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == KEY_BYTES else None
