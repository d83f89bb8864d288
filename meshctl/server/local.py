"""The home's local API: the API server's application on a Unix socket beside the controller.

    python -m meshctl.server.local HOME PARENT_PID [--mesh FILE] [--providers DIR] [--store URL]

The controller (``meshctl controller run``) starts one beside itself, with its own files, and
stops it when it stops. It serves ``create_app``'s routes (``POST /v1/jobs`` among them: what
``meshctl submit`` sends while a controller runs) on ``HOME/run/api.sock``, warm: the models,
the scheduler and the policies imported, the mesh and the policies read, before it listens.

The caller is known by the socket's peer credentials (``SO_PEERCRED``), not by a token: the
home's owner (this process's uid) acts as ``identity.LOCAL``, a local platform admin; any other
uid is refused (403), and the socket itself is the owner's only (0600, in the private run
folder). The API server's token path is not involved: this application takes no token.

One server at a time binds the socket: each holds ``api.lock`` while it serves, and one whose
parent went while it warmed up (a controller restarted at once) leaves without touching it.
It stops when its parent is no longer ``PARENT_PID`` (the controller that started it is gone,
perhaps before this server even looked), and on SIGTERM; it removes its socket as it goes. It
logs to the standard error it was given: the controller's log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import struct
import time
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from meshctl.app.context import AppContext
from meshctl.app.remote import api_socket, reachable
from meshctl.controller.rundir import make_run_dir
from meshctl.server.routes.common import PEER_UID
from meshctl.state.private import open_private

POLL_S = 1.0  # how often the server looks whether its parent is gone
LOCK_POLL_S = 0.1  # how often a server waiting for the lock tries it again
BACKLOG = 128  # connections queued while the server is busy or not yet accepting
MAX_BODY_BYTES = 128 * 2**20  # as ``meshctl server --max-upload``'s default
log = logging.getLogger("meshctl.server")


def serve(context: AppContext, parent: int) -> None:
    """Serve until ``parent`` (the process that started this one) is gone, or SIGTERM."""
    app = application(context)
    asyncio.run(warm(app))  # before the socket is bound: a caller never waits for it
    path = api_socket(context.home)
    make_run_dir(context.home)  # private to the user, as its home
    with open_private(path.with_suffix(".lock")) as lock:
        while os.getppid() == parent:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # the server of the controller before, leaving
                time.sleep(LOCK_POLL_S)
                continue
            listen(app, path, parent)
            return


def application(context: AppContext) -> Any:
    """``create_app`` over the home's store, for its owner (this process's uid)."""
    from meshctl.server.app import create_app
    from meshctl.server.served import Server
    from meshctl.state import open_store_at

    home = context.home
    store, loop_store = (
        open_store_at(context.store_url, home),
        open_store_at(context.store_url, home),
    )
    server = Server(context, store, MAX_BODY_BYTES, loop_store=loop_store)
    return create_app(server, local_owner=os.getuid())


def listen(app: Any, path: Path, parent: int) -> None:
    """Serve on ``path``. The socket is bound under a name of its own and listening before it
    takes ``path``'s name, so that a socket at ``path`` always takes connections (queued
    until the server accepts them): a caller that finds it never falls back for a moment."""
    path.unlink(missing_ok=True)  # a socket left by a server that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    binding = path.with_name(f".{path.name}.{os.getpid()}")
    binding.unlink(missing_ok=True)
    with reachable(binding) as address:
        listener.bind(address)
    os.chmod(binding, 0o600)
    listener.listen(BACKLOG)
    os.replace(binding, path)
    signal.signal(signal.SIGTERM, _leaving)
    try:
        asyncio.run(_serve(app, listener, parent, path))
    finally:
        listener.close()
        path.unlink(missing_ok=True)


def _leaving(_signum: int, _frame: FrameType | None) -> NoReturn:
    """SIGTERM (raised again by uvicorn once it has shut down): leave through ``listen``'s
    ``finally``, which a second SIGTERM (the controller's own, after its session's) must not
    cut short before the socket is removed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(0)


async def _serve(app: Any, listener: socket.socket, parent: int, path: Path) -> None:
    import uvicorn

    config = uvicorn.Config(app, http=peer_protocol(), lifespan="off", log_level="warning",
                            access_log=False, server_header=False)  # fmt: skip
    server = uvicorn.Server(config)

    async def watch() -> None:
        while os.getppid() == parent and not server.should_exit:
            await asyncio.sleep(POLL_S)
        server.should_exit = True

    watching = asyncio.create_task(watch())
    log.info("local API at %s", path)
    try:
        await server.serve(sockets=[listener])
    finally:
        watching.cancel()


def peer_protocol() -> type[Any]:
    """uvicorn's HTTP/1.1 protocol, each connection's requests carrying the caller's uid
    (``SO_PEERCRED``) in their scope's extensions (``PEER_UID``)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class PeerProtocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            uid = peer_uid(transport.get_extra_info("socket"))
            self.app = with_extension(self.app, PEER_UID, uid)

    return PeerProtocol


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid,
    gid); None when it has none."""
    if sock is None:
        return None
    with contextlib.suppress(OSError):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[1])
    return None


def with_extension(app: Any, key: str, value: object) -> Any:
    """``app`` (ASGI) with ``key: value`` in each request scope's extensions."""

    async def extended(scope: Any, receive: Any, send: Any) -> None:
        scope["extensions"] = {**(scope.get("extensions") or {}), key: value}
        await app(scope, receive, send)

    return extended


async def warm(app: Any) -> None:
    """One ``meshctl submit --dry-run`` through the application, its answer dropped, before
    the socket is served: what a submission imports and reads (the models, the scheduler, the
    policies, the mesh) is loaded once, here, not on the first caller's time."""
    body = b'{"command": ["true"], "flags": {"gpus": 1, "name": "warm"}, "dry_run": true}'
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/jobs", "raw_path": b"/v1/jobs", "query_string": b"",
        "root_path": "", "headers": [(b"content-type", b"application/json")],
        "client": None, "server": None, "extensions": {PEER_UID: os.getuid()},
    }  # fmt: skip
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 201:
            log.warning("the local API's warm-up submission answered %s", message["status"])

    try:
        await app(scope, receive, send)
    except Exception:  # a mesh that does not load: each submission says why
        log.exception("the local API's warm-up submission failed")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m meshctl.server.local")
    parser.add_argument("home", type=Path)
    parser.add_argument("parent_pid", type=int)
    parser.add_argument("--mesh", type=Path)
    parser.add_argument("--providers", type=Path)
    parser.add_argument("--store")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    context = AppContext(args.home, args.mesh, args.providers, args.store, warn=_logged)
    serve(context, args.parent_pid)


def _logged(lines: Any) -> None:
    for line in lines:
        log.warning("%s", line)


if __name__ == "__main__":
    main()
