"""The hash memory: a content hash is reused only while its file's whole identity holds, and the
memory itself is believed only where it was written, unedited. Each case names what forced the
re-hash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ebd2n.atomic import sha256_file
from ebd2n.fileidentity import RACY_NS, load_memory

DAY_S = 86400.0


@pytest.fixture(scope="module", autouse=True)
def own_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A key of this module's own (the memory's HMAC key lives under $XDG_STATE_HOME)."""
    state = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(state))
        yield state


def settled(directory: Path, sizes: dict[str, int]) -> Path:
    """Files of `sizes` under `directory`, hashed once into a saved memory after they settled: a
    file changed within RACY_NS of its hashing is never remembered."""
    directory.mkdir()
    for name, size in sizes.items():
        (directory / name).write_bytes(os.urandom(size))
    time.sleep(RACY_NS / 1e9 + 0.1)
    memory = load_memory(directory / "memory.json", directory, DAY_S)
    for name in sizes:
        memory.sha256(directory / name, name)
    memory.save()
    return directory


def audit_again(directory: Path, names: list[str], memory: Path | None = None, **options) -> tuple[dict, dict, int]:
    """(the hash of each file, why each was hashed, how many were reused) on a second pass."""
    path = memory or directory / "memory.json"
    found = load_memory(path, directory, options.get("max_age_s", DAY_S), options.get("full", False))
    digests = {name: found.sha256(directory / name, name) for name in names}
    return digests, dict(found.reasons), len(found.reused)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Settled files the tests below only read."""
    return settled(tmp_path_factory.mktemp("settled") / "campaign", {"final.pt": 300_000, "results.json": 200})


def test_unchanged_files_are_not_hashed_again(files: Path) -> None:
    digests, reasons, reused = audit_again(files, ["final.pt", "results.json"])
    assert (reasons, reused) == ({}, 2)
    assert digests == {name: sha256_file(files / name) for name in digests}


def test_each_change_of_identity_forces_a_hash_and_says_which(tmp_path: Path) -> None:
    """A byte flipped with its modification time put back, a file replaced by one of the same size
    and times, two files swapped: each is hashed again, and the memory names the fields that moved."""
    sizes = {"flipped": 1000, "replaced": 1000, "a": 100, "b": 200, "untouched": 100}
    directory = settled(tmp_path / "campaign", sizes)
    flipped, replaced, twin = directory / "flipped", directory / "replaced", directory / "twin"
    before = flipped.stat()
    with open(flipped, "r+b") as handle:
        byte = handle.read(1)
        handle.seek(0)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(flipped, ns=(before.st_atime_ns, before.st_mtime_ns))
    before = replaced.stat()
    twin.write_bytes(os.urandom(before.st_size))
    os.utime(twin, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(twin, replaced)
    os.replace(directory / "a", twin)
    os.replace(directory / "b", directory / "a")
    os.replace(twin, directory / "b")
    digests, reasons, reused = audit_again(directory, list(sizes))
    swapped = {reason: count for reason, count in reasons.items() if reason.startswith("inode and size")}
    assert reasons.pop("status-change time changed") == 1 and reasons.pop("inode and status-change time changed") == 1
    assert (sum(swapped.values()), reasons.keys() == swapped.keys(), reused) == (2, True, 1)
    assert digests == {name: sha256_file(directory / name) for name in digests}


def test_a_file_changed_just_before_it_was_hashed_is_hashed_again(tmp_path: Path) -> None:
    directory = tmp_path / "fresh"
    directory.mkdir()
    (directory / "final.pt").write_bytes(b"written a moment ago")
    memory = load_memory(directory / "memory.json", directory, DAY_S)
    memory.sha256(directory / "final.pt", "final.pt")
    memory.save()
    _, reasons, reused = audit_again(directory, ["final.pt"])
    assert (reasons, reused) == ({"new to the record": 1}, 0)


def test_a_copied_directory_hashes_everything_again(files: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(files, copy)  # copy2: times kept, the memory file too
    _, reasons, reused = audit_again(copy, ["final.pt", "results.json"])
    assert (reasons, reused) == ({"record written for another directory (a copy, or a restore)": 2}, 0)


def test_an_edited_memory_is_not_believed(files: Path, tmp_path: Path) -> None:
    header, body = (files / "memory.json").read_text().splitlines()
    record = json.loads(body)
    record["entries"]["final.pt"]["sha256"] = "0" * 64
    edited = tmp_path / "memory.json"
    edited.write_text(f"{header}\n{json.dumps(record)}\n")
    digests, reasons, reused = audit_again(files, ["final.pt"], memory=edited)
    assert (reasons, reused) == ({"record not signed by this host's key (edited, or written elsewhere)": 1}, 0)
    assert digests["final.pt"] == sha256_file(files / "final.pt")


def test_a_memory_under_another_key_is_not_believed(
    files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "another-user"))
    _, reasons, _ = audit_again(files, ["final.pt"])
    assert reasons == {"record not signed by this host's key (edited, or written elsewhere)": 1}


def test_old_entries_and_full_audits_hash_again(files: Path) -> None:
    aged = audit_again(files, ["final.pt"], max_age_s=0.0)[1]
    full = audit_again(files, ["final.pt"], full=True)[1]
    assert (aged, full) == ({"verified longer ago than the allowed age": 1}, {"hashed in full (--full)": 1})


def test_the_memory_key_is_private_and_outside_the_directory(files: Path, own_key: Path) -> None:
    key = own_key / "ebd2n" / "hash-memory.key"
    assert (key.stat().st_mode & 0o777) == 0o600 and key.read_bytes().hex() not in (files / "memory.json").read_text()


@pytest.mark.parametrize("value", ["-1", "nan", "a week"])
def test_audit_refuses_a_rehash_age_that_is_no_number_of_days(value: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ebd2n", "audit", str(tmp_path), "--rehash-after", value],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = result.stderr.splitlines()
    assert (result.returncode, len(lines), "--rehash-after" in result.stderr, list(tmp_path.iterdir())) == (
        2,
        1,
        True,
        [],
    )
