"""Crash-safe file writes and content hashes.

A reader never sees a half-written file: data goes to a temporary file in the same directory,
is fsynced, then renamed over the target (rename is atomic on POSIX file systems). Every write,
publication and removal here passes `ebd2n.faults.at`, the tests' one place to kill a job.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ebd2n.faults import at

_CHUNK = 1 << 20
_AT_FDCWD, _RENAME_NOREPLACE = (
    -100,
    1,
)  # Linux's renameat2: paths relative to the working directory; fail if the target exists
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that the file is either the old one or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are shared on clusters
        at("before", path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    at("after", path)


def remove_file(path: str | os.PathLike) -> None:
    """Delete `path` (if it is there) for good: the directory entry is fsynced."""
    path = Path(path)
    at("removing", path)
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
    at("removed", path)


def write_new_private(path: str | os.PathLike, data: bytes) -> None:
    """Write a file that must not exist yet (FileExistsError), readable by its owner only (0600)
    from its first byte on: a secret is never replaced, and never readable by others, not even
    half-written."""
    path = Path(path)
    fd, tmp = _temporary(path)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        rename_new(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())
_WRITER = re.compile(r"\.([A-Za-z0-9_]+)-([0-9]+)-[^.]*\.tmp$")
"""The end of a temporary's name: its writer's host and pid, then mkstemp's random letters."""


def _temporary(path: Path) -> tuple[int, str]:
    """A new temporary file beside `path`, named by its writer (host and pid), mode 0600."""
    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_HOST}-{os.getpid()}-", suffix=".tmp")


def remove_temporaries(directory: Path) -> list[Path]:
    """Delete the temporary files of atomic writes in `directory` (not below it) whose writer is
    provably gone (a process of this host that no longer runs), and return them: what a killed
    job left. Any writer of the directory may call it: a write in progress is never touched."""
    leftovers = []
    for path in sorted(Path(directory).glob(".*.tmp")):
        writer = _WRITER.search(path.name)
        if writer and writer.group(1) == _HOST and not pid_alive(int(writer.group(2))) and path.is_file():
            path.unlink(missing_ok=True)
            leftovers.append(path)
    return leftovers


def is_temporary(path: Path) -> bool:
    """Whether `path` is the temporary file of an atomic write (finished or not)."""
    return path.name.startswith(".") and path.name.endswith(".tmp") and _WRITER.search(path.name) is not None


def pid_alive(pid: int) -> bool:
    """A process with this pid exists on this host (possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Text flavour of `atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file, streamed so large checkpoints need no memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of in-memory bytes."""
    return hashlib.sha256(data).hexdigest()


def fsync_dir(directory: Path) -> None:
    """Persist the rename itself (the directory entry), not only the file's bytes."""
    _fsync_path(directory)


def fsync_tree(directory: Path) -> None:
    """Persist every file and directory entry under `directory`: a tree another library wrote
    (without fsync) must be on disk before it is renamed into place."""
    for root, _dirs, files in os.walk(directory):
        for name in files:
            _fsync_path(Path(root) / name)
        fsync_dir(Path(root))


def rename_new(source: Path, target: Path) -> None:
    """Rename `source` to `target`, which must not exist: FileExistsError rather than replacing
    one that appeared meanwhile (a plain rename silently replaces an empty directory).

    Atomic through Linux's renameat2(RENAME_NOREPLACE); where the C library or the file system
    lacks it, the check and the rename are two steps.
    """
    at("before", target)
    _rename_new(source, target)
    at("after", target)


def _rename_new(source: Path, target: Path) -> None:
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):  # those two: no RENAME_NOREPLACE here
            raise OSError(code, os.strerror(code), os.fspath(target))
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(target))
    os.rename(source, target)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def serialized(directory: Path) -> Iterator[None]:
    """One process at a time in this block for `directory` (flock on the directory itself, which adds
    no file to it; where the file system has no locks, the block is not serialized)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
