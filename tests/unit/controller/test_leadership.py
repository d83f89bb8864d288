"""Which controller acts: the lease held, renewed, waited for, taken over, lost."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading

import pytest

from meshctl.controller.leadership import Leadership, gone_here, holder_id
from meshctl.host.procs import start_ticks
from meshctl.state import FencedError, JobRecord, JobState, MemoryStore, StoreError
from meshctl.state.lease import acquire, current

pytestmark = pytest.mark.unit

JOB = JobRecord("j1", "j", "t", JobState.PENDING, 0, {}, None, 1.0, 1.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pair(ttl_s: float = 10.0) -> tuple[MemoryStore, MemoryStore, Clock, Leadership, Leadership]:
    """Two controllers on one store (as one database seen by two processes: the fence is each
    one's own, so each gets a store object of its own over the same tables)."""
    shared, clock = MemoryStore(), Clock()
    other = MemoryStore()
    other._tables, other._logs, other._lock = shared._tables, shared._logs, shared._lock
    a = Leadership(shared, ttl_s, clock, holder="host-a/1/1")
    b = Leadership(other, ttl_s, clock, holder="host-b/2/2")
    return shared, other, clock, a, b


def test_one_leads_the_other_stands_by_until_the_lease_runs_out() -> None:
    _, store_b, clock, a, b = pair()
    assert a.lead()
    assert not b.lead()
    clock.now += 9.9
    assert a.lead()  # renewed: until 1019.9
    clock.now += 9.9
    assert not b.lead()
    clock.now += 10.2  # a stopped renewing
    assert b.lead()
    assert (a.epoch, b.epoch) == (1, 2)
    assert not a.lead()
    assert a.deposed
    assert not a.leading
    assert store_b.create(JOB).version == 1  # the new leader writes


def test_nothing_is_written_before_leading_and_after_being_deposed() -> None:
    store_a, _, clock, a, b = pair()
    with pytest.raises(FencedError):
        store_a.create(JOB)  # a standby writes nothing
    assert a.lead()
    store_a.create(JOB)
    clock.now += 11
    assert b.lead()
    with pytest.raises(FencedError, match="leads no more"):
        store_a.update(JOB, expected_version=1)  # a woke up after its lease ran out


def test_a_clean_stop_hands_over_at_once() -> None:
    _, _, _, a, b = pair()
    assert a.lead()
    a.release()
    assert b.lead()
    assert b.epoch == 2


def test_a_store_out_of_reach_keeps_the_lead_only_while_the_lease_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The log says so once, when the store first fails, and once when it answers again
    (a renewal tried every few seconds through a minute's outage is not a line each)."""
    caplog.set_level(logging.INFO, logger="meshctl.controller")
    store_a, _, clock, a, _ = pair()
    assert a.lead()
    broken = store_a.get

    def fail(*args: object, **kwargs: object) -> object:
        raise StoreError("database unreachable")

    store_a.get = fail  # type: ignore[method-assign]
    clock.now += 5
    assert a.lead()
    clock.now += 6  # past the lease it holds
    assert not a.lead()
    store_a.get = broken  # type: ignore[method-assign]
    assert a.lead()  # nobody took it meanwhile: renewed, same epoch
    assert a.epoch == 1
    said = [r.getMessage() for r in caplog.records if "lease:" in r.getMessage()]
    assert said[1:] == [
        "lease: cannot renew it: database unreachable; tried again until it answers",
        "lease: the store answers again after 6.0 s",
    ]


def test_a_holder_gone_from_this_host_is_replaced_without_waiting() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = f"{socket.gethostname()}/{done.stdout.strip()}/12345"
    shared, clock = MemoryStore(), Clock()
    first = Leadership(shared, 10.0, clock, holder=dead)
    assert first.lead()
    other = MemoryStore()
    other._tables, other._logs, other._lock = shared._tables, shared._logs, shared._lock
    second = Leadership(other, 10.0, clock, holder="me/1/1")
    assert second.lead()  # long before the lease would run out
    assert second.epoch == 2
    held = current(other)
    assert held is not None
    assert held.holder == "me/1/1"


GONE = [
    # id, holder, gone
    pytest.param(lambda: holder_id(), False, id="this-process"),
    pytest.param(lambda: f"{socket.gethostname()}/{os.getpid()}/1", True, id="pid-reused"),
    pytest.param(lambda: f"elsewhere/{os.getpid()}/1", False, id="another-host"),
    pytest.param(lambda: "garbage", False, id="unreadable"),
]


@pytest.mark.parametrize(("holder", "gone"), GONE)
def test_which_holders_are_known_gone(holder: object, gone: bool) -> None:
    assert start_ticks(os.getpid()) != 1
    assert gone_here(holder()) is gone  # type: ignore[operator]


def test_the_keeper_renews_during_a_long_cycle_and_wakes_the_loop_when_deposed() -> None:
    _, _, clock, a, b = pair(ttl_s=0.2)
    assert a.lead()
    stop, wake = threading.Event(), threading.Event()
    keeper = threading.Thread(target=a.keep, args=(stop, wake))
    keeper.start()
    assert wake.wait(0.3) is False  # renewed meanwhile (a quarter of its time to live)
    # b takes the lease while a's keeper sleeps (as if a were known dead)
    assert acquire(b.store, b.holder, clock.now, 10.0, replacing=a.holder) is not None
    assert wake.wait(30)  # the keeper found it deposed
    stop.set()
    keeper.join(30)
    assert a.deposed
