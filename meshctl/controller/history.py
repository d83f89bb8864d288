"""What a cycle reads of the store: unfinished work only, whatever the length of history.

Every cycle reads the jobs not yet finished, the attempts still active, and the attempts of
those jobs, each through an index (``jobs.state``, ``attempts.state``, ``attempts.job_id``):
a store holding 100,000 finished jobs costs a cycle what an empty one does. Of the unfinished
jobs only the versions are read; a record is read again when its version moved. Two things the
cycle needs do look back, and are kept here instead of read again:

- when each node was last busy (idle teardown counts from it): read from every attempt once,
  when the controller starts, then brought forward with the attempts that end;
- the runs runtime estimates learn from (``past_runs``): read once, when the controller starts;
  the loop adds each success as it happens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from meshctl.controller.states import FINISHED
from meshctl.controller.world import latest_attempts, node_busy, past_runs
from meshctl.state.records import ACTIVE_ATTEMPT, AttemptRecord, JobRecord, JobState
from meshctl.state.store import Store

UNFINISHED = frozenset(JobState) - FINISHED


class History:
    """The controller's reads of jobs and attempts (``Controller.world``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._busy: dict[str, float] | None = None  # ended attempts' nodes -> latest end
        self._active: set[str] = set()  # attempts active as of the last cycle
        self._jobs: dict[str, JobRecord] = {}  # the unfinished jobs as of the last cycle

    def live(self) -> tuple[list[JobRecord], list[AttemptRecord]]:
        """The unfinished jobs, plus finished ones whose attempt still runs (a cancelled job
        until Ray stops it), and every attempt of those jobs."""
        records = self._unfinished()
        active = self.store.list(AttemptRecord, state=ACTIVE_ATTEMPT)
        known = {r.id for r in records}
        for job_id in sorted({a.job_id for a in active} - known):
            found = self.store.get(JobRecord, job_id)
            if found is not None:
                records.append(found)
        records.sort(key=lambda r: r.id)
        return records, self.store.list(AttemptRecord, job_id=[r.id for r in records])

    def _unfinished(self) -> list[JobRecord]:
        """The unfinished jobs: their versions read, and only the records that changed since
        the last cycle (a backlog of thousands waiting is not decoded again each second)."""
        versions = self.store.versions(JobRecord, state=UNFINISHED)
        kept = self._jobs
        stale = [k for k, v in versions.items() if k not in kept or kept[k].version != v]
        if len(stale) > len(versions) // 2:
            fresh = self.store.list(JobRecord, state=UNFINISHED)
        else:  # changed since: a job that finished meanwhile comes as it is now
            fresh = self.store.list(JobRecord, id=stale) if stale else []
        found = {k: kept[k] for k in versions if k not in stale} | {r.id: r for r in fresh}
        self._jobs = {k: r for k, r in found.items() if r.state in UNFINISHED}
        return list(self._jobs.values())

    def node_busy(self, attempts: Iterable[AttemptRecord], now_s: float) -> dict[str, float]:
        """``world.node_busy``: when a job last held each node, this cycle's attempts and
        every attempt before them."""
        attempts = list(attempts)
        if self._busy is None:  # once: what the store recorded before this controller began
            self._busy = {}
            _latest(self._busy, node_busy(self.store.list(AttemptRecord), now_s))
        ended = [a for a in attempts if a.state not in ACTIVE_ATTEMPT]
        current = {a.id for a in attempts}
        for gone in sorted(self._active - current):  # ended with their job since last cycle
            found = self.store.get(AttemptRecord, gone)
            ended += [found] if found is not None else []
        _latest(self._busy, node_busy(ended, now_s))
        self._active = {a.id for a in attempts if a.state in ACTIVE_ATTEMPT}
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
