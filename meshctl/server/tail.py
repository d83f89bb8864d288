"""Counters and a histogram read from the event log, tailed: each event is counted once.

The log is append-only and numbered (``seq``), so a scrape reads only the events after the
last one it saw, a page at a time; the first scrape pages through the whole history once.
What is kept in memory is the counts (bounded by the label sets) and, for each job waiting
now, when it began to wait (bounded by the queue).

Events read (``meshctl.controller``: a job's transition is ``job.<state>`` with ``from``,
``to`` and ``pool`` in its data and the reason as its message):

- ``job.pending`` (submitted) and ``job.requeued``: the job waits from then;
- ``job.admitted``: counted, with its wait (since it last began to wait) in the histogram;
- ``job.evicted``, ``job.preempted``: counted by reason (``reasons.py``); an eviction also
  adds the GPU-seconds its attempt had run (the work a failure puts at risk);
- ``job.succeeded``, ``job.failed``, ``job.cancelled``: the job waits no more.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from meshctl.server.reasons import EVICTED, PREEMPTED, classify
from meshctl.state import AttemptRecord, Event, JobRecord, Store

PAGE: Final = 1000  # events read per query
NO_POOL: Final = "none"  # the pool label of a job not placed on one
NO_CLASS: Final = "none"  # the class label of a job stored without a priority class
# Admission waits, seconds: from a scheduling cycle's second to a day.
WAIT_BUCKETS_S: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
                         7200.0, 21600.0, 86400.0)  # fmt: skip
WAITING: Final = ("job.pending", "job.requeued")
DONE: Final = ("job.succeeded", "job.failed", "job.cancelled")

Labels = tuple[str, ...]


def priority_class(record: JobRecord | None) -> str:
    """The job's priority class as stored at submit (the policy's default filled in)."""
    spec: Any = record.spec.get("spec") if record is not None else None
    found = spec.get("priority_class") if isinstance(spec, Mapping) else None
    return str(found) if found else NO_CLASS


@dataclass
class Histogram:
    """Cumulative-ready bucket counts, a sum and a count, as Prometheus exposes them."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def copy(self) -> Histogram:
        out = Histogram(self.bounds)
        out.counts, out.total = list(self.counts), self.total
        return out

    def buckets(self) -> list[tuple[str, float]]:
        """(upper bound, cumulative count) pairs, ending with +Inf."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


@dataclass
class Counts:
    """What the events seen so far add up to, by label set."""

    admitted: dict[Labels, float] = field(default_factory=lambda: defaultdict(float))
    waits: dict[Labels, Histogram] = field(default_factory=dict)
    evicted: dict[Labels, float] = field(default_factory=lambda: defaultdict(float))
    preempted: dict[Labels, float] = field(default_factory=lambda: defaultdict(float))
    lost_gpu_s: dict[Labels, float] = field(default_factory=lambda: defaultdict(float))

    def copy(self) -> Counts:
        waits = {k: h.copy() for k, h in self.waits.items()}
        return Counts(
            dict(self.admitted), waits, dict(self.evicted), dict(self.preempted),
            dict(self.lost_gpu_s),
        )  # fmt: skip


class EventTail:
    """Reads the events after the last one seen, each time ``read`` is called (thread-safe:
    scrapes may overlap, and each event is still counted once)."""

    def __init__(self, store: Store, page: int = PAGE) -> None:
        self.store, self.page = store, page
        self.seq = 0  # the last event counted
        self.counts = Counts()
        self._waiting: dict[str, float] = {}  # job id -> when it began to wait
        self._lock = threading.Lock()

    def read(self) -> Counts:
        """Count the new events; a copy of the counts so far."""
        with self._lock:
            while True:
                events = self.store.events(after_seq=self.seq, limit=self.page)
                self.count(events)
                if len(events) < self.page:
                    return self.counts.copy()

    def count(self, events: Iterable[Event]) -> None:
        for event in events:
            self.seq = max(self.seq, event.seq)
            job = event.job_id
            if job is None or not event.kind.startswith("job."):
                continue
            if event.kind in WAITING:
                self._waiting[job] = event.at_s
            elif event.kind == "job.admitted":
                self._admitted(job, event)
            elif event.kind == "job.evicted":
                self._evicted(job, event)
            elif event.kind == "job.preempted":
                reason = classify(event.message, PREEMPTED)
                self.counts.preempted[(pool_of(event), reason)] += 1
            elif event.kind in DONE:
                self._waiting.pop(job, None)

    def _admitted(self, job: str, event: Event) -> None:
        record = self.store.get(JobRecord, job)
        since = self._waiting.pop(job, None)
        if since is None:  # a job whose submit event this meshctl did not write
            since = record.submitted_at_s if record is not None else event.at_s
        labels = (priority_class(record), pool_of(event))
        self.counts.admitted[labels] += 1
        histogram = self.counts.waits.setdefault(labels, Histogram(WAIT_BUCKETS_S))
        histogram.observe(max(0.0, event.at_s - since))

    def _evicted(self, job: str, event: Event) -> None:
        labels = (pool_of(event), classify(event.message, EVICTED))
        self.counts.evicted[labels] += 1
        self.counts.lost_gpu_s[labels] += gpu_seconds_run(
            self.store.list(AttemptRecord, job_id=job), event.at_s
        )


def pool_of(event: Event) -> str:
    pool = event.data.get("pool")
    return str(pool) if pool else NO_POOL


def gpu_seconds_run(attempts: Iterable[AttemptRecord], at_s: float) -> float:
    """The GPU-seconds the attempt current at ``at_s`` had run by then: its GPUs held times the
    time since it started. The current attempt is the newest one not started after ``at_s``
    (one admitted but not started has run nothing). Read long after, a newer attempt not yet
    started hides the evicted one: it counts nothing then, never more than it ran."""
    before = [a for a in attempts if a.started_at_s is None or a.started_at_s <= at_s]
    if not before:
        return 0.0
    current = max(before, key=lambda a: a.number)
    if current.started_at_s is None:
        return 0.0
    gpus = sum(held.gpus() for held in current.detail.allocations)
    return gpus * max(0.0, at_s - current.started_at_s)
