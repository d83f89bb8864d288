"""What a cycle reads of the store: unfinished work only, whatever the length of history.

Every cycle reads the jobs not yet finished, the attempts still active, and the attempts of
those jobs, each through an index (``jobs.state``, ``attempts.state``, ``attempts.job_id``):
a store holding 1,000,000 finished jobs costs a cycle what an empty one does. Of each only
the versions are read (``Kept``); a record is read again when its version moved, so a
cycle over 100,000 running and waiting jobs decodes the few that changed, not all of them.
The nodes' and the loans' records are kept so too. Two things the
cycle needs do look back, and are kept here instead of read again:

- when each node was last busy (idle teardown counts from it): read from every attempt once,
  when the controller starts, then brought forward with the attempts that end;
- the runs runtime estimates learn from (``past_runs``): read once, when the controller starts;
  the loop adds each success as it happens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic, cast

from meshctl.controller.deciding.world import node_busy, past_runs
from meshctl.state.kinds import Filter, key_of
from meshctl.state.records import (
    ACTIVE_ATTEMPT,
    FINISHED,
    AttemptRecord,
    JobRecord,
    JobState,
    LoanRecord,
    NodeRecord,
    Record,
    latest_attempts,
)
from meshctl.state.store import R, Store

UNFINISHED = frozenset(JobState) - FINISHED


class Kept(Generic[R]):
    """Records of one kind a cycle reads each time, kept between cycles: of those a filter
    finds only the versions are read, and the records whose version moved (or new ones)."""

    def __init__(self, store: Store, kind: type[R]) -> None:
        self.store, self.kind = store, kind
        self._kept: dict[str, R] = {}

    def read(self, *, prune: bool = True, **filters: Filter) -> dict[str, R]:
        """The records the filters find now, by key (ordered by key); ``prune``: from now on
        only these are kept."""
        versions = self.store.versions(cast("type[Record]", self.kind), **filters)
        kept = self._kept
        stale = [k for k, v in versions.items() if k not in kept or kept[k].version != v]
        fresh = {key_of(r): r for r in self.store.list(self.kind, id=stale)} if stale else {}
        # a record gone between the two reads is left out
        found = {k: fresh.get(k) or kept[k] for k in versions if k in fresh or k in kept}
        self._kept = found if prune else kept | fresh
        return found

    def learn(self, records: Iterable[R]) -> None:
        """Records as the store answered a write of them: a later read finds their versions
        unchanged and does not read them again."""
        self._kept.update((key_of(r), r) for r in records)


class History:
    """The controller's reads of jobs and attempts (``Controller.world``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._busy: dict[str, float] | None = None  # ended attempts' nodes -> latest end
        self._was_active: set[str] = set()  # attempts active as of the last cycle
        self._jobs = Kept(store, JobRecord)  # the unfinished jobs as of the last cycle
        self._attempts = Kept(store, AttemptRecord)  # every attempt of the jobs read
        self._nodes, self._loans = Kept(store, NodeRecord), Kept(store, LoanRecord)

    def live(self) -> tuple[list[JobRecord], list[AttemptRecord]]:
        """The unfinished jobs, plus finished ones whose attempt still runs (a cancelled job
        until Ray stops it), and every attempt of those jobs."""
        # a job that finished between the two reads comes as it is now: left out
        records = [r for r in self._jobs.read(state=UNFINISHED).values() if r.state in UNFINISHED]
        active = self._attempts.read(prune=False, state=ACTIVE_ATTEMPT).values()
        known = {r.id for r in records}
        for job_id in sorted({a.job_id for a in active} - known):
            found = self.store.get(JobRecord, job_id)
            if found is not None:
                records.append(found)
        records.sort(key=lambda r: r.id)
        attempts = self._attempts.read(job_id=[r.id for r in records])
        return records, sorted(attempts.values(), key=lambda a: a.id)

    def wrote(self, stored: Iterable[object]) -> None:
        """Jobs and attempts this controller wrote, as the store answered (a lost write's
        error is passed over): the next cycle does not read them back, so the one after a
        cycle that dispatched thousands of jobs does not decode them all again."""
        stored = list(stored)
        self._jobs.learn(r for r in stored if isinstance(r, JobRecord))
        self._attempts.learn(r for r in stored if isinstance(r, AttemptRecord))

    def nodes(self) -> dict[str, NodeRecord]:
        """Every node's record, by "pool/node"."""
        return self._nodes.read()

    def open_loans(self) -> tuple[LoanRecord, ...]:
        """The loans not yet closed (the closed ones' keys are read, not their records)."""
        return tuple(x for x in self._loans.read().values() if x.closed_at_s is None)

    def node_busy(self, attempts: Iterable[AttemptRecord], now_s: float) -> dict[str, float]:
        """``world.node_busy``: when a job last held each node, this cycle's attempts and
        every attempt before them."""
        attempts = list(attempts)
        if self._busy is None:  # once: what the store recorded before this controller began
            self._busy = {}
            _latest(self._busy, node_busy(self.store.list(AttemptRecord), now_s))
        ended = [a for a in attempts if a.state not in ACTIVE_ATTEMPT]
        current = {a.id for a in attempts}
        for gone in sorted(self._was_active - current):  # ended with their job since last cycle
            found = self.store.get(AttemptRecord, gone)
            ended += [found] if found is not None else []
        _latest(self._busy, node_busy(ended, now_s))
        self._was_active = {a.id for a in attempts if a.state in ACTIVE_ATTEMPT}
        busy = dict(self._busy)
        _latest(busy, node_busy(attempts, now_s))
        return busy

    def past_runs(self) -> list[tuple[str, str, float]]:
        """(team, name, runtime) of every job that succeeded: read once, at start."""
        done = self.store.list(JobRecord, state=JobState.SUCCEEDED)
        tried = self.store.list(AttemptRecord, job_id=[r.id for r in done])
        return past_runs(done, latest_attempts(tried))


def _latest(into: dict[str, float], found: Mapping[str, float]) -> None:
    for key, at in found.items():
        into[key] = max(into.get(key, at), at)
