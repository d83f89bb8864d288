"""Pools that tell their health: the loop over fake clouds whose credentials are refused,
missing or fixed, and pools that are not up; decide fed those observations."""

from __future__ import annotations

from typing import Any

import pytest

from meshctl.clouds.base import Unavailable
from meshctl.clouds.fake import FakeCloud
from meshctl.controller.access import RECHECK_S, CloudAccess
from meshctl.controller.burst import Burst
from meshctl.controller.deciding.decide import Rules, decide
from meshctl.controller.loop import Controller
from meshctl.model import Mesh
from meshctl.model.mesh import Pool
from meshctl.state import JobRecord, MemoryStore, PoolRecord

from .test_decide import MESH, job, world
from .test_loop import Clock, clouds_mesh, queue

pytestmark = pytest.mark.unit


def loop_over(
    clouds: dict[str, FakeCloud], access: CloudAccess | None = None
) -> tuple[MemoryStore, Clock, Controller, Mesh]:
    mesh, catalogs, shipped, _ = clouds_mesh()
    store, clock = MemoryStore(), Clock()
    burst = Burst(store, mesh, catalogs, clouds, None, access=access)  # type: ignore[arg-type]
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst)
    return store, clock, loop, mesh


def summary(store: MemoryStore, job_id: str) -> str:
    return str(store.decisions(job_id=job_id)[-1].explanation["summary"])


def test_a_pool_whose_check_is_refused_is_never_planned_for() -> None:
    """east is the cheaper, but its credentials are refused from the start: the first cycle's
    check finds it out, and the plan launches in west; no launch is tried in east."""
    east, west = FakeCloud(), FakeCloud()
    east.refuse("AuthFailure: AWS was not able to validate the provided access credentials")
    store, _, loop, _ = loop_over({"east": east, "west": west})
    record = queue(store, "spill")
    assert loop.cycle().errors == []
    assert [i.labels["job"] for i in west.list_instances("m")] == [record.id]
    assert summary(store, record.id).endswith("in west")


def test_a_refused_launch_moves_the_next_cycle_to_the_next_pool() -> None:
    east, west = FakeCloud(), FakeCloud()
    store, _, loop, _ = loop_over({"east": east, "west": west})
    loop.cycle()  # both checked and answering, no job yet
    east.refuse("AuthFailure: refused")
    record = queue(store, "spill")
    report = loop.cycle()  # planned for east (its check is not due): the launch is refused
    assert report.errors == ["pool east: AuthFailure: refused"]
    assert loop.burst is not None
    assert loop.burst.blocked(0.0) == frozenset()  # no backoff per node type
    loop.cycle()
    [instance] = west.list_instances("m")
    assert instance.labels["job"] == record.id
    kinds = [(e.kind, e.message) for e in store.events()]
    assert ("pool.unavailable", "east: AuthFailure: refused") in kinds
    pool = store.get(PoolRecord, "east")
    assert pool is not None
    assert (pool.observed["available"], pool.observed["reason"]) == (False, "AuthFailure: refused")


def test_every_pool_refused_says_why_in_the_decision_never_no_node_type_fits() -> None:
    east, west = FakeCloud(), FakeCloud()
    east.refuse("AuthFailure: refused")
    west.refuse("no credentials")
    store, _, loop, _ = loop_over({"east": east, "west": west})
    record = queue(store, "spill")
    loop.cycle()
    text = summary(store, record.id)
    assert text.startswith("pending: east: AuthFailure: refused; west: no credentials")
    assert "no cloud node type fits" not in text
    job = store.get(JobRecord, record.id)
    assert job is not None
    assert job.state.value == "pending"


def test_an_unavailable_pool_is_checked_again_after_a_few_minutes() -> None:
    east, west = FakeCloud(), FakeCloud()
    east.refuse("AuthFailure: refused")
    store, clock, loop, _ = loop_over({"east": east, "west": west})
    loop.cycle()
    east.accept()
    asked = east.calls
    loop.cycle()  # not due yet
    assert east.calls == asked
    clock.now += RECHECK_S
    loop.cycle()
    assert ("pool.available", "east: available again") in [
        (e.kind, e.message) for e in store.events()
    ]
    assert loop.world(clock.now).pool_unavailable == {}


def test_changed_credentials_are_checked_at_once_with_a_provider_built_afresh() -> None:
    built: list[str] = []
    keys = {"east": "revoked", "west": "ok"}

    def build(pool: Pool) -> FakeCloud:
        built.append(pool.name)
        cloud = FakeCloud()
        if keys[pool.name] == "revoked":
            cloud.refuse("AuthFailure: refused")
        return cloud

    mesh, _, _, _ = clouds_mesh()
    clouds: dict[str, Any] = {}
    access = CloudAccess(mesh, clouds, build, credentials=lambda pool: keys[pool.name])
    _, _, loop, _ = loop_over(clouds, access)
    loop.cycle()
    assert loop.world(0.0).pool_unavailable == {"east": "AuthFailure: refused"}
    keys["east"] = "rotated"  # a new key in the credentials file
    loop.cycle()
    assert built == ["east", "west", "east"]
    assert loop.world(0.0).pool_unavailable == {}


def test_a_provider_that_cannot_be_built_is_unavailable_with_its_reason() -> None:
    def build(pool: Pool) -> FakeCloud:
        if pool.name == "east":
            raise Unavailable("no credentials: The config profile (gone) could not be found")
        return FakeCloud()

    mesh, _, _, _ = clouds_mesh()
    clouds: dict[str, Any] = {}
    store, _, loop, _ = loop_over(clouds, CloudAccess(mesh, clouds, build))
    record = queue(store, "spill")
    assert loop.cycle().errors == []  # no launch was tried in east
    assert "in west" in summary(store, record.id)
    assert (
        store.get(PoolRecord, "east")
        .observed["reason"]
        .startswith(  # type: ignore[union-attr]
            "no credentials: The config profile (gone)"
        )
    )


def test_a_local_pool_that_is_not_up_is_unavailable_and_the_job_says_so() -> None:
    store, clock = MemoryStore(), Clock()
    record = queue(store, "j")
    loop = Controller(store, Rules(MESH, {}, None), {}, clock=clock)  # onprem is not up
    loop.cycle()
    assert summary(store, record.id) == "pending: onprem: not up"
    pool = store.get(PoolRecord, "onprem")
    assert pool is not None
    assert (pool.state, pool.observed["available"]) == ("not up", False)


@pytest.mark.parametrize(
    ("why", "status", "reason"),
    [
        pytest.param(None, "placed", "", id="available-placed"),
        pytest.param(
            "dashboard at http://127.0.0.1:8265 does not answer: refused",
            "pending",
            "onprem: dashboard at http://127.0.0.1:8265 does not answer: refused",
            id="unavailable-waits-and-says-why",
        ),
    ],
)
def test_decide_places_nothing_in_an_unavailable_pool(
    why: str | None, status: str, reason: str
) -> None:
    down = {"onprem": why} if why else {}
    step = decide(world(job("a"), pool_unavailable=down), Rules(MESH, {}, None))
    assert [d.job_id for d in step.dispatches] == (["a"] if why is None else [])
    [note] = step.decisions
    assert (note.outcome, note.explanation["reason"]) == (status, reason)


def test_a_check_that_passes_does_not_undo_a_refused_launch_until_the_recheck() -> None:
    """Credentials good for reading and not for launching (UnauthorizedOperation on
    RunInstances alone), and the first check still in flight when the launch is refused: the
    check that then passes does not make the pool available again before its recheck (else
    every cycle would try, and fail, one more launch there)."""
    import threading

    class Slow(FakeCloud):
        def __init__(self) -> None:
            super().__init__()
            self.go = threading.Event()

        def check(self) -> Any:
            self.go.wait(10)
            return super().check()

    east, west = Slow(), FakeCloud()
    east.refuse("UnauthorizedOperation: not allowed to run instances", launches=True)
    mesh, _, _, _ = clouds_mesh()
    clouds: dict[str, Any] = {"east": east, "west": west}
    access = CloudAccess(mesh, clouds, background=True)
    store, clock, loop, _ = loop_over(clouds, access)
    queue(store, "spill")
    try:
        loop.cycle()  # east's check is in flight; planned for east; the launch is refused
        east.go.set()
        access.settle(10)  # the check passed on its worker thread
        for _ in range(3):
            loop.cycle()
    finally:
        east.go.set()
        access.close()
    refused = [e.message for e in store.events() if e.kind == "pool.unavailable"]
    assert refused == ["east: UnauthorizedOperation: not allowed to run instances"]
    assert loop.world(clock.now).pool_unavailable == {
        "east": "UnauthorizedOperation: not allowed to run instances"
    }
    assert len(west.list_instances("m")) == 1
