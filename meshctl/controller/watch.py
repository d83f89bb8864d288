"""Between cycles: wake the loop as soon as a pool says something changed.

The loop cycles every interval, and at once when woken (``Controller.run``): ``meshctl
submit`` and ``cancel`` wake it with SIGUSR1, and this watch wakes it when Ray reports what
the last cycle did not see. Ray's Jobs API pushes nothing, so the watch asks, cheaply and
often, only what could have changed:

- every ``period_s`` (0.1 s), the status of each submission in flux: dispatched and not yet
  seen running (one small request each); every ``flux_s`` (0.02 s) while at most
  ``FEW_IN_FLUX`` are (a submission's start is the wait between ``meshctl submit`` and its job
  running: a 0.1 s period added 50 ms to it on average; a burst of many is asked at the
  slower pace, so that the dashboard is not asked hundreds of times a second);
- every ``period_s`` too, whether a running train job whose storage is a folder of this
  machine has asked for replacement nodes (``meshctl.workload.train.nominations``: a directory
  listing). Its run asks as soon as Ray Train sees a node it pinned dead, and waits for the
  nomination before its workers start again; the cycle the ask wakes nominates, where the
  next interval would have come up to ``interval_s`` later. Each ask wakes the loop once.
  Remote storage (S3, GCS) is not listed this often: the cycle's own observation finds the
  dead node. The first running train job the watch sees makes it import pyarrow
  (``storage.prepare``), so that the controller's first nomination does not wait for it;
- every ``full_s`` (0.5 s), each pool's observation (as a cycle makes it): its job statuses
  and which of its nodes are alive; not within ``full_s`` of a cycle's own (a cycle every
  0.5 s observes the pools already: the dashboard is not asked everything twice).

Anything that differs from the last cycle's observation wakes the loop, once per cycle (a
difference the cycle does not settle does not wake it again until the next one). A failing
request wakes nothing: the cycle sees the pool as it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from meshctl.controller.deciding.step import Dispatch
from meshctl.controller.deciding.world import World
from meshctl.state.records import AttemptState
from meshctl.workload.storage import prepare
from meshctl.workload.train.nominations import asked_here

log = logging.getLogger("meshctl.controller")

PERIOD_S = 0.1
FLUX_S = 0.02
FEW_IN_FLUX = 4
FULL_S = 0.5
IN_FLUX = frozenset({AttemptState.SUBMITTING, AttemptState.PENDING})


def in_flux(world: World, dispatched: Iterable[Dispatch]) -> dict[str, tuple[str, str | None]]:
    """Submissions in flux after a cycle, by id: (pool, the status Ray last gave it), of the
    attempts not yet seen running and of those the cycle just submitted (Ray's first word
    on those is PENDING)."""
    found: dict[str, tuple[str, str | None]] = {}
    for view in world.jobs:
        attempt = view.attempt
        if attempt is not None and attempt.state in IN_FLUX:
            seen = world.pools.get(attempt.pool)
            job = seen.jobs.get(attempt.submission_id) if seen is not None else None
            found[attempt.submission_id] = (attempt.pool, _status(job))
    for dispatch in dispatched:
        found[dispatch.submission.submission_id] = (dispatch.attempt.pool, "PENDING")
    return found


class Watch:
    """``seen``: the last cycle's world (None before the first) and its submissions in flux
    (``in_flux``); ``clients``: the pools' clients as of now; ``wake``: the loop's event."""

    def __init__(
        self,
        seen: Callable[[], tuple[World, Mapping[str, tuple[str, str | None]]] | None],
        clients: Callable[[], Mapping[str, Any]],
        wake: threading.Event,
        *,
        period_s: float = PERIOD_S,
        flux_s: float = FLUX_S,
        full_s: float = FULL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seen, self.clients, self.wake = seen, clients, wake
        self.period_s, self.flux_s, self.full_s, self.clock = period_s, flux_s, full_s, clock
        self._woken_for: World | None = None  # the world a wake was already asked over
        self._latest: World | None = None  # the newest cycle's world this watch has seen
        self._next_full = 0.0
        self._asks: set[tuple[str, int, int]] = set()  # (job, attempt, n): each wakes once
        self._prepared = False  # pyarrow imported for the nominations (``storage.prepare``)

    def run(self, stop: threading.Event) -> None:
        """Check every ``pause()`` until ``stop`` is set."""
        while not stop.wait(self.pause()):
            self.check()

    def pause(self) -> float:
        """``flux_s`` while the last cycle left a few submissions waiting to start (and
        nothing woke the loop over it yet), else ``period_s``."""
        found = self.seen()
        if found is None or found[0] is self._woken_for:
            return self.period_s
        waiting = sum(1 for _, was in found[1].values() if was in (None, "PENDING"))
        return self.flux_s if 0 < waiting <= FEW_IN_FLUX else self.period_s

    def check(self) -> str | None:
        """Wake the loop if a pool changed since the last cycle; what changed, or None."""
        found = self.seen()
        if found is None or found[0] is self._woken_for:
            return None
        world, flux = found
        if world is not self._latest:  # a cycle has just observed the pools itself
            self._latest = world
            self._next_full = max(self._next_full, self.clock() + self.full_s)
        full = self.clock() >= self._next_full
        if full:
            self._next_full = self.clock() + self.full_s
        try:
            changed = (
                self._in_flux(flux)
                or self._asked(world)
                or (self._pools(world, flux) if full else None)
            )
        except Exception as err:  # the cycle will see it; nothing to wake for
            log.debug("watch: %s", err)
            return None
        if changed is not None:
            self._woken_for = world
            self.wake.set()
        return changed

    def _in_flux(self, flux: Mapping[str, tuple[str, str | None]]) -> str | None:
        clients = self.clients()
        for sid, (pool, was) in flux.items():
            client = clients.get(pool)
            if client is None or not hasattr(client, "job"):
                continue
            now = _status(client.job(sid))
            if now != was:
                return f"{sid}: {was} -> {now}"
        return None

    def _asked(self, world: World) -> str | None:
        """A running attempt's ask for replacements not seen before, read from its local
        storage; every new one is taken as seen. Only an attempt whose nodes can be replaced
        inside it asks (``AttemptDetail.replaceable``)."""
        said = None
        for view in world.jobs:
            attempt = view.attempt
            if attempt is None or attempt.state != AttemptState.RUNNING:
                continue
            uri = attempt.detail.checkpoint_uri
            if uri is None or not attempt.detail.replaceable:
                continue
            if not self._prepared:
                prepare()
                self._prepared = True
            for n in asked_here(uri, attempt.number) or ():
                key = (attempt.job_id, attempt.number, n)
                if key not in self._asks:
                    self._asks.add(key)
                    said = said or f"{attempt.job_id}: attempt {attempt.number} asks for nodes"
        return said

    def _pools(self, world: World, flux: Mapping[str, object]) -> str | None:
        for name, client in self.clients().items():
            seen = world.pools.get(name)
            if seen is None or not seen.reachable:
                continue
            now = client.observe()
            if not now.reachable:
                continue
            if _statuses(now.jobs, flux) != _statuses(seen.jobs, flux):
                return f"{name}: job states changed"
            if _alive(now.nodes) != _alive(seen.nodes):
                return f"{name}: nodes changed"
        return None


def _status(job: Any) -> str | None:
    return None if job is None else str(job.status)


def _statuses(jobs: Mapping[str, Any], flux: Mapping[str, object]) -> dict[str, str]:
    """Each job's status, but those in flux: the other check follows them."""
    return {k: str(j.status) for k, j in jobs.items() if k not in flux}


def _alive(nodes: Any) -> frozenset[tuple[str, bool]]:
    return frozenset((n.ray_node_id, n.alive) for n in nodes)
