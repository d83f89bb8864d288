"""Failpoints: places where tests kill the controller as SIGKILL would, named by
``MESHCTL_FAILPOINT`` (``before-submit``, ``after-submit`` in the dispatch;
``before-launch``, ``after-launch``, ``after-join``, ``mid-teardown`` on the cloud side).
In-process tests replace ``die`` to stop short of the kill."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

log = logging.getLogger("meshctl.controller")


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


die: Callable[[], None] = _kill


def failpoint(name: str) -> None:
    """Die here when ``MESHCTL_FAILPOINT`` names this point."""
    if os.environ.get("MESHCTL_FAILPOINT") == name:
        log.warning("failpoint %s: killing the controller", name)
        die()
