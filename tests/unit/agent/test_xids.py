"""Which XIDs count (``XidLog``): fed kernel log reads and NVML events at given times, as the
agent feeds it; asserted on what counts at a given time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from meshctl.agent.probe import Xid
from meshctl.agent.xids import XidLog

pytestmark = pytest.mark.unit

WINDOW_S = 600.0
BOOT = "[    0.000000] Linux version 6.1.0\n"
X79 = "[ 4242.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
X48 = "[ 4300.000000] NVRM: Xid (PCI:0000:1b:00): 48, pid=2, DBE (double bit error)\n"
BARE_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"  # no stamp


@dataclass(frozen=True)
class Read:
    """The kernel log read at ``at_s``."""

    text: str
    at_s: float


@dataclass(frozen=True)
class Events:
    """NVML's events drained at ``at_s``."""

    xids: tuple[Xid, ...]
    at_s: float


@dataclass(frozen=True)
class Clear:
    """The operator's clear at ``at_s``, with the kernel log read then (None: unreadable)."""

    text: str | None
    at_s: float


Step = Read | Events | Clear


def counted(steps: list[Step], at_s: float) -> list[tuple[int, float | None]]:
    log = XidLog(WINDOW_S)
    for step in steps:
        if isinstance(step, Read):
            log.kernel(step.text, step.at_s)
        elif isinstance(step, Events):
            log.nvml(step.xids, step.at_s)
        else:
            log.clear(step.text, step.at_s)
    return [(x.xid, x.seen_at_s) for x in log.counted(at_s)]


NVML_79 = (Xid(79, "00000000:3B:00.0"),)


@pytest.mark.parametrize(
    ("steps", "at_s", "expected"),
    [
        # the first read is the agent's start: what it holds was logged before
        ([Read(BOOT + X79, 0.0)], 1.0, []),
        ([Read(BOOT + X79, 0.0), Read(BOOT + X79, 5.0)], 6.0, []),
        # logged after the start: counted from the read that first held it
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0)], 6.0, [(79, 5.0)]),
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0), Read(BOOT + X79, 10.0)], 11.0, [(79, 5.0)]),
        # the window: 600 s after it was seen it no longer counts
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0)], 604.9, [(79, 5.0)]),
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0)], 605.0, []),
        # the same line again (unstamped): a second XID, counted from when it came
        ([Read(BARE_79, 0.0), Read(BARE_79 * 2, 5.0)], 6.0, [(79, 5.0)]),
        # an old XID beside a new one: only the new one counts
        ([Read(BOOT + X79, 0.0), Read(BOOT + X79 + X48, 5.0)], 6.0, [(48, 5.0)]),
        # a log that starts afresh (a reboot) ends a line's count
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0), Read(BOOT, 10.0)], 11.0, []),
        # the operator's clear ends what counted; what comes after counts again
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0), Clear(BOOT + X79, 8.0)], 9.0, []),
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0), Clear(BOOT + X79, 8.0),
          Read(BOOT + X79 + X48, 12.0)], 13.0, [(48, 12.0)]),
        ([Read(BOOT, 0.0), Read(BOOT + X79, 5.0), Clear(None, 8.0), Read(BOOT + X79, 12.0)],
         13.0, []),
        # NVML's events: counted from their arrival, within the window, ended by a clear
        ([Events(NVML_79, 5.0)], 6.0, [(79, 5.0)]),
        ([Events(NVML_79, 5.0), Events((), 300.0)], 604.9, [(79, 5.0)]),
        ([Events(NVML_79, 5.0), Events((), 300.0)], 605.0, []),
        ([Events(NVML_79, 5.0), Clear(BOOT, 8.0)], 9.0, []),
        # the same XID on the same GPU seen twice: once, at its latest
        ([Events(NVML_79, 5.0), Events(NVML_79, 50.0)], 604.9, [(79, 50.0)]),
    ],
    ids=["logged before the start", "before the start, read again", "logged after the start",
         "after the start, read again", "inside the window", "aged out of the window",
         "the same line twice", "an old XID and a new one", "the log starts afresh",
         "cleared", "a new XID after the clear", "cleared with the log unreadable",
         "an NVML event", "an NVML event inside the window", "an NVML event aged out",
         "an NVML event cleared", "the same NVML event twice"],
)  # fmt: skip
def test_which_xids_count(
    steps: list[Step], at_s: float, expected: list[tuple[int, float | None]]
) -> None:
    assert counted(steps, at_s) == expected


def test_a_clear_says_how_many_xids_counted() -> None:
    log = XidLog(WINDOW_S)
    log.kernel(BOOT, 0.0)
    log.kernel(BOOT + X79 + X48, 5.0)
    log.nvml(NVML_79, 6.0)
    assert log.clear(BOOT + X79 + X48, 7.0) == 3  # 79 on two bus ids' spellings, and 48
    assert log.clear(BOOT + X79 + X48, 8.0) == 0
