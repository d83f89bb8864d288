"""Prometheus metrics over the state store, read on each scrape.

``registry(store)`` is what the API server serves at ``/metrics``
(``prometheus_client.make_asgi_app(registry(store))``). Gauges are read fresh per scrape
through the store's indexed queries (jobs by state, nodes, pools, live instances): what a
scrape costs follows the queue and the fleet, never the history. Counters and the admission
wait histogram come from the event log, tailed (``tail.py``). Names follow Kueue's where it
has one (``kueue_pending_workloads`` is ``meshctl_pending_workloads``), so its alerts port
over. Labels are bounded: priority class, pool, team, state, reason, resource; never a job or
a node. What only the controller knows (its cycle, budgets, quotas, the agents' verdicts) it
serves itself (``meshctl.controller.metrics``). ``docs/OPERATIONS.md`` lists every metric.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from meshctl.server.tail import NO_POOL, EventTail, Labels, priority_class
from meshctl.state import (
    INSTANCE_LIVE,
    InstanceRecord,
    JobRecord,
    JobState,
    NodeRecord,
    PoolRecord,
    Store,
)

PREFIX: Final = "meshctl"
QUEUED: Final = (JobState.PENDING, JobState.REQUEUED)
ACTIVE: Final = (JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING)


def registry(store: Store, clock: Callable[[], float] = time.time) -> CollectorRegistry:
    """A registry holding one ``StoreCollector`` over ``store`` (and nothing else: no process
    or platform metrics, so two servers over one store expose the same series)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(StoreCollector(store, clock))
    return found


class StoreCollector(Collector):
    """The store's metrics, collected on each scrape. ``store`` may be shared with other
    threads (the server's); ``clock`` gives the ages of waiting jobs."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self.tail = EventTail(store)

    def collect(self) -> Iterator[Metric]:
        yield from self._queue()
        yield from self._tailed()
        yield from self._fleet()

    def _queue(self) -> Iterator[Metric]:
        """Jobs waiting (by class and the pool a requeued one last ran on) and admitted."""
        now = self.clock()
        pending: dict[Labels, float] = defaultdict(float)
        oldest: dict[Labels, float] = {}
        for record in self.store.list(JobRecord, state=QUEUED):
            labels = job_labels(record)
            pending[labels] += 1
            oldest[labels] = max(oldest.get(labels, 0.0), now - waiting_since(record))
        active: dict[Labels, float] = defaultdict(float)
        for record in self.store.list(JobRecord, state=ACTIVE):
            active[job_labels(record)] += 1
        names = ("class", "pool")
        yield gauge("pending_workloads", "Jobs waiting to be admitted.", names, pending)
        yield gauge(
            "pending_workloads_oldest_age_seconds",
            "How long the longest-waiting job has waited since it was queued.",
            names,
            oldest,
        )
        yield gauge(
            "admitted_active_workloads",
            "Jobs admitted and not finished (admitted, dispatched, running).",
            names,
            active,
        )

    def _tailed(self) -> Iterator[Metric]:
        counts = self.tail.read()
        yield counter("admitted_workloads", "Jobs admitted.", ("class", "pool"), counts.admitted)
        waits = HistogramMetricFamily(
            f"{PREFIX}_admission_wait_time_seconds",
            "Time from a job being queued (submitted or requeued) to its admission.",
            labels=("class", "pool"),
        )
        for labels, histogram in sorted(counts.waits.items()):
            waits.add_metric(list(labels), histogram.buckets(), histogram.total)
        yield waits
        yield counter(
            "evicted_workloads", "Jobs evicted, by reason.", ("pool", "reason"), counts.evicted
        )
        yield counter(
            "preempted_workloads",
            "Jobs preempted, by reason.",
            ("pool", "reason"),
            counts.preempted,
        )
        yield counter(
            "lost_gpu_seconds",
            "GPU-seconds that evicted attempts had run when evicted: the work a failure put "
            "at risk (what came after their last checkpoint is lost).",
            ("pool", "reason"),
            counts.lost_gpu_s,
        )

    def _fleet(self) -> Iterator[Metric]:
        nodes: dict[Labels, float] = defaultdict(float)
        for node in self.store.list(NodeRecord):
            if node.resources.get("alive", True):  # a node gone keeps its record
                nodes[(node.pool, str(node.state))] += 1
        yield gauge("nodes", "Live nodes by state, as the controller last recorded them.",
                    ("pool", "state"), nodes)  # fmt: skip
        instances: dict[Labels, float] = defaultdict(float)
        for instance in self.store.list(InstanceRecord, state=INSTANCE_LIVE):
            instances[(instance.pool, str(instance.state))] += 1
        yield gauge("cloud_instances", "Live cloud instances by state.", ("pool", "state"),
                    instances)  # fmt: skip
        yield from self._pools(self.store.list(PoolRecord))

    def _pools(self, pools: list[PoolRecord]) -> Iterator[Metric]:
        up: dict[Labels, float] = {}
        available: dict[Labels, float] = {}
        spend: dict[Labels, float] = {}
        team_spend: dict[Labels, float] = {}
        for pool in pools:
            seen: Mapping[str, Any] = pool.observed
            up[(pool.name,)] = 1.0 if pool.state == "up" else 0.0
            available[(pool.name,)] = 1.0 if seen.get("available", True) else 0.0
            if isinstance(seen.get("spend_usd"), int | float):
                spend[(pool.name,)] = float(seen["spend_usd"])
            by_team = seen.get("spend_usd_by_team")
            for team, usd in by_team.items() if isinstance(by_team, Mapping) else ():
                team_spend[(pool.name, str(team))] = float(usd)
        yield gauge("pool_up", "1 when the pool's cluster answered the last cycle.",
                    ("pool",), up)  # fmt: skip
        yield gauge("pool_available", "1 unless the controller holds the pool unavailable.",
                    ("pool",), available)  # fmt: skip
        yield gauge("pool_spend_usd", "A cloud pool's spend this month, at the price paid.",
                    ("pool",), spend)  # fmt: skip
        yield gauge("team_spend_usd", "A team's spend this month in a cloud pool.",
                    ("pool", "team"), team_spend)  # fmt: skip


def job_labels(record: JobRecord) -> Labels:
    return (priority_class(record), record.pool or NO_POOL)


def waiting_since(record: JobRecord) -> float:
    """A pending job waits since it was submitted; a requeued one since it was requeued (its
    record's last change: a waiting job changes only by its state)."""
    if record.state is JobState.PENDING:
        return record.submitted_at_s
    return record.updated_at_s


def gauge(
    name: str, help_text: str, labels: tuple[str, ...], values: Mapping[Labels, float]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def counter(
    name: str, help_text: str, labels: tuple[str, ...], values: Mapping[Labels, float]
) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family
