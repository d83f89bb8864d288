"""How long a job submitted now would wait in each pool: a forecast from the work ahead of it
and the running jobs' expected ends, per pool and per priority (what burst rules read as
``mesh.pools.<name>.expected_wait_s``).

For an on-prem pool with ``total`` GPUs of which ``free`` take work now, and a job of
priority ``p``: the work ahead of it is every queued job of priority ``p`` or higher (``A``
GPUs, itself included; the queue goes by priority, then age), and it starts once the pool has
had ``need = max(A, 1)`` GPUs for them. GPUs come free as running jobs end:

    wait = 0                                   if free >= need
    wait = the first end by which free + (GPUs released by then) >= need

A running job ends at its expected end: its start plus its runtime, declared or estimated
(one already past it ends now). One whose runtime nobody declared or estimated is assumed to
run ``unknown_runtime_s`` more (the policies' ``forecast.unknown_runtime_s``, 2 h unless they
say otherwise), or as long again as it has run when that is longer: the heavy-tailed
lifetimes of jobs and processes make "as long again" the first-order guess for one that has
run for hours (Harchol-Balter and Downey, "Exploiting process lifetime distributions for
dynamic load balancing", ACM TOCS 1997), and the floor keeps a job that just started from
promising its GPUs back in seconds. When all the running jobs' ends together are not enough,
the rest of the work ahead runs in waves of the whole pool, each as long as the mean runtime of
the queued jobs ahead (their estimates), or when none is known the mean time the running jobs
have left (``unknown_runtime_s`` at least, for one with no runtime known); with neither, or a
pool with no node up, the wait is unbounded (``UNBOUNDED_WAIT_S``). A cloud pool's wait is 0:
its capacity is launched for the work (the provider's delay is its own).

A first-order forecast: every queued job counts against every on-prem pool, and
fragmentation, gangs and topology are ignored. What it fixes is what the age of the oldest
queued job got wrong: one stuck gang no longer opens the burst gate for every job, and a
high-priority job sees only the work ahead of it.

``Backlog`` is kept incrementally (the simulator updates it as jobs start and end) or built
afresh (the controller, each cycle): the same answers either way.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from meshctl.model.policy import UNKNOWN_RUNTIME_S

if TYPE_CHECKING:
    from meshctl.policy.compiled import PolicySet

UNBOUNDED_WAIT_S = 30 * 86_400.0  # "no end in sight": longer than any burst rule waits
_GPUS = operator.itemgetter(2)


@dataclass(frozen=True, slots=True)
class Waits:
    """Forecast waits in seconds, per pool: for each priority that has queued jobs, and with
    nothing queued ahead (a pool not listed: 0); with what the forecast had to assume: per
    on-prem pool, how many running jobs have no runtime declared or estimated, each taken to
    run at least ``unknown_runtime_s`` more."""

    by_priority: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    nothing_ahead: Mapping[str, float] = field(default_factory=dict)
    assumed: Mapping[str, int] = field(default_factory=dict)
    unknown_runtime_s: float = UNKNOWN_RUNTIME_S

    def of(self, priority: int) -> Mapping[str, float]:
        """The waits a job of ``priority`` sees: the work ahead of it is the queued work of
        its priority or higher, i.e. that of the lowest queued priority at or above it."""
        levels = [p for p in self.by_priority if p >= priority]
        return self.by_priority[min(levels)] if levels else self.nothing_ahead

    def lowest(self) -> Mapping[str, float]:
        """The waits at the back of the whole queue: each pool's backlog."""
        return self.by_priority[min(self.by_priority)] if self.by_priority else self.nothing_ahead


class _Running:
    """One pool's running work: known ends sorted; the starts of work with no known end,
    sorted too (it ends ``max(unknown_s, now - start)`` from now: at least ``unknown_s``
    more, or as long again as it has run)."""

    __slots__ = ("_cum", "ends", "starts", "unknown_s")

    def __init__(self, unknown_s: float = UNKNOWN_RUNTIME_S) -> None:
        self.unknown_s = unknown_s
        self.ends: list[tuple[float, str, float]] = []  # (end, job, gpus), sorted
        self.starts: list[tuple[float, str, float]] = []  # (start, job, gpus), sorted
        self._cum: list[float] | None = None

    def add(self, end_s: float | None, started_s: float, job_id: str, gpus: float) -> None:
        if end_s is None:
            bisect.insort(self.starts, (started_s, job_id, gpus))
        else:
            bisect.insort(self.ends, (end_s, job_id, gpus))
            self._cum = None

    def remove(self, end_s: float | None, started_s: float, job_id: str, gpus: float) -> None:
        entries, key = (self.starts, started_s) if end_s is None else (self.ends, end_s)
        i = bisect.bisect_left(entries, (key, job_id, gpus))
        if i < len(entries) and entries[i][1] == job_id:
            del entries[i]
            if end_s is not None:
                self._cum = None

    def cumulative(self) -> list[float]:
        if self._cum is None:
            self._cum = list(itertools.accumulate(map(_GPUS, self.ends)))
        return self._cum

    def releases(self, now_s: float) -> Iterator[tuple[float, float]]:
        """(moment, GPUs freed then) in time order: known ends, and unknown ones at least
        ``unknown_s`` from now or as long again as they have run (the latest start ends
        first)."""
        known = ((e, g) for e, _, g in self.ends)
        soonest = now_s + self.unknown_s
        unknown = ((max(soonest, 2 * now_s - s), g) for s, _, g in reversed(self.starts))
        return heapq.merge(known, unknown)

    def left_s(self, now_s: float) -> float | None:
        """The mean time the running jobs have left (None: none runs)."""
        known = [max(0.0, e - now_s) for e, _, _ in self.ends]
        unknown = [max(self.unknown_s, now_s - s) for s, _, _ in self.starts]
        every = known + unknown
        return sum(every) / len(every) if every else None


class Backlog:
    """The work that holds each pool's GPUs and the work queued for them; a job whose runtime
    nobody declared or estimated counts as ``unknown_runtime_s`` (the policies' rule)."""

    def __init__(self, unknown_runtime_s: float = UNKNOWN_RUNTIME_S) -> None:
        self.unknown_s = unknown_runtime_s
        self._pools: dict[str, _Running] = defaultdict(lambda: _Running(unknown_runtime_s))
        self._running: dict[str, tuple[str, float | None, float, float]] = {}
        self._queued: dict[str, tuple[int, float, float | None]] = {}
        # per priority: [GPUs, the known runtimes' sum of seconds, how many known, jobs]
        self._levels: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])

    @classmethod
    def of(cls, policies: PolicySet | None) -> Backlog:
        """An empty backlog that counts a job with no runtime known by ``policies``' rule
        (``forecast.unknown_runtime_s``; the default without policies)."""
        return cls(policies.unknown_runtime_s if policies is not None else UNKNOWN_RUNTIME_S)

    # --- keeping it -----------------------------------------------------------------------

    def run(
        self, job_id: str, pool: str, end_s: float | None, gpus: float, started_s: float = 0.0
    ) -> None:
        """A job holds ``gpus`` of ``pool`` until ``end_s`` (None: unknown; it started at
        ``started_s``)."""
        self.stop(job_id)
        self._running[job_id] = (pool, end_s, gpus, started_s)
        self._pools[pool].add(end_s, started_s, job_id, gpus)

    def stop(self, job_id: str) -> None:
        found = self._running.pop(job_id, None)
        if found is not None:
            pool, end_s, gpus, started_s = found
            self._pools[pool].remove(end_s, started_s, job_id, gpus)

    def queue(self, job_id: str, priority: int, gpus: float, runtime_s: float | None) -> None:
        self.dequeue(job_id)
        self._queued[job_id] = (priority, gpus, runtime_s)
        level = self._levels[priority]
        level[0] += gpus
        level[3] += 1
        if runtime_s is not None:
            level[1] += runtime_s
            level[2] += 1

    def dequeue(self, job_id: str) -> None:
        found = self._queued.pop(job_id, None)
        if found is None:
            return
        priority, gpus, runtime_s = found
        level = self._levels[priority]
        level[0] -= gpus
        level[3] -= 1
        if runtime_s is not None:
            level[1] -= runtime_s
            level[2] -= 1
        if level[3] <= 0:
            del self._levels[priority]  # sums of floats: start again from exact zeros

    # --- the forecast ---------------------------------------------------------------------

    def waits(
        self, capacity: Mapping[str, tuple[float, float]], cloud: Iterable[str], now_s: float
    ) -> Waits:
        """The wait in each pool of ``capacity`` (per pool: GPUs in all, GPUs free to take work
        now; a pool with no node up is (0, 0), an unbounded wait), for each queued priority
        and with nothing ahead; ``cloud``: the pools whose capacity is launched on demand."""
        clouds = set(cloud)
        ahead, known_s, known_n = 0.0, 0.0, 0.0

        def each_pool() -> dict[str, float]:
            mean_runtime = known_s / known_n if known_n else None
            return {
                pool: 0.0
                if pool in clouds
                else self._wait(pool, total, free, max(ahead, 1.0), mean_runtime, now_s)
                for pool, (total, free) in capacity.items()
            }

        nothing_ahead = each_pool()
        out: dict[int, dict[str, float]] = {}
        for priority in sorted(self._levels, reverse=True):
            gpus, seconds, count, _ = self._levels[priority]
            ahead, known_s, known_n = ahead + gpus, known_s + seconds, known_n + count
            out[priority] = each_pool()
        assumed = {
            pool: len(self._pools[pool].starts)
            for pool in capacity
            if pool not in clouds and pool in self._pools and self._pools[pool].starts
        }
        return Waits(out, nothing_ahead, assumed, self.unknown_s)

    def _wait(
        self,
        pool: str,
        total: float,
        free: float,
        need: float,
        mean_runtime_s: float | None,
        now_s: float,
    ) -> float:
        if free + 1e-9 >= need:
            return 0.0
        if total <= 0:
            return UNBOUNDED_WAIT_S  # no node up: nothing says when there will be
        running = self._pools.get(pool) or _Running(self.unknown_s)
        want, freed, last = need - free - 1e-9, 0.0, now_s
        if not running.starts:  # only known ends: a bisect on their running sum
            cumulative = running.cumulative()
            i = bisect.bisect_left(cumulative, want)
            if i < len(cumulative):
                return min(UNBOUNDED_WAIT_S, max(0.0, running.ends[i][0] - now_s))
            if cumulative:
                freed, last = cumulative[-1], max(now_s, running.ends[-1][0])
        else:
            for moment, gpus in running.releases(now_s):
                freed, last = freed + gpus, max(last, moment)
                if freed >= want:
                    return min(UNBOUNDED_WAIT_S, max(0.0, moment - now_s))
        wave_s = mean_runtime_s if mean_runtime_s is not None else running.left_s(now_s)
        if wave_s is None:
            return UNBOUNDED_WAIT_S
        waves = math.ceil((want - freed) / total - 1e-9)
        return min(UNBOUNDED_WAIT_S, last - now_s + waves * wave_s)
