"""What ``meshctl status`` shows, for the CLI and the API server alike: what this machine
knows of the controller and the pools is read here, the document is counted in
``controller.status``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.app.pools import PoolHealth
    from meshctl.controller.status import Status
    from meshctl.state import Store


def collect(context: AppContext, store: Store, health: PoolHealth) -> Status:
    """Everything status shows (``controller.status``): what this machine knows of the
    controller and the pools is read here, the document is counted there."""
    from meshctl.controller import daemon
    from meshctl.controller.runtime import clients
    from meshctl.controller.status import status_document

    mesh = context.mesh()
    driven = set(clients(mesh, context.home))
    beat: dict[str, Any] = dict(daemon.heartbeat(context.home) or {})
    pid = daemon.running(context.home)
    down = health(mesh, daemon.live_beat(beat, pid))
    return status_document(
        store, mesh, beat=beat, pid=pid, driven=driven, unavailable=down, now_s=time.time()
    )
