"""How long a job submitted now would wait in each pool: a forecast from the work ahead of it
and the running jobs' expected ends, per pool and per priority (what burst rules read as
``mesh.pools.<name>.expected_wait_s``).

For an on-prem pool with ``total`` GPUs of which ``free`` take work now, and a job of
priority ``p``: the work ahead of it is every queued job of priority ``p`` or higher (``A``
GPUs, itself included; the queue goes by priority, then age), and it starts once the pool has
had ``need = max(A, 1)`` GPUs for them. GPUs come free as running jobs end, each at its
expected end (its start plus its declared or estimated runtime; one already past it ends
"now"):

    wait = 0                                   if free >= need
    wait = the first end by which free + (GPUs released by then) >= need

When every known end together is not enough, the rest of the work ahead runs in waves of the
whole pool, each as long as the mean runtime of the queued jobs ahead (their estimates); a
running job with no runtime estimate, or work ahead none of whose runtime is known, makes
the wait unbounded (``UNBOUNDED_WAIT_S``: nothing says when the GPUs come free). A cloud
pool's wait is 0: its capacity is launched for the work (the provider's delay is its own).

A first-order forecast: every queued job counts against every on-prem pool, and
fragmentation, gangs and topology are ignored. What it fixes is what the age of the oldest
queued job got wrong: one stuck gang no longer opens the burst gate for every job, and a
high-priority job sees only the work ahead of it.

``Backlog`` is kept incrementally (the simulator updates it as jobs start and end) or built
afresh (the controller, each cycle): the same answers either way.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

UNBOUNDED_WAIT_S = 30 * 86_400.0
_GPUS = operator.itemgetter(2)  # "no end in sight": longer than any burst rule waits


@dataclass(frozen=True, slots=True)
class Waits:
    """Forecast waits in seconds, per pool: for each priority that has queued jobs, and with
    nothing queued ahead (a pool not listed: 0)."""

    by_priority: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    nothing_ahead: Mapping[str, float] = field(default_factory=dict)

    def of(self, priority: int) -> Mapping[str, float]:
        """The waits a job of ``priority`` sees: the work ahead of it is the queued work of
        its priority or higher, i.e. that of the lowest queued priority at or above it."""
        levels = [p for p in self.by_priority if p >= priority]
        return self.by_priority[min(levels)] if levels else self.nothing_ahead

    def lowest(self) -> Mapping[str, float]:
        """The waits at the back of the whole queue: each pool's backlog."""
        return self.by_priority[min(self.by_priority)] if self.by_priority else self.nothing_ahead


class _Ends:
    """One pool's running work: known ends sorted, and the GPUs of work with no known end."""

    __slots__ = ("_cum", "endless", "ends")

    def __init__(self) -> None:
        self.ends: list[tuple[float, str, float]] = []  # (end, job, gpus), sorted
        self.endless = 0.0
        self._cum: list[float] | None = None

    def add(self, end_s: float | None, job_id: str, gpus: float) -> None:
        if end_s is None:
            self.endless += gpus
        else:
            bisect.insort(self.ends, (end_s, job_id, gpus))
            self._cum = None

    def remove(self, end_s: float | None, job_id: str, gpus: float) -> None:
        if end_s is None:
            self.endless -= gpus
            return
        i = bisect.bisect_left(self.ends, (end_s, job_id, gpus))
        if i < len(self.ends) and self.ends[i][1] == job_id:
            del self.ends[i]
            self._cum = None

    def cumulative(self) -> list[float]:
        if self._cum is None:
            self._cum = list(itertools.accumulate(map(_GPUS, self.ends)))
        return self._cum


class Backlog:
    """The work that holds each pool's GPUs and the work queued for them."""

    def __init__(self) -> None:
        self._pools: dict[str, _Ends] = defaultdict(_Ends)
        self._running: dict[str, tuple[str, float | None, float]] = {}
        self._queued: dict[str, tuple[int, float, float | None]] = {}
        # per priority: [GPUs, the known runtimes' sum of seconds, how many known, jobs]
        self._levels: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])

    # --- keeping it -----------------------------------------------------------------------

    def run(self, job_id: str, pool: str, end_s: float | None, gpus: float) -> None:
        """A job holds ``gpus`` of ``pool`` until ``end_s`` (None: unknown)."""
        self.stop(job_id)
        self._running[job_id] = (pool, end_s, gpus)
        self._pools[pool].add(end_s, job_id, gpus)

    def stop(self, job_id: str) -> None:
        found = self._running.pop(job_id, None)
        if found is not None:
            pool, end_s, gpus = found
            self._pools[pool].remove(end_s, job_id, gpus)

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
        now; a pool with no nodes up is (0, 0), an unbounded wait), for each queued priority
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
        return Waits(out, nothing_ahead)

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
        ends = self._pools.get(pool) or _Ends()
        cumulative = ends.cumulative()
        i = bisect.bisect_left(cumulative, need - free - 1e-9)
        if i < len(cumulative):
            return min(UNBOUNDED_WAIT_S, max(0.0, ends.ends[i][0] - now_s))
        if ends.endless > 1e-9 or mean_runtime_s is None:
            return UNBOUNDED_WAIT_S
        rest = need - free - (cumulative[-1] if cumulative else 0.0)
        last = max(now_s, ends.ends[-1][0]) if ends.ends else now_s
        waves = math.ceil(rest / total - 1e-9)
        return min(UNBOUNDED_WAIT_S, last - now_s + waves * mean_runtime_s)
