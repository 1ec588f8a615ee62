"""Warm start: the local training and validation jobs fork from a server that has imported torch.

`python -m ebd2n.warm train|train-pack|validate ...` hands its arguments, directory, environment and standard
streams to a per-user server (started on first use, gone after EBD2N_WARM_IDLE, 60, seconds without
jobs) that forks a child per job and returns its exit status (signal N: 128 + N), saving each job
over a second of importing torch. A job starts cold, in this process, with EBD2N_WARM=0, in a SLURM
job (a server would outlive it), in a torchrun worker, for other commands, and whenever no server
can be reached. A client that dies takes its child with it, a server that dies its children (Linux);
signals are not relayed, as jobs are idempotent: a killed job is simply run again. A server serves
one interpreter, trainer source and launcher, with the interpreter flags, umask and load-time
environment of its first client (the trainer sets its thread count itself). Its children skip the
interpreter's teardown (a second with torch loaded). The launcher is no part of the SOURCE_HASH.
"""

import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ebd2n.faults import slow_start
from ebd2n.job_time import STARTED, job_started
from ebd2n.provenance import PACKAGE_DIR, source_hash

_status: int | None = None
"""In a forked child, the exit status of its command (1 until it returns); None in the server."""


def main(argv: list[str]) -> int:
    """Run an `ebd2n` command line, forked from the warm server when allowed, else in this process."""
    slow_start()
    warm = os.environ.get("EBD2N_WARM") != "0" and argv[:1] in (["train"], ["train-pack"], ["validate"])
    local = not {"SLURM_JOB_ID", "LOCAL_RANK"} & os.environ.keys()  # a torchrun worker's launcher paid the start-up
    try:
        code = _forward(argv) if warm and local else None
    except KeyboardInterrupt:  # Ctrl-C: its child goes with this client; the job can simply run again
        print(f"ebd2n {argv[0]}: interrupted", file=sys.stderr)
        return 130
    if code is None:
        from ebd2n.cli import main as cli

        code = cli(argv)
    return code


def _forward(argv: list[str]) -> int | None:
    """Run argv on the warm server: its exit status, or None when the job did not start there."""
    env = {**os.environ, STARTED: str(job_started())}  # the forked child started with its server
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": env}).encode() + b"\n"
    try:
        with _connect() as connection, connection.makefile("rb") as replies:
            socket.send_fds(connection, [request[:1]], [0, 1, 2])
            connection.sendall(request[1:])
            if replies.readline() != b"started\n":
                return None  # an idle server that was exiting, or one that failed to start
            status = replies.readline()  # b"": the server was killed
    except OSError as error:
        print(f"ebd2n: warm start unavailable ({error}); starting cold", file=sys.stderr)
        return None
    if not status:
        print("ebd2n: the warm-start server stopped while running this job; run it again", file=sys.stderr)
        return 1
    return 128 - int(status) if int(status) < 0 else int(status)


def _connect() -> socket.socket:
    """Connect to this user's server for this interpreter, trainer source and launcher; start it if none listens."""
    directory = Path(tempfile.gettempdir()) / f"ebd2n-warm-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    if (info := directory.lstat()).st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{directory} must be your own directory with mode 0700")
    key = json.dumps([sys.executable, str(PACKAGE_DIR), source_hash(), Path(__file__).read_text()]).encode()
    path = directory / f"{hashlib.sha256(key).hexdigest()[:24]}.sock"
    connection = socket.socket(socket.AF_UNIX)
    with open(path.with_suffix(".lock"), "w") as lock, open(path.with_suffix(".log"), "ab") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if connection.connect_ex(str(path)) == 0:  # a path too long for a socket raises OSError
            return connection
        server = subprocess.Popen(
            [sys.executable, "-m", "ebd2n.warm", "--serve", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        while server.poll() is None:  # it listens before it imports torch
            if connection.connect_ex(str(path)) == 0:
                return connection
            time.sleep(0.02)
    connection.close()
    raise ConnectionError(f"the server exited, see {log.name}")


def serve(path: Path) -> int:
    """Listen, import torch and the trainer, then fork a child per job until idle: 0, or the job's status in a child."""
    atexit.register(_leave_child)  # the first exit handler registered runs last
    path.unlink(missing_ok=True)  # a killed server's (the client starting this one holds the lock)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(64)  # clients wait in the backlog while the imports below run
    import torch._dynamo  # noqa: F401  torch.optim imports it at the first optimizer

    import ebd2n.evaluate  # noqa: F401
    import ebd2n.report.dashboard  # noqa: F401  every training job that trains writes a page
    import ebd2n.train.trainer  # noqa: F401

    idle, last = float(os.environ.get("EBD2N_WARM_IDLE", 60)), time.monotonic()
    jobs: dict[int, socket.socket] = {}  # child pid -> its client's connection
    while jobs or time.monotonic() - last < idle:
        if select.select([listener], [], [], 0.02 if jobs else idle)[0]:
            connection = listener.accept()[0]
            server, pid = os.getpid(), os.fork()
            if pid == 0:
                listener.close()
                return _run_job(connection, server)
            jobs[pid] = connection
        for pid, connection in list(jobs.items()):
            if (ended := os.waitpid(pid, os.WNOHANG))[0]:
                with jobs.pop(pid), contextlib.suppress(OSError):  # a client gone: nobody to tell
                    connection.sendall(b"%d\n" % os.waitstatus_to_exitcode(ended[1]))
        last = time.monotonic() if jobs else last
    path.unlink(missing_ok=True)  # while still listening, so no newer server can have taken the name
    return 0


def _run_job(connection: socket.socket, server: int) -> int:
    """In a forked child: take the client's request, streams, directory and environment, and run
    the command. Its status (or exception) goes up to the interpreter, which exits as a cold one would."""
    global _status
    with contextlib.suppress(OSError, AttributeError):  # not Linux: a killed server's jobs finish
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the server
    if os.getppid() != server:  # the server died before prctl took effect
        os._exit(1)
    first, fds, _, _ = socket.recv_fds(connection, 1, 3)  # a client gone mid-request: an exception
    request = json.loads(first + connection.makefile("rb").readline())
    connection.sendall(b"started\n")
    threading.Thread(target=_die_with_client, args=(connection,), daemon=True).start()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as Python buffers it at start-up
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv[1:] = request["argv"]
    from ebd2n.cli import main as cli

    _status = 1
    try:
        _status = cli(request["argv"])
    except SystemExit as exit_:  # the status the interpreter makes of it
        _status = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
        raise
    return _status


def _die_with_client(connection: socket.socket) -> None:
    """Kill this job once its client is gone (a client sends nothing after its request)."""
    with contextlib.suppress(OSError):
        connection.recv(1)
    os.kill(os.getpid(), signal.SIGKILL)


def _leave_child() -> None:
    """A forked child's last exit handler: flush and end without the interpreter's teardown."""
    if _status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_status)


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[2])) if sys.argv[1:2] == ["--serve"] else main(sys.argv[1:]))
