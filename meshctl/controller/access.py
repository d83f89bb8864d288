"""Which cloud pools can be used now, and why not: their providers' credentials, checked.

A cloud pool is unavailable when its provider cannot be built (a missing profile or key file,
no SDK: ``clouds.base.Unavailable``), when ``Cloud.check`` is refused, or when a launch came
back with an auth error (at once: the next cycle plans elsewhere instead of waiting out a
backoff). An unavailable pool is checked again after ``RECHECK_S``, or at once when its
credentials may have changed (a check that passes within ``RECHECK_S`` of a refused launch,
with the same credentials, does not make the pool available again: credentials may be good
for reading and not for launching) (``credentials(pool)``: the pool's entry in mesh.yaml, the files
and variables its SDK reads them from); an available one every ``CHECK_S``. A pool never
checked yet counts as available: its first launch tells.

In the daemon the checks run on a worker thread (``background``), one at a time, and a cycle
only collects what finished: a provider that does not answer never holds up a cycle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from meshctl.clouds.base import Cloud
from meshctl.controller.runtime import provider_for, refusal
from meshctl.model.mesh import AwsPool, GcpPool, Mesh, Pool
from meshctl.state.records import Event

log = logging.getLogger("meshctl.controller")
RECHECK_S = 180.0  # an unavailable cloud pool is asked again after this
CHECK_S = 900.0  # an available one, so revoked credentials show before a launch needs them


@dataclass(frozen=True, slots=True)
class Change:
    """A pool became unavailable (``reason``) or available again (``reason`` None)."""

    pool: str
    reason: str | None


def change_events(changes: Sequence[Change | None], now: float) -> list[Event]:
    """What each change says: ``pool.available`` again, or ``pool.unavailable`` and why."""
    return [
        Event(now, "pool.available", None, f"{c.pool}: available again")
        if c.reason is None
        else Event(now, "pool.unavailable", None, f"{c.pool}: {c.reason}")
        for c in changes
        if c is not None
    ]


@dataclass(frozen=True, slots=True)
class _Probe:
    pool: str
    credentials: Hashable
    cloud: Cloud | None  # a provider built afresh, if it was
    reason: str | None


def _same_credentials(pool: Pool) -> Hashable:
    return pool.model_dump_json()


@dataclass
class CloudAccess:
    mesh: Mesh
    clouds: dict[str, Cloud]  # shared with the burst side: a rebuilt provider replaces one
    build: Callable[[Pool], Cloud | None] | None = None  # None: the clouds given are all
    credentials: Callable[[Pool], Hashable] = _same_credentials
    background: bool = False
    _down: dict[str, str] = field(default_factory=dict)  # pool -> why
    _due: dict[str, float] = field(default_factory=dict)  # pool -> when to check it next
    _seen: dict[str, Hashable] = field(default_factory=dict)  # pool -> credentials checked
    _refused: dict[str, tuple[float, Hashable]] = field(default_factory=dict)  # launch refused
    _running: dict[str, Future[_Probe]] = field(default_factory=dict)
    _worker: ThreadPoolExecutor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def unavailable(self) -> dict[str, str]:
        """Cloud pools that cannot be used now, and why."""
        with self._lock:
            return dict(self._down)

    def refused(self, pool: str, reason: str, now: float) -> Change | None:
        """A launch came back with an auth error: the pool is unavailable from now on."""
        found = self.mesh.pool(pool)
        with self._lock:
            before = self._down.get(pool)
            self._down[pool] = reason
            self._due[pool] = now + RECHECK_S
            if found is not None:
                self._refused[pool] = (now, self.credentials(found))
        return None if before == reason else Change(pool, reason)

    def refresh(self, now: float) -> list[Change]:
        """Start the checks that are due, apply those that finished; what changed."""
        changes = self._collect(now)
        for pool in self.mesh.spec.pools:
            if not isinstance(pool, AwsPool | GcpPool) or pool.name in self._running:
                continue
            seen = self.credentials(pool)
            fresh = self._seen.get(pool.name) != seen
            if not fresh and now < self._due.get(pool.name, 0.0):
                continue
            rebuild = (fresh and pool.name in self._seen) or pool.name not in self.clouds
            if self.background:
                if self._worker is None:
                    self._worker = ThreadPoolExecutor(1, thread_name_prefix="meshctl-check")
                self._running[pool.name] = self._worker.submit(self._probe, pool, seen, rebuild)
            else:
                changes += self._apply(self._probe(pool, seen, rebuild), now)
        return changes

    def use(self, mesh: Mesh) -> None:
        """The mesh changed (a reload): pools whose entry changed are checked afresh."""
        self.mesh = mesh
        names = {p.name for p in mesh.spec.pools}
        with self._lock:
            for gone in [p for p in self._down if p not in names]:
                del self._down[gone]

    def settle(self, timeout_s: float) -> None:
        """Wait for the checks in flight to finish (their results are applied next refresh)."""
        for future in list(self._running.values()):
            future.exception(timeout_s)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None

    # --- inside -------------------------------------------------------------------------------

    def _collect(self, now: float) -> list[Change]:
        changes: list[Change] = []
        for name, future in list(self._running.items()):
            if future.done():
                del self._running[name]
                try:
                    changes += self._apply(future.result(), now)
                except Exception as err:  # a probe is not meant to raise; never fatal
                    log.warning("pool %s: check failed: %s", name, err)
        return changes

    def _probe(self, pool: Pool, credentials: Hashable, rebuild: bool) -> _Probe:
        cloud = self.clouds.get(pool.name)
        built: Cloud | None = None
        if rebuild and self.build is not None:
            built, why = provider_for(pool, self.build)
            if why is not None:
                return _Probe(pool.name, credentials, None, why)
            cloud = built
        if cloud is None:
            return _Probe(pool.name, credentials, None, "no provider adapter for this pool")
        return _Probe(pool.name, credentials, built, refusal(cloud))

    def _apply(self, probe: _Probe, now: float) -> list[Change]:
        if probe.cloud is not None:
            self.clouds[probe.pool] = probe.cloud
        self._seen[probe.pool] = probe.credentials
        with self._lock:
            before = self._down.get(probe.pool)
            at, credentials = self._refused.get(probe.pool, (float("-inf"), None))
            if probe.reason is None and credentials == probe.credentials and now < at + RECHECK_S:
                return []  # the launch was refused with these credentials: not undone by a read
            if probe.reason is None:
                self._down.pop(probe.pool, None)
                self._refused.pop(probe.pool, None)
                self._due[probe.pool] = now + CHECK_S
            else:
                self._down[probe.pool] = probe.reason
                self._due[probe.pool] = now + RECHECK_S
        if before == probe.reason:
            return []
        return [Change(probe.pool, probe.reason)]
