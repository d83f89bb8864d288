"""A step's writes of jobs and attempts, in batches: each round one transaction, each key at
most once a round, each write made from what the one before it on that key stored. A write
that loses (the record changed meanwhile, a cancel; or gone) is left to the next cycle.
Every transition is held to the job-state table (``states.ALLOWED``): one outside it is
logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from meshctl.controller.deciding.decide import AttemptChange, Transition
from meshctl.controller.deciding.states import ALLOWED
from meshctl.controller.history import History
from meshctl.state.kinds import key_of
from meshctl.state.records import FINISHED, AttemptRecord, Event, JobRecord
from meshctl.state.store import ConflictError, NotFoundError, R, Store, Write

log = logging.getLogger("meshctl.controller")


class JobWrites:
    """Jobs moved and attempts changed in the store, batched; what is written is learnt by
    the history (``History.wrote``)."""

    def __init__(self, store: Store, history: History) -> None:
        self.store, self.history = store, history

    def transition(self, t: Transition, now: float) -> bool:
        return self.transitions([t], now)[0]

    def transitions(self, transitions: Sequence[Transition], now: float) -> list[bool]:
        """Jobs moved to their new states, each with its event, in one transaction; per
        transition, whether it was made (not: the job is gone, finished, already there, or
        someone else, a cancel, changed it first: the next cycle sees their change)."""
        jobs: dict[str, JobRecord | None] = dict(
            self.read(JobRecord, [t.job_id for t in transitions])
        )
        made = [False] * len(transitions)
        for batch in _rounds([t.job_id for t in transitions]):
            moves = {}
            for i in batch:
                t, record = transitions[i], jobs.get(transitions[i].job_id)
                moved = _transitioned(record, t, now) if record is not None else None
                if moved is not None:
                    moves[i] = Write(moved[0], moved[0].version, [moved[1]])
            stored = self.store.write_all(list(moves.values()))
            self.history.wrote(stored)
            for i, outcome in zip(moves, stored, strict=True):
                # lost: the job is left alone until the next cycle reads it again
                jobs[transitions[i].job_id] = None if lost(outcome) else cast(JobRecord, outcome)
                made[i] = not lost(outcome)
        return made

    def read(self, kind: type[R], keys: Sequence[str]) -> dict[str, R]:
        """The stored records of these keys (one read), by key."""
        if not keys:
            return {}
        found = self.store.list(kind, id=sorted(set(keys)))  # jobs and attempts: keyed by id
        return {key_of(r): r for r in found}

    def attempt(self, change: AttemptChange, now: float) -> None:
        self.attempts([change], now)

    def attempts(self, changes: Sequence[AttemptChange], now: float) -> None:
        """Attempts changed, in one transaction; one changed meanwhile (a cancel) or gone is
        left to the next cycle."""
        found = self.read(AttemptRecord, [c.attempt_id for c in changes])
        attempts: dict[str, AttemptRecord | None] = dict(found)
        for batch in _rounds([c.attempt_id for c in changes]):
            writes = []
            for i in batch:
                attempt = attempts.get(changes[i].attempt_id)
                updated = _changed(attempt, changes[i]) if attempt is not None else None
                if updated is not None:
                    writes.append(Write(updated, updated.version))
            answers = self.store.write_all(writes)
            self.history.wrote(answers)
            for write, stored in zip(writes, answers, strict=True):
                key = key_of(write.record)
                attempts[key] = None if lost(stored) else cast(AttemptRecord, stored)


def _rounds(keys: Sequence[str]) -> list[list[int]]:
    """The writes of a step in rounds (their indexes), each key at most once a round, in
    order: a write is made from what the one before it on that key stored, never from a
    version another writer may have reached meanwhile."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}  # key -> writes of it so far
    for i, key in enumerate(keys):
        n = seen[key] = seen.get(key, -1) + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(i)
    return rounds


def lost(outcome: object) -> bool:
    """Whether a write of a batch lost (``Store.write_all``: its error, not its record)."""
    return isinstance(outcome, ConflictError | NotFoundError)


def _transitioned(record: JobRecord, t: Transition, now: float) -> tuple[JobRecord, Event] | None:
    """The job's record moved to ``t.to``, with its event; None when it does not move (there
    already, or finished: final, a cancel included). A move outside the job-state table
    (``states.ALLOWED``, the rule) is logged and made."""
    if record.state is t.to or record.state in FINISHED:
        return None
    if (record.state, t.to) not in ALLOWED:
        log.error("job %s: %s -> %s is not in the job-state table", t.job_id,
                  record.state.value, t.to.value)  # fmt: skip
    changed = replace(record, state=t.to, pool=t.pool or record.pool, updated_at_s=now)
    data = {"from": record.state.value, "to": t.to.value, "pool": changed.pool}
    return changed, Event(now, f"job.{t.to.value}", t.job_id, t.reason, data)


def _changed(attempt: AttemptRecord, change: AttemptChange) -> AttemptRecord | None:
    """The attempt with the change made, or None when it changes nothing. A grace, the job
    it is freed for and its start and end, once set, never move."""
    detail = attempt.detail
    if change.stop_at_s is not None and detail.stop_at_s is None:
        detail = replace(detail, stop_at_s=change.stop_at_s)
    if change.for_job is not None and detail.for_job is None:
        detail = replace(detail, for_job=change.for_job)
    if change.lent or change.grows_onto:
        detail = replace(detail, lent=change.lent, grows_onto=change.grows_onto)
    if change.failures is not None:
        detail = replace(detail, failures=change.failures)
    updated = replace(
        attempt,
        state=change.state or attempt.state,
        reason=change.reason or attempt.reason,
        started_at_s=attempt.started_at_s or change.started_at_s,
        ended_at_s=attempt.ended_at_s or change.ended_at_s,
        detail=detail,
    )
    return None if updated == attempt else updated
