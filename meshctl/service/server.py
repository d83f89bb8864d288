"""Serving the application with uvicorn: the address, TLS, and the store it opens.

On an address other than loopback the server refuses to start without TLS: tokens travel in
every request. The store is opened once and shared by the request threads.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
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


def serve(app: Any, listen: Listen, on_ready: Any = None) -> None:
    """Serve until SIGINT or SIGTERM."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=listen.host,
        port=listen.port,
        ssl_certfile=str(listen.tls_cert) if listen.tls_cert else None,
        ssl_keyfile=str(listen.tls_key) if listen.tls_key else None,
        log_level="warning",
        access_log=False,
        server_header=False,
    )
    server = uvicorn.Server(config)
    if on_ready is not None:
        on_ready()
    server.run()
