"""The status document counted from a store and fed-in observations of this machine (the
heartbeat, the running pid, the pools driven and unavailable, the time): no CLI, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import TypeAdapter

from meshctl.controller.status import Status, status_document
from meshctl.state import (
    AttemptDetail,
    AttemptRecord,
    Event,
    JobRecord,
    JobState,
    MemoryStore,
    PoolRecord,
)
from tests.builders import local_pool, mesh, node_group, ray_pool

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0

MESH = mesh(
    local_pool("onprem", node_group("n", count=2, cpus=8, memory_gib="32GiB")),
    ray_pool("lab", "http://lab:8265"),
    name="t",
)


def job(
    n: int, state: JobState, klass: str | None = None, priority: int = 200, waited_s: float = 60.0
) -> JobRecord:
    body: dict[str, Any] = {"kind": "batch", "entrypoint": "python x.py"}
    if klass:
        body["priority_class"] = klass
    return JobRecord(f"j-{n}", f"j{n}", "ml", state, priority, {"spec": body}, None,
                     NOW - waited_s, NOW - 5)  # fmt: skip


def attempt(n: int, number: int, state: str, *gpus: tuple[int, float]) -> AttemptRecord:
    """Job ``n``'s attempt ``number`` on onprem; ``gpus``: (GPU count, share) per node."""
    allocations = [{"node": f"n-{i}", "gpu_indices": list(range(count)), "gpu_share": share}
                   for i, (count, share) in enumerate(gpus)]  # fmt: skip
    detail = AttemptDetail.of({"allocations": allocations})
    return AttemptRecord(f"j-{n}-{number}", f"j-{n}", number, "onprem", f"s-{n}-{number}",
                         state, NOW - 30, None, "", detail)  # fmt: skip


NO_CONTROLLER: dict[str, Any] = {
    "pid": None,
    "last_cycle_at": None,
    "last_cycle_age_s": None,
    "cycle_s": None,
    "errors": [],
    "policy_hash": None,
    "policy_commit": None,
    "policies": None,
    "policy_error": None,
}
BEAT = {"pid": 7, "at_s": NOW - 4.0, "cycle_ms": 12.5, "errors": ["lab: timed out"],
        "policy_hash": "abc123", "policy_commit": "0123456789abcdef", "policies": "/p",
        "policy_error": None}  # fmt: skip
LAST_CYCLE = {"last_cycle_at": "2027-01-15T07:59:56Z", "last_cycle_age_s": 4.0, "cycle_s": 0.0125,
              "errors": ["lab: timed out"]}  # fmt: skip

CASES = [
    pytest.param(
        [], {},
        {(): {"mesh": "t", "controller": NO_CONTROLLER, "jobs": {}, "queue": [], "events": [],
              "budgets": [],
              "pools": [
                  {"pool": "onprem", "provider": "local", "state": "unavailable",
                   "nodes": None, "gpus": None, "gpus_used": 0.0, "available": False,
                   "reason": "not up"},
                  {"pool": "lab", "provider": "ray",
                   "state": "no instances: launched when the plan bursts to it",
                   "nodes": None, "gpus": None, "gpus_used": 0.0, "available": True,
                   "reason": None},
              ]}},
        id="empty-store-no-controller-the-whole-document",
    ),
    pytest.param(
        [job(1, JobState.RUNNING), attempt(1, 1, "running", (2, 0.5), (1, 1.0)),
         job(2, JobState.DISPATCHED), attempt(2, 1, "pending", (1, 0.25)),
         job(3, JobState.RUNNING), attempt(3, 1, "running", (4, 1.0)), attempt(3, 2, "failed"),
         job(4, JobState.SUCCEEDED), attempt(4, 1, "running", (4, 1.0)),
         job(5, JobState.PENDING)],
        {},
        # 1: 2 x 0.5 + 1 x 1.0 = 2; 2: 0.25; 3: its latest attempt (2) holds nothing;
        # 4: finished, whatever its attempt says; 5: no attempt
        {("pools", 0, "gpus_used"): 2.25, ("pools", 1, "gpus_used"): 0.0},
        id="gpus-used-unfinished-jobs-whose-latest-attempt-is-active",
    ),
    pytest.param(
        [PoolRecord("onprem", "local", "up", {"nodes": 2, "gpus": 8, "error": "slow"}, NOW)],
        {"driven": {"onprem", "lab"}, "unavailable": {"onprem": None, "lab": None}},
        {("pools", 0, "state"): "up: slow", ("pools", 0, "nodes"): 2, ("pools", 0, "gpus"): 8,
         ("pools", 1, "state"): "not yet observed", ("pools", 1, "nodes"): None},
        id="pool-state-driven-from-its-record-or-not-yet-observed",
    ),
    pytest.param(
        [], {"unavailable": {"lab": "does not answer"}},
        {("pools", 0, "available"): True, ("pools", 0, "reason"): None,
         ("pools", 1, "available"): False, ("pools", 1, "reason"): "does not answer",
         ("pools", 1, "state"): "unavailable"},
        id="pool-available-unless-a-reason-says-why-not",
    ),
    pytest.param(
        [job(1, JobState.PENDING, "batch", 100, waited_s=123.46),
         job(2, JobState.PENDING, "batch", 100, waited_s=30.0),
         job(3, JobState.REQUEUED, "critical", 1000, waited_s=7.77),
         job(4, JobState.PENDING, None, 200, waited_s=1.0),
         job(5, JobState.RUNNING, "critical", 1000, waited_s=999.0)],
        {},
        {("queue",): [
            {"priority_class": "critical", "priority": 1000, "queued": 1, "oldest_wait_s": 7.8},
            {"priority_class": None, "priority": 200, "queued": 1, "oldest_wait_s": 1.0},
            {"priority_class": "batch", "priority": 100, "queued": 2, "oldest_wait_s": 123.5},
        ]},
        id="queue-by-class-highest-priority-first-oldest-wait-running-not-queued",
    ),
    pytest.param(
        [job(1, JobState.RUNNING), job(2, JobState.PENDING), job(3, JobState.PENDING),
         job(4, JobState.SUCCEEDED)],
        {},
        {("jobs",): {"running": 1, "pending": 2, "succeeded": 1}},
        id="jobs-per-state-in-the-order-first-seen",
    ),
    pytest.param(
        [], {"beat": BEAT, "pid": 7},
        {("controller",): {**NO_CONTROLLER, **LAST_CYCLE, "pid": 7, "policy_hash": "abc123",
                           "policy_commit": "0123456789abcdef", "policies": "/p"}},
        id="live-heartbeat-last-cycle-and-the-rules-it-enforces",
    ),
    pytest.param(
        [], {"beat": {**BEAT, "budgets": [{"budget": "cloud", "scope": "pool:aws",
                                            "state": "warn", "spent_usd": 812.3456,
                                            "limit_usd": 1000.0}]}, "pid": 7},
        {("budgets",): [{"budget": "cloud", "scope": "pool:aws", "state": "warn",
                         "spent_usd": 812.35, "limit_usd": 1000.0}]},
        id="budgets-as-the-running-controller-saw-them",
    ),
    pytest.param(
        [], {"beat": {**BEAT, "budgets": [{"budget": "cloud", "scope": "pool:aws",
                                            "state": "warn", "spent_usd": 1.0,
                                            "limit_usd": 2.0}]}, "pid": 8},
        {("budgets",): []},
        id="budgets-of-a-controller-that-stopped-are-not-shown",
    ),
    pytest.param(
        [], {"beat": BEAT, "pid": 8},
        {("controller",): {**NO_CONTROLLER, **LAST_CYCLE, "pid": 8}},
        id="heartbeat-of-another-controller-says-when-not-what-it-enforces",
    ),
    pytest.param(
        [], {"beat": {"pid": 7}, "pid": 7},
        {("controller",): {**NO_CONTROLLER, "pid": 7}},
        id="running-controller-before-its-first-cycle",
    ),
    pytest.param(
        [Event(NOW - 20 + k, "job.pending", f"j-{k}" if k % 2 else None, f"event {k}")
         for k in range(12)],
        {},
        {("events", 0): {"occurred_at": "2027-01-15T07:59:42Z", "kind": "job.pending",
                         "message": "event 2", "job_id": None},
         ("events", 9, "job_id"): "j-11", ("events", 9, "message"): "event 11"},
        id="events-the-latest-ten-with-their-job",
    ),
]  # fmt: skip


def at(document: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


@pytest.mark.parametrize(("records", "seen", "expected"), CASES)
def test_status_document(
    records: list[Any], seen: Mapping[str, Any], expected: Mapping[tuple[str | int, ...], Any]
) -> None:
    store = MemoryStore()
    for record in records:
        if isinstance(record, Event):
            store.append_event(record)
        else:
            store.create(record)
    inputs: dict[str, Any] = {"beat": {}, "pid": None, "driven": set(), "now_s": NOW}
    inputs["unavailable"] = {"onprem": "not up", "lab": None}
    document = status_document(store, MESH, **(inputs | dict(seen)))
    TypeAdapter(Status).validate_python(document)  # the -o json contract, strictly
    assert {path: at(document, path) for path in expected} == expected
