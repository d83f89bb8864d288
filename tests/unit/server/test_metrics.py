"""The store's Prometheus metrics: values read from a store filled by hand, the event log
tailed once per event across scrapes, and no label that names a job or a node."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from meshctl.lifecycle import effects
from meshctl.scheduler.plan import Grow, Preempt, Shrink
from meshctl.scheduler.reclaim import Reclaimed
from meshctl.scheduler.snapshot import Allocation
from meshctl.server.metrics import registry
from meshctl.server.reasons import EVICTED, OTHER, PREEMPTED, classify
from meshctl.state import (
    AttemptDetail,
    AttemptRecord,
    Event,
    Held,
    InstanceRecord,
    JobRecord,
    JobState,
    MemoryStore,
    NodeRecord,
    PoolRecord,
)

pytestmark = pytest.mark.unit

NOW = 10_000.0
BOUNDED = {"class", "pool", "team", "reason", "state", "resource", "le"}


def job(
    job_id: str, state: JobState, *, at: float, pool: str | None = None, klass: str = "batch"
) -> JobRecord:
    spec = {"kind": "Job", "spec": {"priority_class": klass}}
    return JobRecord(job_id, job_id, "ml", state, 10, spec, pool, at, at)


def moved(job_id: str, to: str, at: float, pool: str | None = None, why: str = "") -> Event:
    return Event(at, f"job.{to}", job_id, why, {"to": to, "pool": pool})


def samples(reg: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, parsed back from the exposition text."""
    text = generate_latest(reg).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float | None:  # fmt: skip
    return found.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    with MemoryStore() as s:
        s.create(
            job("a", JobState.PENDING, at=NOW - 100), events=[moved("a", "pending", NOW - 100)]
        )
        s.create(job("b", JobState.PENDING, at=NOW - 30))
        s.create(job("c", JobState.REQUEUED, at=NOW - 50, pool="onprem", klass="high"))
        s.create(job("d", JobState.RUNNING, at=NOW - 500, pool="onprem"))
        held = AttemptDetail(allocations=(Held("n1", (0, 1)),))
        s.create(AttemptRecord("d-1", "d", 1, "onprem", "s-d-1", "running", NOW - 400, None,
                               detail=held))  # fmt: skip
        for event in (
            moved("d", "pending", NOW - 500),
            moved("d", "admitted", NOW - 440, "onprem"),  # waited 60 s
            moved("d", "evicted", NOW - 40, "onprem", "node onprem/n1 is unhealthy: XID 79"),
            moved("d", "requeued", NOW - 30, "onprem"),
            moved("d", "admitted", NOW - 20, "onprem"),  # waited 10 s
        ):
            s.append_event(event)
        s.create(NodeRecord("onprem/n1", "onprem", "unhealthy", {}, {"alive": True}, NOW))
        s.create(NodeRecord("onprem/n2", "onprem", "ready", {}, {"alive": True}, NOW))
        s.create(NodeRecord("onprem/n3", "onprem", "ready", {}, {"alive": False}, NOW))
        observed = {"spend_usd": 12.5, "spend_usd_by_team": {"ml": 12.5}, "available": True}
        s.create(PoolRecord("aws-burst", "aws", "up", observed, NOW))
        s.create(InstanceRecord("i-1", "aws-burst", "aws", "r1", "p4d", "ready", NOW, NOW))
        yield s


@dataclass(frozen=True)
class Case:
    name: str
    metric: str
    labels: dict[str, str]
    expected: float | None


CASES = [
    Case("two pending never placed", "meshctl_pending_workloads",
         {"class": "batch", "pool": "none"}, 2),
    Case("a requeued job counts under its last pool", "meshctl_pending_workloads",
         {"class": "high", "pool": "onprem"}, 1),
    # a submitted at NOW-100 is the oldest of the two never placed
    Case("oldest age", "meshctl_pending_workloads_oldest_age_seconds",
         {"class": "batch", "pool": "none"}, 100),
    Case("running job", "meshctl_admitted_active_workloads",
         {"class": "batch", "pool": "onprem"}, 1),
    Case("admitted twice", "meshctl_admitted_workloads_total",
         {"class": "batch", "pool": "onprem"}, 2),
    Case("waits of 60 s and 10 s: count", "meshctl_admission_wait_time_seconds_count",
         {"class": "batch", "pool": "onprem"}, 2),
    Case("waits of 60 s and 10 s: sum", "meshctl_admission_wait_time_seconds_sum",
         {"class": "batch", "pool": "onprem"}, 70),
    Case("10 s within the 15 s bucket, 60 s not", "meshctl_admission_wait_time_seconds_bucket",
         {"class": "batch", "pool": "onprem", "le": "15.0"}, 1),
    Case("both within the 60 s bucket", "meshctl_admission_wait_time_seconds_bucket",
         {"class": "batch", "pool": "onprem", "le": "60.0"}, 2),
    Case("evicted by reason", "meshctl_evicted_workloads_total",
         {"pool": "onprem", "reason": "NodeUnhealthy"}, 1),
    # 2 GPUs from NOW-400 to the eviction at NOW-40: 720 GPU-seconds
    Case("GPU-seconds run before the eviction", "meshctl_lost_gpu_seconds_total",
         {"pool": "onprem", "reason": "NodeUnhealthy"}, 720),
    Case("unhealthy node", "meshctl_nodes", {"pool": "onprem", "state": "unhealthy"}, 1),
    Case("a dead node is not counted", "meshctl_nodes", {"pool": "onprem", "state": "ready"}, 1),
    Case("live instance", "meshctl_cloud_instances", {"pool": "aws-burst", "state": "ready"}, 1),
    Case("pool spend", "meshctl_pool_spend_usd", {"pool": "aws-burst"}, 12.5),
    Case("team spend", "meshctl_team_spend_usd", {"pool": "aws-burst", "team": "ml"}, 12.5),
    Case("pool up", "meshctl_pool_up", {"pool": "aws-burst"}, 1),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_scrape_reads_the_store(store: MemoryStore, case: Case) -> None:
    found = samples(registry(store, clock=lambda: NOW))
    assert value(found, case.metric, **case.labels) == pytest.approx(case.expected)


def test_events_added_between_scrapes_are_counted_once(store: MemoryStore) -> None:
    reg = registry(store, clock=lambda: NOW)
    first = samples(reg)
    store.append_event(moved("c", "admitted", NOW, "onprem"))  # requeued at NOW-50
    store.append_event(moved("d", "preempted", NOW, "onprem", "for e (priority)"))
    second, third = samples(reg), samples(reg)
    admitted = "meshctl_admitted_workloads_total"
    assert value(first, admitted, **{"class": "high", "pool": "onprem"}) is None
    assert value(second, admitted, **{"class": "high", "pool": "onprem"}) == 1
    assert value(second, admitted, **{"class": "batch", "pool": "onprem"}) == 2
    preempted = "meshctl_preempted_workloads_total"
    assert value(third, preempted, pool="onprem", reason="Priority") == 1
    assert second == third


def test_the_first_scrape_pages_through_the_whole_log(store: MemoryStore) -> None:
    for i in range(1500):  # more than one page (1000), events of jobs no longer stored
        store.append_event(moved(f"x{i}", "pending", NOW - 10))
        store.append_event(moved(f"x{i}", "admitted", NOW, "onprem"))
    found = samples(registry(store, clock=lambda: NOW))
    count = "meshctl_admission_wait_time_seconds_count"
    assert value(found, count, **{"class": "none", "pool": "onprem"}) == 1500
    assert value(found, count, **{"class": "batch", "pool": "onprem"}) == 2


def test_no_label_names_a_job_or_a_node(store: MemoryStore) -> None:
    found = samples(registry(store, clock=lambda: NOW))
    names = {name for _, labels in found for name, _ in labels}
    values = {v for _, labels in found for _, v in labels}
    assert names <= BOUNDED
    assert not values & {"a", "b", "c", "d", "n1", "onprem/n1", "d-1", "i-1"}


# Each producer's own words, so that a reworded reason fails here, not in a dashboard.
EVICTIONS: Sequence[tuple[str, str]] = [
    (effects.unhealthy("j", "n1", "XID 79", NOW).reason, "NodeUnhealthy"),
    (effects.node_died("j", "n1", NOW).reason, "NodeDied"),
    ("its node died", "NodeDied"),
    ("node n1 drained", "NodeDrained"),
    ("pool onprem lost the job", "PoolLost"),
    ("its driver was killed: Job entrypoint command failed with exit code -9", "DriverKilled"),
    ("no progress report for 900 s (hang timeout 600 s)", "Hung"),
    ("RaySystemError: something else", OTHER),
]
PREEMPTIONS: Sequence[tuple[str, str]] = [
    (effects.taken_back("j", "n1", NOW).reason, "SpotReclaimed"),
    (effects.noticed("j", "n1", NOW + 60, NOW).reason, "SpotNotice"),
    (effects.grows(Grow("j", "p", (Allocation("n2", (0,), 1.0, 0, 0, 0),)), NOW).reason, "Growing"),
    (effects.preempted(Preempt("j", "big", 30.0, "critical-first"), NOW).reason, "Priority"),
    (
        effects.preempted(Preempt("j", "l", 30.0, Reclaimed((), "lab", 1, 4).reason), NOW).reason,
        "InCohortReclamation",
    ),
    (effects.lends([Shrink("j", "svc", "n1", 30.0, None)], NOW).reason, "Lending"),
]


@pytest.mark.parametrize(("message", "reason"), EVICTIONS)
def test_eviction_reasons_are_bounded(message: str, reason: str) -> None:
    assert classify(message, EVICTED) == reason


@pytest.mark.parametrize(("message", "reason"), PREEMPTIONS)
def test_preemption_reasons_are_bounded(message: str, reason: str) -> None:
    assert classify(message, PREEMPTED) == reason
