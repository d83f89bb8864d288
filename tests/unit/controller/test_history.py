"""A cycle reads unfinished work only: 100,000 finished jobs in the store change nothing it reads.

The store is a real SqliteStore; the pool the in-memory stand-in of ``test_loop``. A counting
wrapper tallies the records each store call returns: the steady cycle reads as many over a
store of 100,000 finished jobs as over one with no history, and what it must know of that
history (when nodes were last busy, the runtimes estimates learn from) it read once, at start.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from meshctl.controller.history import UNFINISHED, History
from meshctl.controller.loop import Controller
from meshctl.state import (
    AttemptDetail,
    AttemptRecord,
    Held,
    JobRecord,
    JobState,
    SqliteStore,
    Store,
)

from .test_loop import Clock, FakePool, controller, queue

pytestmark = pytest.mark.unit

HISTORY = 100_000
ENDED_AT = 1_700_000_500.0


@dataclass
class Counting:
    """A store that counts the records its reads return, per method."""

    store: Store
    read: dict[str, int] = field(default_factory=dict)

    def _count(self, name: str, found: Any) -> Any:
        n = len(found) if isinstance(found, list) else int(found is not None)
        self.read[name] = self.read.get(name, 0) + n
        return found

    def list(self, kind: type[Any], **kwargs: Any) -> Any:
        return self._count(f"list {kind.__name__}", self.store.list(kind, **kwargs))

    def get(self, kind: type[Any], key: str) -> Any:
        return self._count(f"get {kind.__name__}", self.store.get(kind, key))

    def events(self, **kwargs: Any) -> Any:
        return self._count("events", self.store.events(**kwargs))

    def decisions(self, **kwargs: Any) -> Any:
        return self._count("decisions", self.store.decisions(**kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def finished(n: int) -> list[Any]:
    """``n`` jobs that succeeded, each with the attempt that ran it on node n1 or n2."""
    made: list[Any] = []
    for i in range(n):
        job_id = f"old{i:06d}"
        made.append(
            JobRecord(job_id, "old", "ml", JobState.SUCCEEDED, 0, {}, "onprem", 1.0, ENDED_AT)
        )
        detail = AttemptDetail(allocations=(Held(f"n{1 + i % 2}", (0,), 1.0),))
        ends = ENDED_AT - 100 + i / n  # the latest on n2 ends last
        made.append(
            AttemptRecord(
                f"{job_id}-1", job_id, 1, "onprem", f"s-{job_id}", "succeeded", ends - 60,
                ends, "", detail,
            )
        )  # fmt: skip
    return made


@pytest.fixture(scope="module")
def long_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state file holding 100,000 finished jobs (built once for the module, copied per test)."""
    path = tmp_path_factory.mktemp("history") / "state.db"
    with SqliteStore(path) as store:
        store.create_all(finished(HISTORY))
    return path


def store_with(history: Path | None, tmp_path: Path) -> SqliteStore:
    path = tmp_path / "state.db"
    if history is not None:
        with sqlite3.connect(history) as source, sqlite3.connect(path) as copy:
            source.backup(copy)
    return SqliteStore(path)


def steady_reads(store: Store) -> dict[str, int]:
    """Three jobs queued, one finished and one running: what the fourth cycle reads."""
    pool, clock = FakePool(), Clock()
    done, _ = queue(store, "done"), queue(store, "running")  # type: ignore[arg-type]
    queue(store, "big", gpus=16)  # type: ignore[arg-type]  # never fits: stays queued
    counting = Counting(store)
    loop = controller(counting, pool, clock)  # type: ignore[arg-type]
    loop.cycle()
    pool.jobs[f"meshctl-{done.id}-1"] = replace(
        pool.jobs[f"meshctl-{done.id}-1"], status="SUCCEEDED"
    )
    for _ in range(3):
        counting.read.clear()
        loop.cycle()
    assert store.get(JobRecord, done.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    return counting.read


def test_a_cycle_reads_the_same_over_100k_finished_jobs_as_over_none(
    long_history: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "long").mkdir()
    with (
        store_with(None, tmp_path / "empty") as empty,
        store_with(long_history, tmp_path / "long") as long,
    ):
        assert len(long.list(JobRecord, state=JobState.SUCCEEDED)) == HISTORY
        reads_empty, reads_long = steady_reads(empty), steady_reads(long)
    assert reads_long == reads_empty
    assert sum(reads_long.values()) < 20


def test_what_history_teaches_is_read_once_at_start(long_history: Path, tmp_path: Path) -> None:
    with store_with(long_history, tmp_path) as store:
        loop: Controller = controller(store, FakePool(), Clock())  # type: ignore[arg-type]
        world = loop.world(ENDED_AT + 10)
        assert world.node_busy_s == {
            "onprem/n1": pytest.approx(ENDED_AT - 100 + (HISTORY - 2) / HISTORY),
            "onprem/n2": pytest.approx(ENDED_AT - 100 + (HISTORY - 1) / HISTORY),
        }
        assert loop.estimator is not None
        assert loop.estimator.seconds("ml", "old", None) == pytest.approx(60.0)


def test_a_node_stays_busy_until_its_last_attempt_ends_after_its_job_is_gone(
    tmp_path: Path,
) -> None:
    """An attempt active in one cycle and gone with its finished job by the next still
    counts: its end is read once, by key."""
    with SqliteStore(tmp_path / "state.db") as store:
        history = History(store)
        job = JobRecord("j1", "a", "ml", JobState.RUNNING, 0, {}, "onprem", 1.0, 1.0)
        detail = AttemptDetail(allocations=(Held("n1", (0,), 1.0),))
        running = AttemptRecord("j1-1", "j1", 1, "onprem", "s", "running", 5.0, None, "", detail)
        store.create_all([job, running])
        records, attempts = history.live()
        assert [r.id for r in records] == ["j1"]
        assert history.node_busy(attempts, 10.0) == {"onprem/n1": 10.0}
        stored = store.get(AttemptRecord, "j1-1")
        assert stored is not None
        store.update(replace(stored, state="succeeded", ended_at_s=12.0), expected_version=1)
        store.update(replace(job, state=JobState.SUCCEEDED), expected_version=1)
        records, attempts = history.live()
        assert (records, attempts) == ([], [])
        assert history.node_busy(attempts, 20.0) == {"onprem/n1": 12.0}


def test_a_finished_job_whose_attempt_still_runs_is_read(tmp_path: Path) -> None:
    """A job cancelled while Ray still runs it stays in view until its attempt ends."""
    with SqliteStore(tmp_path / "state.db") as store:
        cancelled = JobRecord("j1", "a", "ml", JobState.CANCELLED, 0, {}, "onprem", 1.0, 1.0)
        done = replace(cancelled, id="j2", state=JobState.SUCCEEDED)
        store.create_all(
            [
                cancelled,
                done,
                AttemptRecord("j1-1", "j1", 1, "onprem", "s1", "running", 5.0, None),
                AttemptRecord("j2-1", "j2", 1, "onprem", "s2", "succeeded", 5.0, 6.0),
            ]
        )
        records, attempts = History(store).live()
    assert [r.id for r in records] == ["j1"]
    assert [a.id for a in attempts] == ["j1-1"]
    assert frozenset(JobState) - {"succeeded", "failed", "cancelled"} == UNFINISHED
