"""Processes as ``/proc`` shows them (Linux; standard library only): what ``meshctl submit``
needs to find the controller it nudges, without importing the local pool that starts them."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after ``pid (comm)``: state first; None when there is no such
    process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, who it is."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 overall


def zombie(pid: int) -> bool:
    """Gone, or dead and not yet reaped."""
    fields = stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")
