"""What ``meshctl down`` does to the jobs of the pools it stops, in the store.

``down`` stops the embedded clusters and terminates the cloud instances; whatever ran there
stops with them. Without ``--force`` or ``--drain`` it refuses while jobs hold resources there
(``running_on``). When jobs are stopped (``--force``, or a drain that ran out of time with
``--force``), each attempt that was active there ends ``stopped`` with the reason, and each job
that was on its way is ``requeued`` with the same reason: the next ``meshctl up`` runs it again
(a new attempt, which resumes from its checkpoints if it keeps any). ``down`` never fails a
job for its ``max_restarts`` (the operator stopped it, not the job), though the attempt it
stopped is numbered like any other. A job cancelled meanwhile stays cancelled; a finished
job stays finished.

Jobs on ``ray`` pools (clusters meshctl did not start) are not stopped by ``down``: they keep
running, and the next ``up`` follows them again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import TypeVar

from meshctl.controller.deciding.decide import HOLDING
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    AttemptRecord,
    AttemptState,
    Event,
    JobRecord,
    JobState,
    Record,
    latest_attempts,
)
from meshctl.state.store import ConflictError, NotFoundError, Store

FORCED = "stopped by meshctl down --force"
RETRIES = 5  # a CLI writing the same record meanwhile: read it again and retry this often

R = TypeVar("R", bound=Record)


def active_on(store: Store, pools: Collection[str]) -> list[AttemptRecord]:
    """The attempts still active (submitting, pending, running) on these pools."""
    latest = latest_attempts(store.list(AttemptRecord))
    return [a for a in latest.values() if a.pool in pools and a.state in ACTIVE_ATTEMPT]


def running_on(store: Store, pools: Collection[str]) -> list[tuple[JobRecord, AttemptRecord]]:
    """The jobs that hold resources on these pools (admitted to running, or leaving), with
    their active attempt, oldest first."""
    attempts = {a.job_id: a for a in active_on(store, pools)}
    jobs = [j for j in store.list(JobRecord) if j.id in attempts and j.state in HOLDING]
    return [(j, attempts[j.id]) for j in sorted(jobs, key=lambda j: j.submitted_at_s)]


def stopped(store: Store, pools: Collection[str], reason: str, now_s: float) -> list[str]:
    """Record that everything active on these pools was stopped: attempts end ``stopped``,
    jobs on their way are ``requeued``. Returns the ids of the jobs requeued."""
    return ended(store, active_on(store, pools), reason, now_s)


def ended(store: Store, attempts: Iterable[AttemptRecord], reason: str, now_s: float) -> list[str]:
    """``stopped`` for attempts already listed (``active_on``, read once the controller has
    stopped, so no new attempt can start meanwhile): each is read again before it is ended."""
    requeued = []
    for attempt in attempts:
        _end(store, attempt, reason, now_s)
        if _requeue(store, attempt.job_id, attempt.pool, reason, now_s):
            requeued.append(attempt.job_id)
    return requeued


def _end(store: Store, attempt: AttemptRecord, reason: str, now_s: float) -> None:
    def end(current: AttemptRecord) -> tuple[AttemptRecord, list[Event]] | None:
        if current.state not in ACTIVE_ATTEMPT:
            return None  # it ended meanwhile: its own end stands
        stopped = replace(current, state=AttemptState.STOPPED, reason=reason, ended_at_s=now_s)
        return stopped, []

    _rewrite(store, AttemptRecord, attempt.id, end)


def _requeue(store: Store, job_id: str, pool: str, reason: str, now_s: float) -> bool:
    def requeue(record: JobRecord) -> tuple[JobRecord, list[Event]] | None:
        if record.state not in HOLDING:
            return None  # cancelled or finished meanwhile: that stays
        event = Event(
            now_s,
            "job.requeued",
            job_id,
            f"{reason}; it runs again at the next meshctl up",
            {"from": record.state.value, "to": JobState.REQUEUED.value, "pool": pool},
        )
        return replace(record, state=JobState.REQUEUED, updated_at_s=now_s), [event]

    return _rewrite(store, JobRecord, job_id, requeue)


def _rewrite(
    store: Store,
    kind: type[R],
    key: str,
    change: Callable[[R], tuple[R, list[Event]] | None],
) -> bool:
    """Read the record, ``change`` it and write it on the version read; when another writer
    came first, read again and retry. False when it is gone, ``change`` says no (None), or
    every try conflicted."""
    for _ in range(RETRIES):
        current = store.get(kind, key)
        changed = change(current) if current is not None else None
        if current is None or changed is None:
            return False
        record, events = changed
        try:
            store.update(record, expected_version=current.version, events=events)
            return True
        except ConflictError:
            continue
        except NotFoundError:
            return False
    return False
