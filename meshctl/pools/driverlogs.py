"""Where a Ray cluster on this machine keeps its jobs' driver logs, before and after it stops.

Ray writes a submission's driver log as ``job-driver-<id>.log`` in the session's log folder
(``<temp>/session_<time>/logs``; every node of a cluster on this machine shares the head's:
``local.py``). A cluster meshctl stops (``meshctl down``, or ``meshctl up`` starting a head
that died again) has its temp folder removed, sockets, packages and all; its driver logs are
moved out first, to ``<run>/logs/<pool>-drivers`` (``keep``), and kept a day. So the log of a
job that ended just before its head went, before the controller saw it end, is still there
to read its exit in (``meshctl/workload/exits.py``), and ``find`` looks in the live session,
the earlier sessions of the same temp folder, then the kept ones.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from meshctl.state.private import private_dir

DRIVER_LOG = "job-driver-{}.log"  # Ray's name for a submission's driver log, per node
KEPT_S = 24 * 3600.0  # a stopped cluster's driver logs are kept this long


def kept_folder(log_dir: str, pool: str) -> Path:
    """Where the driver logs of the pool's stopped clusters are kept."""
    return Path(log_dir) / f"{pool}-drivers"


def find(temp_dir: str, kept: str | None, submission_id: str) -> Path | None:
    """The submission's driver log: in the live session, an earlier one (newest first: their
    names are their start times), or kept from a stopped cluster; None when there is none."""
    name = DRIVER_LOG.format(submission_id)
    live = Path(temp_dir) / "session_latest" / "logs" / name
    if live.is_file():
        return live
    places = [s / "logs" for s in sorted(Path(temp_dir).glob("session_2*"), reverse=True)]
    for folder in [*places, *([Path(kept)] if kept else [])]:
        if (folder / name).is_file():
            return folder / name
    return None


def keep(temp_dir: str, kept: Path, now: float | None = None) -> int:
    """Move the driver logs out of a cluster's temp folder before it is removed; those kept
    longer than ``KEPT_S`` go. Returns the number moved. Never raises: a log that cannot be
    moved is lost with its cluster, as it was before."""
    moved = 0
    with contextlib.suppress(OSError):
        private_dir(kept)
        cutoff = (time.time() if now is None else now) - KEPT_S
        for old in kept.glob(DRIVER_LOG.format("*")):
            with contextlib.suppress(OSError):
                if old.stat().st_mtime < cutoff:
                    old.unlink()
        for log in Path(temp_dir).glob(f"session_2*/logs/{DRIVER_LOG.format('*')}"):
            with contextlib.suppress(OSError):
                shutil.move(log, kept / log.name)  # a rename within one file system
                os.chmod(kept / log.name, 0o600)
                moved += 1
    return moved
