"""Record types kept by the state store.

Every record is a frozen, slotted dataclass. Mutable records (jobs, attempts, pools, nodes,
instances) carry a ``version`` that the store sets: 1 on create, +1 on every update. The
append-only log entries (events, decisions) carry a ``seq`` that the store assigns.

The store never reads the clock: every timestamp is a float of UNIX seconds set by the caller,
in a field whose name ends in ``_s``. Payload mappings must be JSON-able; they are stored as
JSON text, so they come back as plain ``dict``/``list`` values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias


class JobState(StrEnum):
    """Where a job stands in its lifecycle."""

    PENDING = "pending"
    ADMITTED = "admitted"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    EVICTED = "evicted"
    REQUEUED = "requeued"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A submitted job; ``spec`` is the job file's validated content."""

    id: str
    name: str
    team: str
    state: JobState
    priority: int
    spec: Mapping[str, Any]
    pool: str | None
    submitted_at_s: float
    updated_at_s: float
    version: int = 0


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One try at running a job on a pool; ``id`` is conventionally ``f"{job_id}-{number}"``."""

    id: str
    job_id: str
    number: int
    pool: str
    submission_id: str
    state: str
    started_at_s: float | None
    ended_at_s: float | None
    reason: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)  # placement, stop deadline
    version: int = 0


@dataclass(frozen=True, slots=True)
class PoolRecord:
    """A compute pool and what was last observed about it."""

    name: str
    provider: str
    state: str
    observed: Mapping[str, Any]
    updated_at_s: float
    version: int = 0


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node in a pool (healthy, cordoned, draining, unhealthy, dead, ...)."""

    id: str
    pool: str
    state: str
    labels: Mapping[str, str]
    resources: Mapping[str, Any]
    updated_at_s: float
    detail: Mapping[str, Any] = field(default_factory=dict)  # drain deadline, cordon reason
    version: int = 0


INSTANCE_LIVE = ("joining", "ready", "reclaiming")  # then interrupted or terminated, for good


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """A cloud instance requested from a provider for a pool: ``joining`` its pool's cluster,
    ``ready``, ``reclaiming`` (a spot instance given notice), then ``interrupted`` (taken back)
    or ``terminated`` (by meshctl)."""

    id: str
    pool: str
    provider: str
    request_id: str
    instance_type: str
    state: str
    launched_at_s: float | None
    updated_at_s: float
    spot: bool = False
    version: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    """An append-only log entry, e.g. kind ``"job.transition"``; ``seq`` is set by the store."""

    at_s: float
    kind: str
    job_id: str | None
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """An append-only record of a policy decision about a job; ``seq`` is set by the store."""

    at_s: float
    job_id: str
    outcome: str
    policy_hash: str
    explanation: Mapping[str, Any]
    seq: int = 0


Record: TypeAlias = JobRecord | AttemptRecord | PoolRecord | NodeRecord | InstanceRecord
"""A mutable, versioned record."""

LogEntry: TypeAlias = Event | Decision
"""An append-only log entry."""
