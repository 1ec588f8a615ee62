"""Warm start: the jobs of a local campaign fork from one process that has already imported torch.

A laptop campaign runs a hundred short jobs, and each would spend seconds importing torch and
torch._dynamo (which torch.optim imports) before a second of work. With EBD2N_WARM=1, which the
workflow sets for local runs, `python -m ebd2n train|validate` hands its arguments, working
directory, environment and standard streams to a server for the same interpreter, code and
thread settings. The server forks a child that runs the command on the client's streams and
sends back its exit status. It starts on first use and exits after IDLE_SECONDS without jobs.
A signal the client receives is passed on to the child; when the client dies (SIGKILL), the
child is killed too. When no server can be reached before a job starts, the client runs the
command itself, so warm start can only make a job start sooner, never change what it does.

The sockets live in a private directory (mode 0700) under the temporary directory: only the
user who started the server can hand it commands.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ebd2n.provenance import PACKAGE_DIR, source_hash

ENV_SWITCH = "EBD2N_WARM"
"""Set to 1 to start `train` and `validate` from a warm server; unset or 0: always cold."""

WARM_COMMANDS = ("train", "validate")
"""The commands that import torch; the others start in well under a second anyway."""

IDLE_SECONDS = 60.0
"""A server with no running job and no request for this long removes its files and exits
(EBD2N_WARM_IDLE, in seconds, overrides it)."""

START_TIMEOUT = 300.0
"""How long a client waits for a server it started to accept (importing torch on a busy laptop)."""

_KEY_ENVIRONMENT = (
    "PYTHONPATH", "PYTHONHASHSEED", "LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
)
"""Variables read while torch loads: a server serves only clients that agree on all of them."""

_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_HEADER = struct.Struct("!I")
_STARTED = b"started\n"


def forwarded(argv: list[str]) -> int | None:
    """Run argv on a warm server and return its exit status; None: run it here instead."""
    if os.environ.get(ENV_SWITCH, "0") in ("", "0") or not argv or argv[0] not in WARM_COMMANDS:
        return None
    if "LOCAL_RANK" in os.environ:  # a torchrun worker: its launcher already paid the start-up
        return None
    try:
        path = _socket_path()
        connection = _connect(path) or _start_server(path)
    except OSError as error:
        print(f"ebd2n: warm start unavailable ({error}); starting cold", file=sys.stderr)
        return None
    if connection is None:
        return None
    with connection:
        return _run_remotely(connection, argv)


def _socket_path() -> Path:
    """One socket per interpreter, package source and load-time environment."""
    directory = Path(tempfile.gettempdir()) / f"ebd2n-warm-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    if directory.stat().st_uid != os.getuid() or directory.stat().st_mode & 0o077:
        raise PermissionError(f"{directory} must belong to you with mode 0700 (warm-start sockets)")
    key = json.dumps(
        [sys.executable, str(PACKAGE_DIR), source_hash(), {k: os.environ.get(k) for k in _KEY_ENVIRONMENT}]
    )
    return directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.sock"


def _connect(path: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except OSError:
        connection.close()
        return None
    return connection


def _start_server(path: Path) -> socket.socket | None:
    """Start a server for path (one client at a time, under a lock) and connect to it."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        connection = _connect(path)  # another client may have started it meanwhile
        if connection is not None:
            return connection
        with open(path.with_suffix(".log"), "ab") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "ebd2n.warm", str(path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and server.poll() is None:
            connection = _connect(path)
            if connection is not None:
                return connection
            time.sleep(0.05)
    return None


def _run_remotely(connection: socket.socket, argv: list[str]) -> int | None:
    """Send the job, pass signals on, and wait for the exit status; None if it never started."""
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    try:
        socket.send_fds(connection, [_HEADER.pack(len(request)) + request], _standard_streams())
        if _read_line(connection) != _STARTED:
            return None
    except OSError:
        return None

    def pass_on(signum: int, _frame: object) -> None:
        try:
            connection.sendall(b"%d\n" % signum)
        except OSError:
            pass  # the server is gone: the status read below reports it

    for signum in _FORWARDED_SIGNALS:
        signal.signal(signum, pass_on)
    status = _read_line(connection)
    if not status:
        print("ebd2n: the warm-start server stopped while running this job", file=sys.stderr)
        return 1
    code = int(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def _standard_streams() -> list[int]:
    """Descriptors 0, 1, 2 for the job; one that is closed here becomes /dev/null there."""
    streams = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            streams.append(fd)
        except OSError:
            streams.append(os.open(os.devnull, os.O_RDWR))
    return streams


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(64)
        if not chunk:
            return data
        data += chunk
    return data


def serve(path: Path) -> None:
    """Import the heavy modules once, then fork a child per request until idle."""
    import torch
    import torch._dynamo  # noqa: F401  torch.optim imports it at the first optimizer

    import ebd2n.evaluate  # noqa: F401
    import ebd2n.train.trainer  # noqa: F401

    del torch
    fresh = path.with_suffix(".new")
    fresh.unlink(missing_ok=True)  # left by a server that died while starting
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(fresh))
    listener.listen(64)
    os.replace(fresh, path)  # clients see the socket only once it accepts
    ours = path.stat().st_ino
    idle = float(os.environ.get("EBD2N_WARM_IDLE", IDLE_SECONDS))
    jobs: dict[int, socket.socket | None] = {}  # child pid -> its client's connection (None: client gone)
    last_activity = time.monotonic()
    while jobs or time.monotonic() - last_activity < idle:
        watched = [listener, *filter(None, jobs.values())]
        readable, _, _ = select.select(watched, [], [], 0.05 if jobs else min(1.0, idle))
        if listener in readable:
            connection, _ = listener.accept()
            pid = _start_job(connection, listener, jobs)
            if pid is None:
                connection.close()
            else:
                jobs[pid] = connection
        for pid, connection in list(jobs.items()):
            if connection is not None and connection in readable and not _relay_signals(pid, connection):
                connection.close()
                jobs[pid] = None
        _reap(jobs)
        if jobs or readable:
            last_activity = time.monotonic()
    _remove_files(path, ours)
    listener.close()


def _remove_files(path: Path, ours: int) -> None:
    """An idle server leaves no files behind (its socket only if no newer server took the name)."""
    try:
        if path.stat().st_ino == ours:
            path.unlink()
    except FileNotFoundError:
        pass
    path.with_suffix(".lock").unlink(missing_ok=True)
    log = path.with_suffix(".log")
    if log.exists() and not log.stat().st_size:
        log.unlink()


def _start_job(
    connection: socket.socket, listener: socket.socket, jobs: dict[int, socket.socket | None]
) -> int | None:
    """Read a request with its three descriptors and fork the child that runs it; None if malformed."""
    connection.settimeout(10.0)
    try:
        data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        (size,) = _HEADER.unpack(data[: _HEADER.size])
        data = data[_HEADER.size :]
        while len(data) < size:
            chunk = connection.recv(size - len(data))
            if not chunk:
                raise ConnectionError("client went away")
            data += chunk
        request = json.loads(data)
    except (OSError, ValueError, struct.error):
        return None
    finally:
        connection.settimeout(None)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in filter(None, jobs.values()):
            other.close()
        connection.close()
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    connection.sendall(_STARTED)
    return pid


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: take over the client's streams, directory and environment, run, exit."""
    code = 1
    try:
        _die_with_parent()
        for signum in _FORWARDED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [sys.argv[0], *request["argv"]]
        from ebd2n.cli import main

        code = main(request["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL if the server dies, so no job outlives its client's answer."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a killed server leaves its running jobs to finish


def _relay_signals(pid: int, connection: socket.socket) -> bool:
    """Pass the client's signals on to its child; False when the client is gone (its child is killed)."""
    try:
        data = connection.recv(256)
    except OSError:
        data = b""
    if not data:
        _kill(pid, signal.SIGKILL)
        return False
    for line in data.split():
        _kill(pid, int(line))
    return True


def _reap(jobs: dict[int, socket.socket | None]) -> None:
    """Collect finished children and send each exit status to its client."""
    while jobs:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = jobs.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass
            connection.close()


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
