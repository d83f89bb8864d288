"""A cycle's store writes go in batches (``Store.write_all``): a cycle placing many jobs
commits a few times, not a few times a job, and a batch never builds on a version another
writer reached meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from meshctl.controller.deciding.decide import Transition
from meshctl.state import JobRecord, JobState, MemoryStore, Record, StoreError, Write

from .test_loop import Clock, FakePool, controller, queue

pytestmark = pytest.mark.unit


class Counting(MemoryStore):
    """A store that counts its write transactions (and can be raced: ``cancel_first``)."""

    def __init__(self) -> None:
        super().__init__()
        self.transactions = 0
        self.cancel_first: str | None = None  # a job cancelled just before the next batch
        self._batching = False

    def write_all(self, writes: Sequence[Write]) -> list[Record | StoreError]:
        if self.cancel_first is not None:
            found = self.get(JobRecord, self.cancel_first)
            assert found is not None
            self.update(replace(found, state=JobState.CANCELLED), expected_version=found.version)
            self.cancel_first = None
        self.transactions += 1
        self._batching = True
        try:
            return super().write_all(writes)
        finally:
            self._batching = False

    def create(self, record: Record, **kwargs: object) -> Record:  # type: ignore[override]
        self.transactions += not self._batching
        return super().create(record, **kwargs)  # type: ignore[arg-type]

    def update(self, record: Record, **kwargs: object) -> Record:  # type: ignore[override]
        self.transactions += not self._batching
        return super().update(record, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("jobs", [1, 2, 8])
def test_dispatching_any_number_of_jobs_commits_the_same_few_times(jobs: int) -> None:
    store, pool, clock = Counting(), FakePool(), Clock()
    for i in range(jobs):
        queue(store, f"j{i}", gpus=1)
    loop = controller(store, pool, clock)
    store.transactions = 0
    report = loop.cycle()
    assert report.dispatched == jobs
    assert len(pool.submitted) == jobs
    # attempts, admitted, pending, dispatched; then the pool's record and its 2 nodes' (new)
    assert store.transactions == 4 + 3
    states = {r.state for r in store.list(JobRecord)}
    assert states == {JobState.DISPATCHED}


def test_two_moves_of_one_job_never_build_on_a_version_another_writer_reached() -> None:
    store = Counting()
    record = queue(store, "a")
    loop = controller(store, FakePool(), Clock())
    store.cancel_first = record.id  # a cancel lands between the read and the first write
    made = loop.applier.writes.transitions(
        [
            Transition(record.id, JobState.ADMITTED, "placed", "onprem"),
            Transition(record.id, JobState.DISPATCHED, "submitted"),
        ],
        2_000_000_000.0,
    )
    assert made == [False, False]
    found = store.get(JobRecord, record.id)
    assert found is not None
    assert found.state is JobState.CANCELLED
