"""Which XIDs count against the node: those the agent saw logged after it started, or after the
operator's last clear, within the last ``Limits.xid_window_s``. State with time as an argument,
no I/O: the agent feeds it each read of the kernel log and each drain of NVML's events.

When was a kernel log line logged? The agent takes the first read that holds it as its time
(reads are a probe apart, seconds, against a window of minutes). The kernel's own stamps are
not used: ``dmesg``'s seconds since boot run on a clock that stops while the machine sleeps and
cannot be matched to the wall clock reliably, a log file the operator names (a journald
export) stamps its lines in other forms or not at all, and the fake driver's log of the tests
and the demo stamps them at will. So:

- the XID lines in the log at the first read the agent makes (or at a clear) were logged
  before: they never count;
- a line counts only while it is still in the log: a log that starts afresh (a reboot, or the
  fake driver's log removed) ends it. The ring buffer wrapping past a line ends it too, which
  is rare for an XID; the GPU's state (lost, ECC errors, links down) is probed afresh anyway;
- a read that fails changes nothing: the lines of the last good read still count, and a line
  is not taken for new because one read missed it.

NVML's events come as they happen, each counted from its arrival.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from meshctl.agent.probe import XID_WINDOW_S, Xid, xid_lines

# A kernel log line, and which copy of it (the same text twice, unstamped, is two XIDs).
LineKey = tuple[str, int]


class XidLog:
    """The XIDs seen: the kernel log's lines as last read, and NVML's events."""

    def __init__(self, window_s: float = XID_WINDOW_S) -> None:
        self.window_s = window_s
        self._lines: dict[LineKey, Xid] | None = None  # None: no read yet
        self._events: list[Xid] = []

    def kernel(self, text: str, now: float) -> None:
        """The kernel log as read at ``now``: its XID lines not in the last read were logged
        now; at the first read, they were all logged before the agent started."""
        before = self._lines
        if before is None:
            self._lines = dict(_keyed(text))
            return
        self._lines = {
            key: replace(xid, seen_at_s=before[key].seen_at_s if key in before else now)
            for key, xid in _keyed(text)
        }

    def nvml(self, xids: Iterable[Xid], now: float) -> None:
        """NVML's events drained at ``now``; those older than the window are forgotten."""
        since = now - self.window_s
        kept = [x for x in self._events if x.seen_at_s is not None and x.seen_at_s > since]
        self._events = kept + [replace(x, seen_at_s=now) for x in xids]

    def clear(self, text: str | None, now: float) -> int:
        """The operator's clear at ``now``: every XID seen so far stops counting. ``text``: the
        kernel log read now, whose lines all count as logged before the clear (None: it could
        not be read; the lines of the last read do). Returns how many XIDs counted."""
        dropped = len(self.counted(now))
        if text is not None:
            self._lines = dict(_keyed(text))
        elif self._lines is not None:
            self._lines = {k: replace(x, seen_at_s=None) for k, x in self._lines.items()}
        self._events = []
        return dropped

    def counted(self, now: float) -> tuple[Xid, ...]:
        """The XIDs that count at ``now``: seen within the window, the latest of each XID and
        GPU, the earliest first."""
        since = now - self.window_s
        fresh = [x for x in self._seen() if x.seen_at_s is not None and x.seen_at_s > since]
        latest = {(x.xid, x.bus_id): x for x in sorted(fresh, key=_seen_at)}
        return tuple(sorted(latest.values(), key=_seen_at))

    def _seen(self) -> list[Xid]:
        return [*(self._lines or {}).values(), *self._events]


def _keyed(text: str) -> list[tuple[LineKey, Xid]]:
    copies: dict[str, int] = {}
    keyed = []
    for line, xid in xid_lines(text):
        copies[line] = copies.get(line, 0) + 1
        keyed.append(((line, copies[line]), xid))
    return keyed


def _seen_at(xid: Xid) -> float:
    return xid.seen_at_s or 0.0
