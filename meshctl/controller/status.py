"""The status document: the mesh on one screen (``meshctl status``), and its shape.

``status_document`` reads the store (jobs, their latest attempts, pool records, events) and
counts what the screen shows: each pool's state and GPUs in use, jobs per state, the queue by
priority class, the latest events. What it needs from this machine comes in as arguments: the
controller's heartbeat and pid (``daemon.heartbeat``, ``daemon.running``), the pools it can
drive (``runtime.clients``), which pools cannot be used now and why, and ``now_s``. It reads
no file and no clock; the CLI gathers those and renders the document.

The shapes below are the document's ``-o json`` contract; ``meshctl/app/shapes`` lists them
with every other command's, and ``docs/JSON.md`` is generated from there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from meshctl.controller.daemon import live_beat
from meshctl.controller.runtime import why_not_driven
from meshctl.jsondata import event_data, timestamp
from meshctl.jsontypes import STRICT, EventData, Timestamp
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    FINISHED,
    QUEUED,
    AttemptRecord,
    JobRecord,
    JobState,
    PoolRecord,
    latest_attempts,
)

if TYPE_CHECKING:
    from meshctl.model.mesh import Mesh, Pool
    from meshctl.state import Event, Store

EVENTS = 10  # the latest events the document holds
UNAVAILABLE = "unavailable"


@with_config(STRICT)
class ControllerData(TypedDict):
    pid: Annotated[int | None, "null: not running"]
    last_cycle_at: Timestamp | None
    last_cycle_age_s: float | None
    cycle_s: Annotated[float | None, "how long its last cycle took"]
    errors: list[str]
    policy_hash: Annotated[str | None, "the policy set it enforces (null: none runs)"]
    policy_commit: Annotated[str | None, "the git commit of the policy folder, if in git"]
    policies: Annotated[str | None, "the policy folder it enforces"]
    policy_error: Annotated[str | None, "a change of files it refused (the set above runs on)"]


@with_config(STRICT)
class StatusPool(TypedDict):
    pool: str
    provider: str
    state: Annotated[str, "as the controller last saw it, with its reason"]
    nodes: int | None
    gpus: int | None
    gpus_used: float
    available: Annotated[bool, "the pool can be used now"]
    reason: Annotated[str | None, "why not: not up, no credentials, ..."]


@with_config(STRICT)
class QueueRow(TypedDict):
    priority_class: str | None
    priority: int
    queued: Annotated[int, "jobs waiting"]
    oldest_wait_s: float


@with_config(STRICT)
class BudgetRow(TypedDict):
    budget: str
    scope: Annotated[str, "pool:NAME, provider:NAME or team:NAME"]
    state: Literal["ok", "warn", "exceeded"]
    spent_usd: Annotated[float, "this calendar month (UTC), at the price paid"]
    limit_usd: float


@with_config(STRICT)
class StatusEvent(EventData):
    job_id: str | None


@with_config(STRICT)
class Status(TypedDict):
    mesh: str
    controller: ControllerData
    pools: list[StatusPool]
    jobs: Annotated[dict[str, int], "jobs per state"]
    queue: Annotated[list[QueueRow], "by priority class, highest first"]
    budgets: Annotated[list[BudgetRow], "where each budget stands (as the running controller saw)"]
    events: Annotated[list[StatusEvent], "the latest ten"]


def status_document(
    store: Store,
    mesh: Mesh,
    *,
    beat: Mapping[str, Any],
    pid: int | None,
    driven: Collection[str],
    unavailable: Mapping[str, str | None],
    now_s: float,
) -> Status:
    """Everything ``meshctl status`` shows. ``beat``: the heartbeat file as read, whichever
    controller wrote it (empty: none); ``pid``: the controller running now (None: none);
    ``driven``: the pools that can be driven now; ``unavailable``: why each pool cannot be
    used now (None or absent: it can)."""
    jobs = store.list(JobRecord, state=[s.value for s in JobState if s not in FINISHED])
    ended = {s.value: len(store.versions(JobRecord, state=s.value)) for s in FINISHED}
    attempts = store.list(AttemptRecord, job_id=[j.id for j in jobs])
    used = _gpus_used(jobs, latest_attempts(attempts))
    records = {p.name: p for p in store.list(PoolRecord)}
    pools = [
        _pool(p, records.get(p.name), p.name in driven, used.get(p.name, 0.0), unavailable)
        for p in mesh.spec.pools
    ]
    return {
        "mesh": mesh.metadata.name,
        "controller": _controller(beat, pid, now_s),
        "pools": pools,
        "jobs": _per_state(jobs, ended),
        "queue": _queue(jobs, now_s),
        "budgets": _budgets(live_beat(beat, pid)),
        "events": [_event(e) for e in store.newest_events(EVENTS)],
    }


def _budgets(live: Mapping[str, Any]) -> list[BudgetRow]:
    """Each budget's standing this month, as the running controller saw it in its last cycle
    (none when no controller runs)."""
    return [
        {
            "budget": str(b["budget"]),
            "scope": str(b["scope"]),
            "state": b["state"],
            "spent_usd": round(float(b["spent_usd"]), 2),
            "limit_usd": float(b["limit_usd"]),
        }
        for b in live.get("budgets", [])
    ]


def _gpus_used(
    jobs: Sequence[JobRecord], attempts: Mapping[str, AttemptRecord]
) -> dict[str, float]:
    """GPUs held per pool by the unfinished jobs whose latest attempt is active."""
    used: dict[str, float] = {}
    for job in jobs:
        attempt = attempts.get(job.id)
        if job.state not in FINISHED and attempt and attempt.state in ACTIVE_ATTEMPT:
            gpus = sum(held.gpus() for held in attempt.detail.allocations)
            used[attempt.pool] = used.get(attempt.pool, 0.0) + gpus
    return used


def _controller(beat: Mapping[str, Any], pid: int | None, now_s: float) -> ControllerData:
    """The last cycle as the heartbeat says (even one left by a controller that stopped), and
    the rule set the running controller enforces (nulls when none runs): the policy hash, the
    policy folder and its git commit, and a change it refused (the old set runs on)."""
    at_s, cycle_ms = beat.get("at_s"), beat.get("cycle_ms")
    live: Mapping[str, Any] = live_beat(beat, pid)
    return {
        "pid": pid,
        "last_cycle_at": timestamp(float(at_s)) if at_s else None,
        "last_cycle_age_s": round(now_s - float(at_s), 1) if at_s else None,
        "cycle_s": float(cycle_ms) / 1000 if cycle_ms is not None else None,
        "errors": beat.get("errors", []),
        "policy_hash": live.get("policy_hash"),
        "policy_commit": live.get("policy_commit"),
        "policies": live.get("policies"),
        "policy_error": live.get("policy_error"),
    }


def _pool(
    pool: Pool,
    record: PoolRecord | None,
    driven: bool,
    gpus_used: float,
    unavailable: Mapping[str, str | None],
) -> StatusPool:
    observed = dict(record.observed) if record else {}
    reason = unavailable.get(pool.name)
    return {
        "pool": pool.name,
        "provider": pool.provider,
        "state": UNAVAILABLE if reason is not None else _pool_state(pool, record, driven),
        "nodes": observed.get("nodes"),
        "gpus": observed.get("gpus"),
        "gpus_used": round(gpus_used, 2),
        "available": reason is None,
        "reason": reason,
    }


def pool_state(record: PoolRecord) -> str:
    """One word for a pool's state wherever it is shown (``status``, ``pools list``, their
    JSON): ``unavailable`` while the controller holds it so (the reason beside it), else what
    it saw (up, degraded, down, idle, not up)."""
    return UNAVAILABLE if record.observed.get("available") is False else str(record.state)


def _pool_state(pool: Pool, record: PoolRecord | None, driven: bool) -> str:
    if not driven:
        return why_not_driven(pool)
    if record is None:
        return "not yet observed"
    error = record.observed.get("error")
    return str(record.state) + (f": {error}" if error else "")


def _per_state(jobs: Sequence[JobRecord], ended: Mapping[str, int]) -> dict[str, int]:
    """Jobs per state: the unfinished ``jobs`` counted here, the finished as ``ended``
    counted them (their records are never read: most of a store is history)."""
    states: dict[str, int] = {state: n for state, n in ended.items() if n}
    for job in jobs:
        states[job.state.value] = states.get(job.state.value, 0) + 1
    return states


def _queue(jobs: Sequence[JobRecord], now_s: float) -> list[QueueRow]:
    """Queued jobs by priority class (the class's priority is its first job's), highest
    priority first; the oldest wait to a tenth of a second."""
    rows: dict[str, QueueRow] = {}
    for job in jobs:
        if job.state not in QUEUED:
            continue
        klass = job.spec.get("spec", {}).get("priority_class")
        row = rows.setdefault(
            klass or "",
            {"priority_class": klass, "priority": job.priority, "queued": 0, "oldest_wait_s": 0.0},
        )
        row["queued"] += 1
        row["oldest_wait_s"] = max(row["oldest_wait_s"], round(now_s - job.submitted_at_s, 1))
    return sorted(rows.values(), key=lambda q: -int(q["priority"]))


def _event(event: Event) -> StatusEvent:
    data = event_data(event)
    return {
        "occurred_at": data["occurred_at"],
        "kind": data["kind"],
        "message": data["message"],
        "job_id": event.job_id,
    }
