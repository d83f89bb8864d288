"""Handing a command to the home's warm command server (``cmdserver.py``) and waiting for it.

``meshctl submit`` is a short command that a person or a script runs many times a minute;
as a new process it spends most of its time importing the CLI, pydantic and the scheduler
(``benchmarks/cli_startup.py``). While a controller runs, the home has a command server that
holds all of that imported already. ``forward`` connects to it, passes this process's
standard input, output and error (the descriptors themselves), its arguments, working
folder, environment and umask, and waits for the exit status. The server forks a child for
the command, which writes straight to those descriptors: to a terminal, a pipe or a file,
what the command prints is where it would have gone.

``forward`` returns None when no server takes the command (none running, a stale socket, a
server that refuses: another interpreter, meshctl, import path or warning options, or
meshctl's files changed since it started); the caller then runs the command itself. Once
a server took it, the command's status is the answer. This module imports the standard
library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

PACKAGE = str(Path(__file__).resolve().parent.parent)  # meshctl's folder
SOCKET = "commands.sock"  # in the home's run folder (``controller/rundir.py``)
# Signals the caller of the command may send it: passed on to the command's process.
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
MAX_MESSAGE = 1 << 20  # a request: arguments and environment, in one datagram
_SUN_PATH = 100  # AF_UNIX paths are at most 107 bytes: longer ones go through /proc


def socket_path(home: Path) -> Path:
    return home / "run" / SOCKET


@contextlib.contextmanager
def reachable(path: Path) -> Iterator[str]:
    """A name for ``path`` that ``bind`` and ``connect`` take: the path itself, or for one
    too long for a socket address, the same file through an open descriptor of its folder."""
    if len(os.fsencode(path)) < _SUN_PATH:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def request(args: Sequence[str]) -> dict[str, object]:
    """What the server needs to run ``args`` as this process would."""
    mask = os.umask(0)
    os.umask(mask)
    return {
        "argv0": sys.argv[0],
        "args": list(args),
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": mask,
        "interpreter": interpreter(),
        "encoding": [stream.encoding for stream in (sys.stdin, sys.stdout, sys.stderr)],
    }


def interpreter() -> list[object]:
    """What decides which code this interpreter runs and how, that a server must share: the
    executable, meshctl's folder, the import path (``PYTHONPATH``, site folders; not its
    first entry, the script's folder), warning options, development and optimize modes."""
    return [
        sys.executable,
        PACKAGE,
        sys.path[1:],
        sys.warnoptions,
        sys.flags.dev_mode,
        sys.flags.optimize,
    ]


def forward(home: Path, args: Sequence[str]) -> int | None:
    """The exit status of ``args`` run by ``home``'s command server, or None when none
    takes it."""
    try:
        message = json.dumps(request(args)).encode()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except (OSError, ValueError):  # no working folder; a stream without an encoding
        return None
    with sock:
        try:
            with reachable(socket_path(home)) as address:
                sock.connect(address)
            socket.send_fds(sock, [message], [0, 1, 2])
            accepted = _read(sock)
        except OSError:  # no server, a stale socket, a closed standard stream
            return None
        pid = None if accepted is None else accepted.get("pid")
        if not isinstance(pid, int):
            return None  # refused, or gone before it took the command
        return _outcome(sock, pid)


def _outcome(sock: socket.socket, pid: int) -> int:
    """Wait for the command's status, passing on the signals this process gets meanwhile
    (the handlers before are put back after: a process that goes on must not keep passing
    its signals to a command that ended, whose pid may be anyone's by then)."""
    received: list[int] = []

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    before = {signum: signal.signal(signum, pass_on) for signum in PASSED_ON}
    try:
        done = _read(sock)
    except OSError:
        done = None
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    status = None if done is None else done.get("exit")
    if isinstance(status, int):
        return status
    if received:
        return 128 + received[-1]  # as a shell reports a command its signal ended
    print("meshctl: the command server ended the command without a status", file=sys.stderr)
    return 1


def _read(sock: socket.socket) -> dict[str, int | str] | None:
    data = sock.recv(MAX_MESSAGE)
    if not data:
        return None
    found = json.loads(data)
    return found if isinstance(found, dict) else None
