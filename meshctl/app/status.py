"""What ``meshctl status`` shows, for the CLI and the API server alike: what this machine
knows of the controller and the pools is read here, the document is counted in
``controller.status``; and whether anything decides for the mesh (``controller_down``, status's
exit 1), read from the document alone: a status the local API answered is judged without
importing what counts one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.app.pools import PoolHealth
    from meshctl.controller.status import ControllerData, Status
    from meshctl.state import Store

STALE_CYCLE_S = 90.0  # a controller whose last cycle is older is not deciding: hung


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


def controller_down(controller: ControllerData) -> str | None:
    """Why nothing decides for the mesh now (None: a controller runs and cycles), as
    ``status`` says it after drawing its screen (exit 1)."""
    if controller["pid"] is None:
        return "no controller is running (meshctl up starts one)"
    age = controller["last_cycle_age_s"]
    if age is not None and age > STALE_CYCLE_S:
        return f"the controller (pid {controller['pid']}) last cycled {age:.0f} s ago: hung?"
    return None
