"""What a cycle keeps for the next: the records the controller wrote (not read back), and the
running jobs as the scheduler sees them (worked out again only when their records change).

Kept results must be the ones a fresh cycle would work out: each case compares with a
controller or a world that keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from meshctl.controller.deciding.nodes import running
from meshctl.controller.deciding.world import Derived, JobView, TrainProgress, World
from meshctl.controller.history import History
from meshctl.lifecycle import Estimator
from meshctl.state import AttemptDetail, AttemptRecord, Held, JobRecord, JobState, SqliteStore
from meshctl.state.store import Write

from .test_decide import NOW, attempt, job, pool
from .test_history import Counting

pytestmark = pytest.mark.unit


def _running_job(tmp_path: Path) -> tuple[SqliteStore, JobRecord, AttemptRecord]:
    store = SqliteStore(tmp_path / "state.db")
    record = JobRecord("j1", "a", "ml", JobState.RUNNING, 0, {}, "onprem", 1.0, 1.0)
    detail = AttemptDetail(allocations=(Held("n1", (0,), 1.0),))
    tried = AttemptRecord("j1-1", "j1", 1, "onprem", "s", "running", 5.0, None, "", detail)
    store.create_all([record, tried])
    return store, record, tried


def _read_once(store: SqliteStore) -> tuple[Counting, History, JobRecord]:
    """A history that has read the store once, what it reads counted; the job as stored."""
    counting = Counting(store)
    history = History(counting)  # type: ignore[arg-type]
    history.live()
    stored = store.get(JobRecord, "j1")
    assert stored is not None
    return counting, history, stored


def test_what_the_controller_wrote_is_not_read_back(tmp_path: Path) -> None:
    store, _, _ = _running_job(tmp_path)
    with store:
        counting, history, stored = _read_once(store)
        moved = replace(stored, state=JobState.PREEMPTED)
        history.wrote(store.write_all([Write(moved, stored.version)]))
        counting.read.clear()
        records, attempts = history.live()
        assert records == store.list(JobRecord, id=["j1"])  # as the store has it now
        assert records[0].state is JobState.PREEMPTED
        assert [a.id for a in attempts] == ["j1-1"]
        assert counting.read == {}  # nothing decoded again


def test_what_another_wrote_is_read(tmp_path: Path) -> None:
    store, _, _ = _running_job(tmp_path)
    with store:
        counting, history, stored = _read_once(store)
        history.wrote([store.update(replace(stored, team="b"), expected_version=1)])
        store.update(replace(stored, team="c"), expected_version=2)  # someone else, later
        counting.read.clear()
        records, _ = history.live()
        assert [r.team for r in records] == ["c"]
        assert counting.read == {"list JobRecord": 1}


def _view() -> JobView:
    """A running job whose runtime was recorded when it was placed."""
    return job("j", state=JobState.RUNNING, attempt=attempt("j", runtime_s=600.0))


def test_a_running_job_is_kept_while_its_records_are_the_same_objects() -> None:
    view, derived = _view(), Derived()
    world = World(NOW, {"onprem": pool()}, (view,), derived=derived)
    first = running(view, world, Estimator())
    derived.turn()
    assert running(view, world, Estimator()) is first
    fresh = World(NOW, {"onprem": pool()}, (view,))  # a world that keeps nothing
    assert running(view, fresh, Estimator()) == first


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda v: replace(v, attempt=attempt("j", nodes=("n2",))), id="attempt"),
        pytest.param(lambda v: replace(v, record=replace(v.record, priority=5)), id="record"),
    ],
)
def test_a_running_job_whose_records_changed_is_worked_out_again(
    changed: Callable[[JobView], JobView],
) -> None:
    view, derived = _view(), Derived()
    world = World(NOW, {"onprem": pool()}, (view,), derived=derived)
    first = running(view, world, Estimator())
    derived.turn()
    moved = changed(view)
    again = running(moved, world, Estimator())
    assert again is not first
    assert again == running(moved, World(NOW, {"onprem": pool()}, (moved,)), Estimator())


def test_a_new_checkpoint_is_seen() -> None:
    view, derived = _view(), Derived()
    first = running(view, World(NOW, {"onprem": pool()}, (view,), derived=derived), Estimator())
    derived.turn()
    seen = {"j": TrainProgress(1, 3, 30, NOW - 1, 30, checkpoint_at_s=NOW - 2)}
    world = World(NOW, {"onprem": pool()}, (view,), progress=seen, derived=derived)
    assert first.last_checkpoint_at_s is None
    assert running(view, world, Estimator()).last_checkpoint_at_s == NOW - 2


def test_a_job_not_asked_for_is_forgotten_after_a_cycle() -> None:
    view, derived = _view(), Derived()
    world = World(NOW, {"onprem": pool()}, (view,), derived=derived)
    first = running(view, world, Estimator())
    derived.turn()
    derived.turn()  # a cycle that did not ask for it
    again = running(view, world, Estimator())
    assert again is not first
    assert again == first
