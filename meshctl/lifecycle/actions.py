"""What the lifecycle decides: the actions both the controller and the simulator carry out.

The controller turns them into store writes, Ray Jobs calls and cloud calls; the simulator
into events on its clock. The differential check (``tests/unit/lifecycle``,
``benchmarks/differential.py``) compares the sequences both produce for one scenario.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from meshctl.scheduler import Allocation


class Left(StrEnum):
    """Why a job leaves its nodes before it ends on its own. A preemption (for a job of higher
    priority, or a spot instance taken back) is the mesh's doing; an eviction (its node died,
    became unhealthy or was drained, its driver was killed, it hung, its Ray Train run died
    before its loop ran) is a failure, and failures count against the job's ``max_restarts``."""

    PREEMPTED = "preempted"
    EVICTED = "evicted"
    # An elastic job resized: it lends nodes to a job of higher priority (``lent``), or grows
    # back onto free nodes (``grows_onto``); it checkpoints, stops and resumes at its new size.
    RESIZED = "resized"


@dataclass(frozen=True, slots=True)
class Start:
    """Run the job on these nodes (its next attempt)."""

    job_id: str
    pool: str
    allocations: tuple[Allocation, ...]
    backfill: bool = False  # started around a reservation held for a job ahead of it


@dataclass(frozen=True, slots=True)
class Leave:
    """The job leaves its nodes: asked to checkpoint now (``checkpoint``), stopped at
    ``stop_at_s``; then requeued or failed (``requeue_or_fail``)."""

    job_id: str
    left: Left
    reason: str
    stop_at_s: float
    checkpoint: bool
    for_job: str | None = None  # the preemptor its GPUs are freed for
    lent: tuple[tuple[str, str], ...] = ()  # resized: (node, borrower) for each node it lends
    grows_onto: tuple[str, ...] = ()  # resized: the free nodes it is held to resume on too


@dataclass(frozen=True, slots=True)
class Replace:
    """The job goes on inside its attempt: its workers start again from its latest checkpoint
    on ``allocations``, where each node in ``lost`` is replaced (``lifecycle.replacing``)."""

    job_id: str
    pool: str
    lost: tuple[str, ...]
    allocations: tuple[Allocation, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch cloud capacity for a waiting job. ``request_id``: the controller's idempotency
    key for the cloud request (``burst-<job>-<attempt>``: asking again launches nothing more)."""

    job_id: str
    pool: str
    node_type: str
    count: int
    spot: bool
    usd_per_hour: float  # all its nodes, at the price paid
    request_id: str = ""


@dataclass(frozen=True, slots=True)
class Teardown:
    """Terminate an idle cloud instance."""

    pool: str
    instance_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    """The job fails for good, with this reason (its deadline passed before it could start,
    it ran past its max_runtime_s, it failed more often than its max_restarts allow)."""

    job_id: str
    reason: str
    kind: str  # "deadline", "max_runtime", "max_restarts"
    stop: bool = False  # it still runs: stop it


@dataclass(frozen=True, slots=True)
class Requeue:
    """The job waits again; its next attempt resumes from its latest checkpoint."""

    job_id: str
    reason: str
    failures: int  # failures so far (what max_restarts is judged against)


@dataclass(frozen=True, slots=True)
class BudgetCrossed:
    """A budget's standing changed this month: ``warn`` (past its soft share), ``exceeded``
    (at or past its limit: bursting stops), or back to ``ok`` (a new month)."""

    budget: str
    scope: str
    state: str
    spent_usd: float
    limit_usd: float


Action = Start | Leave | Replace | Launch | Teardown | Fail | Requeue | BudgetCrossed
