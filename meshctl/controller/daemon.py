"""The controller as a background process: started by ``meshctl up``, stopped by ``down``.

The pid file records the pid and its start time (so a reused pid is never signalled); the log
goes to ``$MESHCTL_HOME/run/logs/controller.log``; the heartbeat file says when the last
cycle ran. The daemon is ``python -m meshctl controller run`` in a session of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from meshctl.controller.rundir import make_run_dir, run_dir
from meshctl.host.procs import start_ticks, zombie
from meshctl.state.private import open_private, private_dir, write_private


def pid_file(home: Path) -> Path:
    return run_dir(home) / "controller.json"


def heartbeat_file(home: Path) -> Path:
    return run_dir(home) / "controller.heartbeat"


def log_file(home: Path) -> Path:
    return run_dir(home) / "logs" / "controller.log"


def running(home: Path) -> int | None:
    """The daemon's pid if it is alive (and is the process we started)."""
    path = pid_file(home)
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    pid, ticks = int(raw["pid"]), int(raw["start_ticks"])
    if start_ticks(pid) != ticks or zombie(pid):
        return None  # gone, reused by another program, or dead and not yet reaped
    return pid


def start(home: Path, args: list[str], env: dict[str, str] | None = None) -> int:
    """Start ``meshctl <args>`` (a ``controller run``) in the background; return its pid."""
    make_run_dir(home)
    log = log_file(home)
    private_dir(log.parent)
    heartbeat_file(home).unlink(missing_ok=True)
    with open_private(log) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshctl", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    write_private(
        pid_file(home), json.dumps({"pid": proc.pid, "start_ticks": start_ticks(proc.pid)})
    )
    return proc.pid


def nudge(home: Path) -> bool:
    """Ask the daemon to cycle now (SIGUSR1) rather than at its next interval."""
    pid = running(home)
    if pid is None:
        return False
    beat = heartbeat(home)
    if beat is None or beat.get("pid") != pid:
        return True  # still starting: SIGUSR1 before its handler is set would kill it
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)
    return True


def hold_file(home: Path) -> Path:
    return run_dir(home) / "hold.json"


def hold(home: Path, reason: str, at_s: float) -> None:
    """Nothing new starts until ``lift_hold`` (``meshctl down --drain``): the controller reads
    this every cycle, keeps following the jobs that run, and places nothing."""
    make_run_dir(home)
    write_private(hold_file(home), json.dumps({"reason": reason, "at_s": at_s}))


def lift_hold(home: Path) -> None:
    hold_file(home).unlink(missing_ok=True)


def held(home: Path) -> str | None:
    """Why nothing new may start now, or None."""
    try:
        return str(json.loads(hold_file(home).read_text())["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def heartbeat(home: Path) -> dict[str, object] | None:
    try:
        data: dict[str, object] = json.loads(heartbeat_file(home).read_text())
    except (OSError, ValueError):
        return None
    return data


def live_beat(beat: Mapping[str, object] | None, pid: int | None) -> dict[str, object]:
    """The heartbeat when the controller that wrote it is the one running now (``pid``), else
    nothing: a heartbeat left by a controller that stopped says nothing about now."""
    if beat is None or pid is None or beat.get("pid") != pid:
        return {}
    return dict(beat)


def stop(home: Path, grace_s: float = 10.0) -> list[int]:
    """SIGTERM the daemon's session, SIGKILL what is left after ``grace_s``; return the pids."""
    path = pid_file(home)
    if not path.is_file():
        return []
    raw = json.loads(path.read_text())
    sid, ticks = int(raw["pid"]), int(raw["start_ticks"])
    alive_ticks = start_ticks(sid)
    if alive_ticks is not None and alive_ticks != ticks:
        path.unlink(missing_ok=True)  # the pid is another program's now
        return []
    from meshctl.pools.local import terminate  # the local pool's: only to stop the daemon

    signalled = terminate([sid], grace_s)
    path.unlink(missing_ok=True)
    heartbeat_file(home).unlink(missing_ok=True)
    return signalled
