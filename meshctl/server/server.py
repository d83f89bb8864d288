"""Serving the application with uvicorn: the address, TLS, and the store it opens.

On an address other than loopback the server refuses to start without TLS: tokens travel in
every request. Each process opens the store twice: once for the request threads, once for the
event loop (tokens, and submissions with no files).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from meshctl.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Listen:
    host: str
    port: int
    tls_cert: Path | None = None
    tls_key: Path | None = None


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_listen(listen: Listen) -> None:
    """One line, exit 2, for an address and TLS files that cannot be served safely."""
    if (listen.tls_cert is None) != (listen.tls_key is None):
        raise InvalidInput("--tls-cert, --tls-key: give both, or neither")
    if listen.tls_cert is None and not loopback(listen.host):
        raise InvalidInput(
            f"--host: {listen.host} is not a loopback address; serving it needs TLS "
            "(--tls-cert FILE --tls-key FILE): tokens travel in every request"
        )
    for flag, path in (("--tls-cert", listen.tls_cert), ("--tls-key", listen.tls_key)):
        if path is not None and not path.is_file():
            raise InvalidInput(f"{flag}: no such file {path}")
    if not 0 < listen.port < 65536:
        raise InvalidInput(f"--port: expected 1 to 65535, got {listen.port}")


@dataclass(frozen=True, slots=True)
class Settings:
    """What each server process builds its application from (passed in the environment:
    uvicorn starts its workers as new processes)."""

    home: str
    mesh: str | None
    providers: str | None
    store: str | None
    max_body_bytes: int


SETTINGS_ENV = "MESHCTL_SERVER_SETTINGS"


def application() -> Any:
    """The application of one server process, from ``SETTINGS_ENV`` (uvicorn's factory)."""
    from prometheus_client import make_asgi_app

    from meshctl.app.context import AppContext
    from meshctl.server.app import create_app
    from meshctl.server.metrics import registry
    from meshctl.server.served import Server
    from meshctl.state import open_store_at

    settings = Settings(**json.loads(os.environ[SETTINGS_ENV]))
    home = Path(settings.home)
    context = AppContext(
        home,
        None if settings.mesh is None else Path(settings.mesh),
        None if settings.providers is None else Path(settings.providers),
        settings.store,
        warn=_logged,
    )
    store, loop_store = open_store_at(settings.store, home), open_store_at(settings.store, home)
    server = Server(context, store, settings.max_body_bytes, loop_store=loop_store)
    # the registry is built once per process: it keeps its place in the event log
    return create_app(server, metrics=make_asgi_app(registry(store)))


def _logged(lines: Sequence[str]) -> None:
    """A warning of the application layer (the policies it plans with are not those the
    controller enforces ...), in the server's log."""
    for line in lines:
        logging.getLogger("meshctl.server").warning("%s", line)


def serve(settings: Settings, listen: Listen, workers: int, on_ready: Any = None) -> None:
    """Serve until SIGINT or SIGTERM, in ``workers`` processes sharing the address."""
    import uvicorn

    os.environ[SETTINGS_ENV] = json.dumps(asdict(settings))
    if on_ready is not None:
        on_ready()
    uvicorn.run(
        "meshctl.server.server:application",
        factory=True,
        host=listen.host,
        port=listen.port,
        workers=workers if workers > 1 else None,
        ssl_certfile=str(listen.tls_cert) if listen.tls_cert else None,
        ssl_keyfile=str(listen.tls_key) if listen.tls_key else None,
        log_level="warning",
        access_log=False,
        server_header=False,
    )
