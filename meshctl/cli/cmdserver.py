"""The home's command server: runs ``meshctl submit`` for ``relay.forward`` with the CLI warm.

    python -m meshctl.cli.cmdserver HOME PARENT_PID

The controller (``meshctl controller run``) starts one beside itself and stops it when it
stops. It imports the CLI and runs one ``submit --dry-run`` at start, so that typer, pydantic,
the models, the scheduler and the policies' checks are loaded, then listens on
``HOME/run/commands.sock`` (its folder is private to the user, and a caller of another user
is refused). For each command it forks: the child takes the caller's standard streams
(the descriptors the caller passed), working folder, environment, umask and arguments, runs
the command as ``meshctl`` would (``app.for_command``), and sends its exit status. A child
starts with everything imported, so a submission costs the caller about an interpreter's
start more than the command's own work (``benchmarks/dispatch.py``).

The server refuses a request (and the caller runs the command itself) from another
interpreter (``relay.interpreter``: the executable, meshctl's folder, the import path, the
warning options), and once any of meshctl's modules it loaded has changed on disk: it then
stops, as its code is no longer what a new process would run. It stops too when its parent
is no longer ``PARENT_PID`` (the controller that started it is gone, perhaps before this
server even looked), and on SIGTERM; it removes its socket as it goes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import IO, Any, NoReturn, TextIO

from meshctl.cli import argv, entry, leave, relay
from meshctl.controller.rundir import make_run_dir
from meshctl.state.private import open_private

# Run once at start, so that what the command imports on first use is loaded before a fork.
WARM = {"submit": ["submit", "--dry-run", "--gpus", "1", "--name", "warm", "--", "true"]}
POLL_S = 1.0  # how often the server looks whether its parent is gone
LOCK_POLL_S = 0.1  # how often a server waiting for the lock tries it again
BACKLOG = 64


class Stale(Exception):
    """meshctl's code changed under the server."""


def loaded_files() -> dict[str, int]:
    """Each of meshctl's modules loaded now, with its file's modification time."""
    found: dict[str, int] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.startswith(relay.PACKAGE):
            with contextlib.suppress(OSError):
                found[path] = os.stat(path).st_mtime_ns
    return found


def refusal(request: dict[str, Any], files: dict[str, int]) -> str | None:
    """Why this server must not run ``request``, or None."""
    if request.get("interpreter") != relay.interpreter():
        return "another interpreter"
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return "stale"
        except OSError:
            return "stale"
    args = request.get("args")
    if not isinstance(args, list) or argv.command_name(args) not in entry.SERVED:
        return "not served"
    return None


def warm(home: Path) -> None:
    """Run each served command once, its output dropped, its outcome ignored."""
    from meshctl.cli import app

    with open(os.devnull, "w") as drop:
        for args in WARM.values():
            whole = ["--home", str(home), *args]
            with (
                contextlib.redirect_stdout(drop),
                contextlib.redirect_stderr(drop),
                contextlib.suppress(SystemExit, Exception),
            ):
                app.for_command(whole)(whole, prog_name="meshctl")


def serve(home: Path, parent: int) -> None:
    """Serve until ``parent`` (the process that started this one) is gone. One server at a
    time binds the socket: each holds ``commands.lock`` while it serves, and one whose parent
    went while it warmed up (a controller restarted at once) leaves without touching it."""
    warm(home)
    files = loaded_files()
    path = relay.socket_path(home)
    make_run_dir(home)  # private to the user, as its home
    with open_private(path.with_suffix(".lock")) as lock:
        while os.getppid() == parent:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # the server of the controller before, leaving
                time.sleep(LOCK_POLL_S)
                continue
            listen(path, parent, files, lock)
            return


def listen(path: Path, parent: int, files: dict[str, int], lock: IO[bytes]) -> None:
    path.unlink(missing_ok=True)  # a socket left by a server that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with relay.reachable(path) as address:
        listener.bind(address)
    os.chmod(path, 0o600)
    server = os.getpid()  # a forked child never takes the socket down (``run_child``)
    signal.signal(signal.SIGTERM, _leaving)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they end
    listener.listen(BACKLOG)
    listener.settimeout(POLL_S)
    try:
        while os.getppid() == parent:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(None)
                take(conn, files, (listener, lock))
    except Stale:
        pass
    finally:
        listener.close()
        if os.getpid() == server:
            path.unlink(missing_ok=True)


def _leaving(_signum: int, _frame: FrameType | None) -> NoReturn:
    """SIGTERM: leave through ``listen``'s ``finally``, which a second SIGTERM (the
    controller's own, after its session's) must not cut short before the socket is removed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(0)


def take(
    conn: socket.socket, files: dict[str, int], server_only: tuple[socket.socket, IO[bytes]]
) -> None:
    """Read one request and fork its command, or refuse it. The child closes
    ``server_only`` (the listening socket, the lock)."""
    try:
        data, fds, _flags, _address = socket.recv_fds(conn, relay.MAX_MESSAGE, 3)
    except OSError:
        return
    try:
        if peer_uid(conn) != os.getuid() or len(fds) != 3:
            return
        try:
            request = json.loads(data)
        except ValueError:
            request = None
        why = refusal(request, files) if isinstance(request, dict) else "not a request"
        if why is not None:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"refused": why}).encode())
            if why == "stale":
                raise Stale
            return
        try:
            child = os.fork()
        except OSError:
            return  # the caller, answered nothing, runs the command itself
        if child == 0:
            for held in server_only:
                held.close()
            run_child(conn, request, fds)
    finally:
        for fd in fds:
            os.close(fd)


def peer_uid(conn: socket.socket) -> int:
    """The user of the process at the other end (SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def run_child(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> NoReturn:
    """In the forked child: whatever happens, the child ends here, with the command's status;
    it never returns to the server's loop."""
    status = 1
    try:
        status = _child(conn, request, fds)
    finally:
        os._exit(status)


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Become the caller's process, run its command, send its status. A request it cannot
    take on (a working folder that is gone) is refused, and the caller runs it itself."""
    try:
        become(request, fds)
        conn.send(json.dumps({"pid": os.getpid()}).encode())
    except BaseException as error:  # told to the caller, which runs the command itself
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"refused": f"{type(error).__name__}: {error}"}).encode())
        return 1
    status = 1
    try:
        status = run_command([str(a) for a in request["args"]])
    except BaseException:  # the caller gets a status whatever happened
        with contextlib.suppress(Exception):
            traceback.print_exc()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        conn.send(json.dumps({"exit": status}).encode())
    return status


def become(request: dict[str, Any], fds: list[int]) -> None:
    """The caller's signals' defaults, standard streams, working folder, environment, umask
    and command line."""
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    _streams(request.get("encoding") or [None, None, None])
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(int(request["umask"]))
    sys.argv = [str(request.get("argv0") or "meshctl"), *map(str, request["args"])]


def run_command(args: list[str]) -> int:
    """``args`` as ``meshctl`` runs them; the exit status, its message printed as
    ``SystemExit`` prints one."""
    from meshctl.cli import app

    try:
        app.for_command(args)()
    except SystemExit as done:
        return leave.status(done.code)
    return 0


def _streams(encodings: list[str | None]) -> None:
    """Standard streams over descriptors 0, 1 and 2 as the interpreter opens them: the
    caller's encodings, line-buffered output to a terminal."""

    def output(fd: int, encoding: str | None, errors: str) -> TextIO:
        line = os.isatty(fd)
        return open(fd, "w", 1 if line else -1, encoding or "utf-8", errors, closefd=False)

    sys.stdin = open(0, encoding=encodings[0] or "utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = output(1, encodings[1], "strict")
    sys.stderr = output(2, encodings[2], "backslashreplace")


def main() -> None:
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        print("usage: python -m meshctl.cli.cmdserver HOME PARENT_PID", file=sys.stderr)
        raise SystemExit(2)
    serve(Path(sys.argv[1]), int(sys.argv[2]))


if __name__ == "__main__":
    main()
