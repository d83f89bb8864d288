"""Which of the controllers sharing a store acts: the one holding the lease (``state.lease``).

Every ``meshctl controller run`` leads through the lease. The others stand by: they poll the
lease every interval and take it when it expires (``LEASE_TTL_S`` after its holder last
renewed it), or at once when its holder ran on this host and its process is gone (a
controller killed and started again takes over without waiting). The leader renews the lease
before each cycle and from a thread of its own (every quarter of its time to live), so a long
cycle does not lose it.

A store is fenced from the start: a controller writes nothing before it leads, and once it
leads, nothing after another took the lease (``FencedError``). A controller that lost the lease
is deposed for good: it stops, and whatever supervises it starts it again as a standby.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from meshctl.host.procs import start_ticks, zombie
from meshctl.state import Store, StoreError
from meshctl.state.lease import CONTROLLER, acquire, current, release

log = logging.getLogger("meshctl.controller")
LEASE_TTL_S = 10.0


def host() -> str:
    """The host a controller leads as: ``MESHCTL_LEASE_HOST``, else the machine's name. Set it
    where two controllers share a host name but not a process table (containers on the host's
    network): each must see the other as another host's, whose lease it waits out."""
    return os.environ.get("MESHCTL_LEASE_HOST") or socket.gethostname()


def holder_id() -> str:
    """This process as a lease holder: its host, pid and start time (a pid reused by another
    process is not mistaken for it)."""
    pid = os.getpid()
    return f"{host()}/{pid}/{start_ticks(pid) or 0}"


def gone_here(holder: str) -> bool:
    """Whether ``holder`` ran on this host and its process is gone."""
    where, _, rest = holder.partition("/")
    pid, _, ticks = rest.partition("/")
    if where != host() or not pid.isdigit() or not ticks.isdigit():
        return False
    return start_ticks(int(pid)) != int(ticks) or zombie(int(pid))  # killed, not yet reaped


class Deposed(StoreError):
    """This controller led, and another took the lease: it must stop."""


class Leadership:
    """This controller's hold on the lease."""

    def __init__(
        self,
        store: Store,
        ttl_s: float = LEASE_TTL_S,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
    ) -> None:
        self.store, self.ttl_s, self._clock = store, ttl_s, clock
        self.holder = holder or holder_id()
        self.epoch: int | None = None
        self.deposed = False
        self._expires_at_s = float("-inf")
        self._unrenewed_since: float | None = None  # the store out of reach: said once
        self._lock = threading.Lock()
        store.fence(CONTROLLER, 0)  # no lease has epoch 0: nothing is written before leading

    @property
    def leading(self) -> bool:
        return self.epoch is not None and not self.deposed

    def lead(self) -> bool:
        """Renew or take the lease; whether this controller leads now."""
        with self._lock:
            if self.deposed:
                return False
            now = self._clock()
            try:
                held = current(self.store)
                replacing = None
                if held is not None and held.holder != self.holder and gone_here(held.holder):
                    replacing = held.holder
                lease = acquire(self.store, self.holder, now, self.ttl_s, replacing=replacing)
            except StoreError as err:  # the store is out of reach: lead while the lease lasts
                if self._unrenewed_since is None:
                    self._unrenewed_since = now
                    log.warning("lease: cannot renew it: %s; tried again until it answers", err)
                return self.epoch is not None and now < self._expires_at_s
            if self._unrenewed_since is not None:
                log.info("lease: the store answers again after %.1f s", now - self._unrenewed_since)
                self._unrenewed_since = None
            if lease is None:
                if self.epoch is not None:
                    self.deposed = True
                    log.error("lease: deposed (epoch %d): another controller leads", self.epoch)
                return False
            if lease.epoch != self.epoch:
                if self.epoch is not None:  # lost and taken again meanwhile: act as deposed
                    self.deposed = True
                    return False
                self.store.fence(CONTROLLER, lease.epoch)
                self.epoch = lease.epoch
                log.info("lease: leading as %s (epoch %d)", self.holder, lease.epoch)
            self._expires_at_s = lease.expires_at_s
            return True

    def keep(self, stop: threading.Event, wake: threading.Event) -> None:
        """Renew the lease every quarter of its time to live while leading, until ``stop``;
        deposed, wake the loop so that it stops."""
        while not stop.wait(self.ttl_s / 4):
            if self.epoch is not None and not self.lead():
                wake.set()
                return

    def release(self) -> None:
        """Give the lease up (stopping cleanly): a standby takes it at once."""
        with self._lock:
            if self.leading:
                try:
                    release(self.store, self.holder, self._clock())
                except StoreError as err:
                    log.warning("lease: cannot release it: %s", err)
