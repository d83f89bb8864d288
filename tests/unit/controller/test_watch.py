"""The watch wakes the loop when a pool changes between cycles, once per cycle, and when a
running train job asks for replacement nodes, once per ask.

Over the in-memory pool of ``test_loop`` (a stand-in for Ray's Jobs API) with the three calls
the watch makes of a Ray pool client: one job's status, every job's, the nodes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from meshctl.controller.watch import Watch
from meshctl.pools.observed import ObservedJob, ObservedNode
from meshctl.state import MemoryStore
from meshctl.state.records import AttemptState
from meshctl.workload.train import nominations
from meshctl.workload.train.nominations import Ask
from tests.builders import observed_node

from .test_loop import Clock, FakePool, controller, queue

pytestmark = pytest.mark.unit


@dataclass
class WatchedPool(FakePool):
    dead: tuple[str, ...] = ()
    failing: bool = False
    asked: int = 0

    def observe(self):  # type: ignore[no-untyped-def]
        seen = super().observe()
        return replace(seen, nodes=tuple(self.nodes()))

    def job(self, submission_id: str) -> ObservedJob | None:
        self.asked += 1
        if self.failing:
            raise OSError("dashboard gone")
        return self.jobs.get(submission_id)

    def nodes(self) -> list[ObservedNode]:
        return [observed_node(n, ray_node_id=n, alive=n not in self.dead) for n in ("n1", "n2")]

    def running(self) -> None:
        for sid, job in self.jobs.items():
            self.jobs[sid] = replace(job, status="RUNNING")


class Ticks:
    """A monotonic clock the test moves: every check is a full one unless told otherwise."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup() -> tuple[WatchedPool, threading.Event, Watch, Ticks, object]:
    store, pool = MemoryStore(), WatchedPool()
    queue(store)
    loop = controller(store, pool, Clock())
    loop.cycle()  # dispatched: Ray says PENDING
    wake, ticks = threading.Event(), Ticks()
    watch = Watch(lambda: loop.seen, lambda: loop.clients, wake, clock=ticks)
    return pool, wake, watch, ticks, loop


CHANGES = [
    pytest.param(WatchedPool.running, "meshctl-", id="a-dispatched-job-runs"),
    pytest.param(lambda p: p.finish("FAILED"), "meshctl-", id="a-dispatched-job-fails"),
    pytest.param(lambda p: setattr(p, "dead", ("n2",)), "onprem: nodes changed", id="node-died"),
]


@pytest.mark.parametrize(("change", "said"), CHANGES)
def test_a_change_wakes_the_loop_once_per_cycle(change: object, said: str) -> None:
    pool, wake, watch, ticks, loop = setup()

    def check() -> str | None:
        ticks.now += 1.0  # every check a full one
        return watch.check()

    assert check() is None
    assert not wake.is_set()
    change(pool)  # type: ignore[operator]
    assert said in (check() or "")
    assert wake.is_set()
    wake.clear()
    assert check() is None
    assert not wake.is_set()
    loop.cycle()  # type: ignore[attr-defined]
    assert check() is None
    assert not wake.is_set()


def test_the_pools_are_asked_in_full_only_every_full_s() -> None:
    pool, _wake, watch, ticks, _ = setup()
    watch.check()  # full: next one at 0.5 s
    pool.dead = ("n2",)
    ticks.now = 0.4
    assert watch.check() is None
    ticks.now = 0.5
    assert watch.check() == "onprem: nodes changed"


def test_no_full_check_comes_within_full_s_of_a_cycle_but_submissions_in_flux_are_asked() -> None:
    """A cycle observed the pools itself: the watch's own full observation waits full_s
    from it; a dispatched job's status is asked at every check."""
    pool, _wake, watch, ticks, loop = setup()
    ticks.now = 10.0
    assert watch.check() is None  # a new cycle's world: the next full check at 10.5
    pool.dead = ("n2",)
    ticks.now = 10.4
    assert watch.check() is None
    asked = pool.asked
    pool.running()
    assert "meshctl-" in (watch.check() or "")  # in flux: asked at once
    assert pool.asked == asked + 1
    loop.cycle()  # type: ignore[attr-defined]
    ticks.now = 10.6  # past 10.5, but within full_s of this newer cycle
    pool.dead = ()
    assert watch.check() is None


def test_a_few_submissions_in_flux_are_asked_about_quickly_many_at_the_usual_pace() -> None:
    """Between ``meshctl submit`` and its job running the watch asks every ``flux_s``; once
    it woke the loop, with nothing in flux, or with more than ``FEW_IN_FLUX`` in flux (a burst:
    each is a request to the dashboard), every ``period_s``."""
    from meshctl.controller.watch import FEW_IN_FLUX

    pool, _wake, watch, _ticks, loop = setup()
    assert watch.pause() == watch.flux_s < watch.period_s  # the one dispatched job
    pool.running()
    assert watch.check() is not None
    assert watch.pause() == watch.period_s  # woken: nothing to ask until the next cycle
    loop.cycle()  # type: ignore[attr-defined]
    assert watch.pause() == watch.period_s  # seen running: nothing in flux
    for n in range(FEW_IN_FLUX + 1):
        queue(loop.store, f"burst-{n}")  # type: ignore[attr-defined]
    loop.cycle()  # type: ignore[attr-defined]
    assert len(loop.seen[1]) == FEW_IN_FLUX + 1  # type: ignore[attr-defined]
    assert watch.pause() == watch.period_s


def test_a_failing_pool_wakes_nothing() -> None:
    pool, wake, watch, _, _ = setup()
    pool.failing = True
    pool.running()
    assert watch.check() is None
    assert not wake.is_set()
    assert pool.asked == 1


def test_the_loop_cycles_as_soon_as_ray_reports_the_job_running() -> None:
    """An interval of a minute, and the job's start seen within the deadline: the watch
    woke the loop (polling with a generous deadline, never a sleep)."""
    store, pool = MemoryStore(), WatchedPool()
    record = queue(store)
    loop = controller(store, pool, Clock())
    stop, wake = threading.Event(), threading.Event()
    runner = threading.Thread(target=loop.run, args=(60.0, stop, wake), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while not pool.jobs and time.monotonic() < deadline:  # the first cycle dispatched it
            wake.wait(0.01)
        pool.running()
        while (found := store.get(type(record), record.id)) is not None and (
            found.state != "running" and time.monotonic() < deadline
        ):
            stop.wait(0.01)
        assert found is not None
        assert found.state == "running"
        assert loop.cycles >= 2
    finally:
        stop.set()
        wake.set()
        runner.join(30)


def with_storage(loop: object, uri: str) -> None:
    """The last cycle's world as if its job were a train job running with its checkpoints at
    ``uri``, its nodes replaceable inside the attempt."""
    world, flux = loop.seen  # type: ignore[attr-defined]
    views = tuple(
        replace(v, attempt=replace(
            v.attempt, state=AttemptState.RUNNING,
            detail=replace(v.attempt.detail, checkpoint_uri=uri, replaceable=True),
        ))
        for v in world.jobs
    )  # fmt: skip
    loop.seen = (replace(world, jobs=views), flux)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "scheme", [pytest.param("file://", id="file-uri"), pytest.param("", id="plain-path")]
)
def test_a_running_train_jobs_ask_for_nodes_wakes_the_loop_once(
    tmp_path: Path, scheme: str
) -> None:
    """The run asks as soon as Ray Train sees its node dead and waits for the nomination:
    the watch wakes the loop at its next check, not at the next interval; once per ask."""
    pool, wake, watch, ticks, loop = setup()
    pool.running()
    loop.cycle()  # type: ignore[attr-defined]
    with_storage(loop, f"{scheme}{tmp_path}")
    [view] = loop.seen[0].jobs  # type: ignore[attr-defined]
    assert view.attempt is not None
    ask = Ask(view.attempt.number, 1, 1.0, ("lost",), ("lost",), 1)
    assert watch.check() is None  # nothing asked: no folder yet
    nominations.ask(f"{scheme}{tmp_path}", None, ask)
    ticks.now = 0.1  # no full check due: the ask alone wakes
    assert "asks for nodes" in (watch.check() or "")
    assert wake.is_set()
    wake.clear()
    with_storage(loop, f"{scheme}{tmp_path}")  # a new cycle's world, the same ask
    assert watch.check() is None
    nominations.ask(f"{scheme}{tmp_path}", None, replace(ask, n=2))  # a second restart
    assert "asks for nodes" in (watch.check() or "")


def test_asks_in_remote_storage_are_left_to_the_cycle(tmp_path: Path) -> None:
    pool, wake, watch, _ticks, loop = setup()
    pool.running()
    loop.cycle()  # type: ignore[attr-defined]
    with_storage(loop, "s3://bucket/run")  # never listed: nothing reached
    assert watch.check() is None
    assert not wake.is_set()


def test_an_attempt_whose_nodes_are_not_replaced_inside_it_is_not_listed(tmp_path: Path) -> None:
    """Only a run that can take a stand-in asks; the others' folders are never listed."""
    pool, wake, watch, _ticks, loop = setup()
    pool.running()
    loop.cycle()  # type: ignore[attr-defined]
    with_storage(loop, str(tmp_path))
    world, flux = loop.seen  # type: ignore[attr-defined]
    [view] = world.jobs
    assert view.attempt is not None
    fixed = replace(view.attempt, detail=replace(view.attempt.detail, replaceable=False))
    loop.seen = (replace(world, jobs=(replace(view, attempt=fixed),)), flux)  # type: ignore[attr-defined]
    nominations.ask(str(tmp_path), None, Ask(fixed.number, 1, 1.0, ("lost",), ("lost",), 1))
    assert watch.check() is None
    assert not wake.is_set()
