"""Warm start, an opt-in launcher: the jobs of a local campaign fork from one process that has already imported torch.

A laptop campaign runs a hundred short jobs, and each would spend seconds importing torch and
torch._dynamo (which torch.optim imports) before a second of work. The workflow's training and
validation jobs run `python -m ebd2n.warm train|validate ...` (`python -m ebd2n` never goes
through here). Unless EBD2N_WARM=0, the launcher hands its arguments, working directory, environment and standard streams to a server started the same way
(same interpreter and flags, same code, same umask and environment variables read while Python and
torch load). The server forks a child that runs the command on the client's streams and sends back
its exit status. It starts on first use and exits after IDLE_SECONDS without jobs. A signal the
client receives is passed on to the child (one the client ignores, the child ignores); when the
client dies (SIGKILL), the child is killed too, and so are the children of a server that dies. When
no server can be reached before a job starts, the client runs the command itself, so warm start can
only make a job start sooner, never change what it does. A process of a SLURM job always starts
cold: a server started there would outlive the job and fork other jobs' trainers from it. With
EBD2N_WARM=0 the launcher runs the command in its own process, as `python -m ebd2n` would.

The launcher is not the trainer: it is left out of the frozen trainer's SOURCE_HASH
(`ebd2n.provenance.source_files`), and a server serves only clients of its own launcher code. A
forked job ends as a cold process does (every exit handler runs, its streams are flushed), but
skips the interpreter's teardown of its modules (a second with torch loaded, and nothing a job
leaves depends on it); its CPU
time and peak memory are its own (`resource.getrusage` in the fork: the trainer writes them to
train.log), while Snakemake's `benchmark:` file of a warm job measures the client.

The sockets live in a private directory (mode 0700) under the temporary directory: only the
user who started the server can hand it commands.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from ebd2n.provenance import PACKAGE_DIR, source_hash

ENV_SWITCH = "EBD2N_WARM"
"""0: start `train` and `validate` cold, in the launcher's own process; unset or 1: from a warm server."""

WARM_COMMANDS = ("train", "validate")
"""The commands that import torch; the others start in well under a second anyway."""

CLUSTER_JOB = "SLURM_JOB_ID"
"""Set in every SLURM job (and every process of an allocation): such a process always starts cold,
whatever EBD2N_WARM says (the controller's environment is exported to its jobs)."""

IDLE_SECONDS = 60.0
"""A server with no running job and no request for this long removes its socket and exits."""

IDLE_SWITCH = "EBD2N_WARM_IDLE"
"""Overrides IDLE_SECONDS (in seconds)."""

START_TIMEOUT = 300.0
"""How long a client waits for a server it started to accept (importing torch on a busy laptop)."""

_KEY_PREFIXES = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "CUDA_", "LD_", "LC_", "LANG", "TZ")
"""Environment variables read while Python and torch load: a server serves only clients that agree on all."""

_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_FORWARDED_NUMBERS = frozenset(int(s) for s in _FORWARDED_SIGNALS)
_HEADER = struct.Struct("!I")
_STARTED = b"started"
SERVE = "--serve"
"""`python -m ebd2n.warm --serve SOCKET`: the server; any other arguments are a command to launch."""
_MAX_SOCKET_PATH = 90  # bytes, with room for ".new-<pid>"; AF_UNIX allows 107 on Linux, 103 on macOS

_child_status: int | None = None
"""In a forked child, the status its command ended with (1 until it returns: an exception)."""


def main(argv: list[str]) -> int:
    """Run an `ebd2n` command line: forked from a warm server when allowed, else in this process."""
    code = forwarded(argv)
    if code is None:
        from ebd2n.cli import main as cli

        code = cli(argv)
    return code


def forwarded(argv: list[str]) -> int | None:
    """Run argv on a warm server and return its exit status; None: run it here instead."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or not argv or argv[0] not in WARM_COMMANDS:
        return None
    if "LOCAL_RANK" in os.environ:  # a torchrun worker: its launcher already paid the start-up
        return None
    if CLUSTER_JOB in os.environ:  # a server would outlive the job and serve other jobs from it
        return None
    try:
        path = _socket_path()
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            return None  # a long TMPDIR: no socket can live there
        connection = _connect(path) or _start_server(path)
    except OSError as error:
        print(f"ebd2n: warm start unavailable ({error}); starting cold", file=sys.stderr)
        return None
    if connection is None:
        return None
    with connection:
        return _run_remotely(connection, argv)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _socket_path() -> Path:
    """One socket per interpreter and flags, package source, umask and load-time environment."""
    directory = Path(tempfile.gettempdir()) / f"ebd2n-warm-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{directory} must be your own directory with mode 0700 (warm-start sockets)")
    environment = {k: v for k, v in os.environ.items() if k.startswith(_KEY_PREFIXES)}
    launcher = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()  # not part of source_hash
    key = json.dumps(
        [sys.executable, _interpreter_flags(), str(PACKAGE_DIR), source_hash(), launcher, _umask(), environment],
        sort_keys=True,
    )
    return directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.sock"


def _interpreter_flags() -> list[str]:
    """This interpreter's command-line flags (-O, -X dev, -W error, ...), for the server to start
    with: the options of sys.orig_argv before the module (`-m ...`), command or script."""
    flags, arguments = [], iter(sys.orig_argv[1:])
    for argument in arguments:
        if argument in ("-", "--") or not argument.startswith("-") or argument.startswith(("-m", "-c")):
            break
        flags.append(argument)
        if argument in ("-W", "-X", "--check-hash-based-pycs"):  # their value follows
            flags.append(next(arguments, ""))
    return flags


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
                [sys.executable, *_interpreter_flags(), "-m", "ebd2n.warm", SERVE, str(path)],
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
    ignored = [int(s) for s in _FORWARDED_SIGNALS if signal.getsignal(s) == signal.SIG_IGN]
    request = json.dumps(
        {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "ignored": ignored}
    ).encode()
    lines = _Lines(connection)
    try:
        socket.send_fds(connection, [_HEADER.pack(len(request)) + request], _standard_streams())
        if lines.next() != _STARTED:
            return None
    except OSError:
        return None

    def pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # the server is gone: the status read below reports it
            connection.sendall(b"%d\n" % signum)

    for signum in _FORWARDED_SIGNALS:
        if signum not in ignored:
            signal.signal(signum, pass_on)
    try:
        status = lines.next()
    except OSError:
        status = b""
    if not status:
        print("ebd2n: the warm-start server stopped while running this job", file=sys.stderr)
        return 1
    code = int(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


class _Lines:
    """The newline-terminated messages of a connection, one at a time ('' once it is closed)."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection, self.buffer = connection, b""

    def next(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.connection.recv(256)
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


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


def serve(path: Path) -> int:
    """Import the heavy modules once, then fork a child per request until idle; the server returns
    0, each forked child its job's exit status."""
    atexit.register(_leave_child)  # before any other exit handler, so it runs after all of them
    import torch
    import torch._dynamo  # noqa: F401  torch.optim imports it at the first optimizer

    import ebd2n.evaluate  # noqa: F401
    import ebd2n.train.trainer  # noqa: F401

    del torch
    fresh = Path(f"{path}.new-{os.getpid()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(fresh))
    listener.listen(64)
    os.replace(fresh, path)  # clients see the socket only once it accepts
    ours = path.stat().st_ino
    idle = float(os.environ.get(IDLE_SWITCH, IDLE_SECONDS))
    jobs: dict[int, socket.socket | None] = {}  # child pid -> its client's connection (None: client gone)
    last_activity = time.monotonic()
    while jobs or time.monotonic() - last_activity < idle:
        watched = [listener, *filter(None, jobs.values())]
        readable, _, _ = select.select(watched, [], [], 0.05 if jobs else min(1.0, idle))
        if listener in readable:
            job = _accept(listener, jobs)
            if job is not None:  # in the forked child
                return _run_job(job)
        for pid, connection in list(jobs.items()):
            if connection is not None and connection in readable and not _relay_signals(pid, connection):
                connection.close()
                jobs[pid] = None
        _reap(jobs)
        if jobs or readable:
            last_activity = time.monotonic()
    try:
        if path.stat().st_ino == ours:  # not if a newer server took the name
            path.unlink()
    except FileNotFoundError:
        pass
    log = path.with_suffix(".log")
    if log.exists() and not log.stat().st_size:
        log.unlink()
    return 0


def _accept(listener: socket.socket, jobs: dict[int, socket.socket | None]) -> tuple[dict, list[int], int] | None:
    """Take one request: fork its child, or drop it. Nothing a client does may stop the server.
    Returns the job (request, descriptors, server pid) in the forked child, None in the server."""
    try:
        connection, _ = listener.accept()
    except OSError:
        return None
    try:
        request, fds = _read_request(connection)
    except (OSError, ValueError, struct.error):
        connection.close()
        return None
    server = os.getpid()
    sys.stdout.flush()  # nothing buffered here may be written twice, by the server and by the child
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        traceback.print_exc()
        pid = -1
    if pid == 0:
        listener.close()
        for other in filter(None, jobs.values()):
            other.close()
        connection.close()
        return request, fds, server
    for fd in fds:
        os.close(fd)
    if pid < 0:
        connection.close()
        return None
    try:
        connection.sendall(_STARTED + b"\n")
        jobs[pid] = connection
    except OSError:  # the client is gone already
        _kill(pid, signal.SIGKILL)
        connection.close()
        jobs[pid] = None
    return None


def _read_request(connection: socket.socket) -> tuple[dict, list[int]]:
    """The client's request and its three descriptors (closed again if anything is wrong)."""
    connection.settimeout(5.0)
    fds: list[int] = []
    try:
        data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        (size,) = _HEADER.unpack(data[: _HEADER.size])
        data = data[_HEADER.size :]
        while len(data) < size:
            chunk = connection.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the client went away")
            data += chunk
        if len(fds) != 3:
            raise ValueError("a request carries three descriptors")
        request = json.loads(data)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    connection.settimeout(None)
    return request, fds


def _run_job(job: tuple[dict, list[int], int]) -> int:
    """The forked child's command, its status kept for `_leave_child`."""
    global _child_status
    _child_status = 1
    try:
        _child_status = _run_child(*job)
    except SystemExit as exit_:  # as the interpreter maps it
        _child_status = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
        raise
    return _child_status


def _leave_child() -> None:
    """The last exit handler: a forked child, once every other handler ran (its own and those
    registered while the server imported), flushes its streams and ends without the interpreter's
    teardown, which takes a second with torch loaded. In the server it does nothing."""
    if _child_status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_child_status)


def _run_child(request: dict, fds: list[int], server: int) -> int:
    """In the forked child: take over the client's streams, directory and environment, and run the
    command. Its status (or exception) goes up to the interpreter, which exits as a cold one would."""
    _die_with_parent(server)
    for signum in _FORWARDED_SIGNALS:
        if signum in request["ignored"]:
            signal.signal(signum, signal.SIG_IGN)
        else:
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    _reopen_standard_streams()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [sys.argv[0], *request["argv"]]
    from ebd2n.cli import main as cli

    return cli(request["argv"])


def _reopen_standard_streams() -> None:
    """New sys.std* on the client's descriptors, buffered as Python buffers them at start-up."""
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdin = open(0, encoding=sys.stdin.encoding, errors=sys.stdin.errors, closefd=False)  # noqa: SIM115
    sys.stdout = open(  # noqa: SIM115
        1, "w", buffering=1 if os.isatty(1) else -1, encoding=stdout.encoding, errors=stdout.errors, closefd=False
    )
    sys.stderr = open(2, "w", buffering=1, encoding=stderr.encoding, errors=stderr.errors, closefd=False)  # noqa: SIM115


def _die_with_parent(server: int) -> None:
    """Linux: the child gets SIGKILL if the server dies, so no job outlives its client's answer."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: a killed server leaves its running jobs to finish
    if os.getppid() != server:  # the server died before prctl took effect
        os._exit(1)


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
        if line.isdigit() and int(line) in _FORWARDED_NUMBERS:
            _kill(pid, int(line))
    return True


def _reap(jobs: dict[int, socket.socket | None]) -> None:
    """Collect finished children and send each exit status to its client."""
    while jobs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = jobs.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            connection.close()


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


if __name__ == "__main__":
    if sys.argv[1:2] == [SERVE]:
        sys.exit(serve(Path(sys.argv[2])))
    sys.exit(main(sys.argv[1:]))
