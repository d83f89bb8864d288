"""What the controller knows at one moment: the pools as observed, and the jobs as stored.

Plain frozen data, built by the loop (``loop.py``) from the pool adapters and the store, and
read by the pure ``decide`` (``decide.py``). Times are UNIX seconds passed in; nothing here
reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from meshctl.lifecycle import Estimator
from meshctl.model.job import Job
from meshctl.pools.observed import ObservedNode, PoolObservation
from meshctl.scheduler import Request, Running
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    AttemptRecord,
    InstanceRecord,
    JobRecord,
    JobState,
    LoanRecord,
    NodeRecord,
)


def node_busy(attempts: Iterable[AttemptRecord], now_s: float) -> dict[str, float]:
    """When a job last held each node ("pool/node"): the latest end of the attempts placed
    there, now for one still active (what idle teardown counts from)."""
    busy: dict[str, float] = {}
    for tried in attempts:
        active = tried.state in ACTIVE_ATTEMPT
        until = now_s if active else (tried.ended_at_s or tried.started_at_s)
        if until is None:
            continue
        for held in tried.detail.allocations:
            key = f"{tried.pool}/{held.node}"
            busy[key] = max(busy.get(key, 0.0), until)
    return busy


def past_runs(
    records: Iterable[JobRecord], latest: Mapping[str, AttemptRecord]
) -> list[tuple[str, str, float]]:
    """(team, name, runtime) of every job that succeeded, in the order they ended: what
    runtime estimates learn from, read from the store when a controller starts."""
    runs = []
    for record in records:
        tried = latest.get(record.id)
        if record.state != JobState.SUCCEEDED or tried is None:
            continue
        if tried.started_at_s is not None and tried.ended_at_s is not None:
            runs.append(
                (tried.ended_at_s, record.team, record.name, tried.ended_at_s - tried.started_at_s)
            )
    return [(team, name, max(0.0, runtime)) for _, team, name, runtime in sorted(runs)]


@dataclass(frozen=True, slots=True)
class JobView:
    """A stored job, its parsed file, and its latest attempt (if any); ``request``: what the
    job asks of the scheduler (``Request.of(job)``), when the loop kept it from an earlier
    cycle (``request_of``)."""

    record: JobRecord
    job: Job
    attempt: AttemptRecord | None = None
    request: Request | None = None


def request_of(view: JobView) -> Request:
    """What the job asks of the scheduler: kept by the loop with its parsed file (a cycle
    over 100,000 jobs does not work each out again), else worked out now."""
    return view.request if view.request is not None else Request.of(view.job)


_Inputs = tuple[JobRecord, Job, AttemptRecord | None, Request | None]


class Derived:
    """What a cycle works out of a job that the next cycle may take again as it is: kept by
    the loop between cycles and passed in with the world. An entry holds while the job's view
    holds the very same records and parsed file (the loop keeps a record that did not change
    between cycles, ``history.Kept``; any change is a new object) and the same other inputs;
    one that a whole cycle did not ask for is forgotten (``turn``)."""

    def __init__(self) -> None:
        self._now: dict[str, tuple[_Inputs, float | None, Running]] = {}
        self._last: dict[str, tuple[_Inputs, float | None, Running]] = {}

    def running(
        self, view: JobView, checkpointed: float | None, make: Callable[[], Running]
    ) -> Running:
        """The job as the scheduler sees it running (``make``: worked out again), before
        what the cycle decides of it; ``checkpointed``: when it last checkpointed."""
        job_id = view.record.id
        found = self._now.get(job_id) or self._last.get(job_id)
        if found is not None and found[1] == checkpointed:
            record, job, attempt, request = found[0]
            if (
                record is view.record
                and job is view.job
                and attempt is view.attempt
                and request is view.request
            ):
                self._now[job_id] = found
                return found[2]
        made = make()
        self._now[job_id] = (
            (view.record, view.job, view.attempt, view.request),
            checkpointed,
            made,
        )
        return made

    def turn(self) -> None:
        """A cycle is over: what it did not ask for is forgotten."""
        self._last, self._now = self._now, {}


@dataclass(frozen=True, slots=True)
class TrainProgress:
    """What a train job's latest attempt reported (``meshctl.workload.train.progress``)."""

    attempt: int
    reports: int
    step: int | None
    last_report_s: float | None
    checkpoint_step: int | None
    restarting_since: float | None = None  # a worker failure Ray Train has not recovered yet
    checkpoint_at_s: float | None = None  # when its latest checkpoint was recorded
    loop_ended_s: float | None = None  # rank 0's loop returned: Ray Train is winding down


@dataclass(frozen=True, slots=True)
class ServeSeen:
    """What Serve says of a service's application: its status and message, its replicas
    running, and its traffic (requests in flight and queued, per second, latency); None where
    there is no reading yet."""

    status: str
    message: str = ""
    running: int = 0
    ongoing: float | None = None
    rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    nodes: tuple[str, ...] = ()  # the Ray node ids its running replicas are on, one each


@dataclass(frozen=True, slots=True)
class CacheSeen:
    """A node's dataset cache as its agent last reported it (``meshctl.data.cache``)."""

    root: str  # the cache folder on the node
    agent: str  # the agent's base URL (what peers fetch from)
    complete: frozenset[str] = frozenset()  # locations held whole, current version
    fetching: frozenset[str] = frozenset()  # locations on their way into the cache
    failed: frozenset[str] = frozenset()  # locations whose last fetch failed


@dataclass(frozen=True, slots=True)
class World:
    now_s: float
    pools: Mapping[str, PoolObservation]  # the pools this controller drives
    jobs: tuple[JobView, ...]  # every job not yet finished, and finished ones still running
    nodes: Mapping[str, NodeRecord] = field(default_factory=dict)  # by "pool/node"
    instances: tuple[InstanceRecord, ...] = ()  # cloud instances launched and not terminated
    unavailable: frozenset[tuple[str, str]] = frozenset()  # (pool, node type) out of capacity
    launching: frozenset[str] = frozenset()  # pools with a launch in flight (a worker thread)
    # "pool/node" -> when a job last held the node (now, while one does): idle teardown
    node_busy_s: Mapping[str, float] = field(default_factory=dict)
    spend_usd: Mapping[str, float] = field(default_factory=dict)  # per pool, this month
    team_spend_usd: Mapping[str, float] = field(default_factory=dict)  # per team, this month
    interrupted: frozenset[tuple[str, str]] = frozenset()  # (pool, node) whose instance the
    # provider took back (spot): their jobs are preempted, not evicted
    reclaiming: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (pool, node)
    # whose spot instance was given notice -> when the provider takes it back
    progress: Mapping[str, TrainProgress] = field(default_factory=dict)  # train jobs, by job id
    # attempt id -> the exit status its driver log recorded, for attempts their pool no longer
    # knows (a head that restarted forgets the jobs it ran: ``meshctl/workload/exits.py``)
    exits: Mapping[str, int] = field(default_factory=dict)
    health: Mapping[str, str] = field(default_factory=dict)  # "pool/node" -> why unhealthy
    # "pool/node" whose agent is silent past dead_after_s (one of ``health``): dead to meshctl
    # while Ray may still list it; a replaceable attempt replaces it as a dead node
    silent: frozenset[str] = frozenset()
    # "pool/node" -> why suspect: its agent is late; nothing new goes there (agent/watch.py)
    suspect: Mapping[str, str] = field(default_factory=dict)
    # pools that cannot be used now, and why: "not up", "dashboard at ... does not answer",
    # "no credentials", "AuthFailure: ..." (nothing is placed, launched or preempted there)
    pool_unavailable: Mapping[str, str] = field(default_factory=dict)
    hold: str | None = None  # why nothing new starts now (meshctl down --drain), or None
    estimator: Estimator = field(default_factory=Estimator)  # runtimes of the jobs that ended
    budget_states: Mapping[str, str] = field(default_factory=dict)  # what each budget last was
    loans: tuple[LoanRecord, ...] = ()  # open: elastic jobs' nodes lent to other jobs
    serve: Mapping[str, ServeSeen] = field(default_factory=dict)  # services, by job id
    caches: Mapping[str, CacheSeen] = field(default_factory=dict)  # "pool/node" -> its cache
    # what the last cycles worked out of each job, kept by the loop (a world of its own: none)
    derived: Derived = field(default_factory=Derived, compare=False, repr=False)
    # the live nodes of each pool asked for, by name (``live_nodes``); a world made by
    # ``replace`` starts without
    _live: dict[str, dict[str, ObservedNode]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def live_nodes(self, pool: str) -> Mapping[str, ObservedNode]:
        """The pool's live nodes in its latest observation, by name: worked out once a
        world (a cycle placing thousands of jobs asks for each of them)."""
        found = self._live.get(pool)
        if found is None:
            seen = self.pools.get(pool)
            found = {n.name: n for n in seen.nodes if n.alive} if seen else {}
            self._live[pool] = found
        return found
