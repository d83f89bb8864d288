"""A cloud pool that names a ``head_node_type``: its cluster starts with a head of its own (a
small on-demand CPU instance that takes no work), then the job's workers; the head is
charged at its price, counts outside the pool's max_nodes, outlives a worker taken back, and
goes with the last worker (never while a launch this cycle needs it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from meshctl.controller.burst import Burst
from meshctl.controller.deciding.step import Rules
from meshctl.controller.loop import Controller
from meshctl.state import InstanceRecord, JobRecord, JobState, MemoryStore, PoolRecord
from tests.unit.controller.test_loop import Clock, clouds_mesh, queue

pytestmark = pytest.mark.unit
M7I, G6 = 0.1008, 0.8048  # USD an hour in us-east-1, the shipped catalog


def headed(max_nodes: int = 1) -> tuple[MemoryStore, Clock, Any, Controller]:
    mesh, catalogs, shipped, clouds = clouds_mesh(max_nodes, head="m7i.large")
    store, clock = MemoryStore(), Clock()
    burst = Burst(store, mesh, catalogs, clouds, None)
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst)
    return store, clock, clouds, loop


def kinds(store: MemoryStore) -> dict[str, tuple[str, str]]:
    """Each instance record's request id -> (type, state)."""
    return {r.request_id: (r.instance_type, r.state) for r in store.list(InstanceRecord)}


def test_a_new_cluster_starts_with_its_own_on_demand_head_then_the_workers() -> None:
    store, _, clouds, loop = headed(max_nodes=1)  # the head is outside the cap of one
    job = queue(store, "spill")
    loop.cycle()
    launched = clouds["east"].list_instances("m")
    assert sorted((i.node_type, i.spot) for i in launched) == [
        ("g6.xlarge", False),
        ("m7i.large", False),  # never spot: a head taken back takes the cluster with it
    ]
    assert kinds(store) == {
        f"burst-{job.id}-1.h": ("m7i.large", "ready"),
        f"burst-{job.id}-1.w": ("g6.xlarge", "ready"),
    }
    loop.cycle()  # asked again: the request is launched, nothing more
    assert len(clouds["east"].list_instances("m")) == 2


def test_the_head_is_charged_beside_its_workers() -> None:
    store, clock, _, loop = headed()
    queue(store, "spill")
    loop.cycle()
    clock.now += 3599  # the next cycle is an hour after the launch
    loop.cycle()
    east = store.get(PoolRecord, "east")
    assert east is not None
    assert east.observed["spend_usd"] == pytest.approx(M7I + G6)


def test_a_worker_taken_back_leaves_the_head_and_its_replacement_joins_it() -> None:
    store, clock, clouds, loop = headed()
    job = queue(store, "spill")
    loop.cycle()
    [worker] = [i for i in clouds["east"].list_instances("m") if i.node_type == "g6.xlarge"]
    clouds["east"].interrupt(worker.id)
    clock.now += 120  # past the listing lag; the head has been idle that long
    loop.cycle()  # seen preempted; the job still waits: its workers again, the head kept
    loop.cycle()
    states = kinds(store)
    assert states[f"burst-{job.id}-1.h"] == ("m7i.large", "ready")
    assert sorted(s for r, s in states.items() if ".w" in r) == [
        ("g6.xlarge", "interrupted"),
        ("g6.xlarge", "ready"),
    ]
    assert not any(r.endswith(".1.h") for r in states)  # no second head


@pytest.mark.parametrize(
    ("ended_ago_s", "goes"),
    [(30.0, False), (61.0, True), (None, True)],
    ids=["its worker's job ended 30 s ago: the head stays",
         "its worker's job ended 61 s ago: the head goes",
         "no job ever held a node of the pool: idle since its launch, an hour ago"],
)  # fmt: skip
def test_a_head_left_alone_is_idle_from_the_last_job_on_its_pool(
    ended_ago_s: float | None, goes: bool
) -> None:
    """The head's worker taken back an hour after they came up, its job ended then: the head
    is idle from the end of that job, not from its own launch (a requeued job gets the pool's
    idle time to come back to the same cluster)."""
    from meshctl.controller.deciding.idle import idle_pools
    from meshctl.controller.deciding.step import Step
    from meshctl.pools.observed import node_name

    store, clock, _, loop = headed()
    queue(store, "spill")
    loop.cycle()
    clock.now += 3600
    records = store.list(InstanceRecord)
    [head] = [r for r in records if r.request_id.endswith(".h")]
    [worker] = [r for r in records if r.request_id.endswith(".w")]
    held = {} if ended_ago_s is None else {f"east/{node_name(worker.id)}": clock.now - ended_ago_s}
    world = replace(loop.world(clock.now), instances=(head,), node_busy_s=held)  # worker gone
    step = Step()
    idle_pools(world, loop.rules, [], step)
    assert [d.instance_ids for d in step.teardowns] == ([(head.id,)] if goes else [])


def test_the_head_goes_with_the_last_worker_workers_first() -> None:
    store, clock, clouds, loop = headed()
    spill = queue(store, "spill")
    loop.cycle()
    current = store.get(JobRecord, spill.id)
    assert current is not None
    store.update(replace(current, state=JobState.CANCELLED), expected_version=current.version)
    clock.now += 3600
    loop.cycle()
    events = [e.message for e in store.events() if e.kind == "pool.teardown"]
    assert events == ["east: terminating 2 (idle for 1 min)"]
    assert clouds["east"].list_instances("m") == []
    loop.cycle()
    assert {r.state for r in store.list(InstanceRecord)} == {"terminated"}


@pytest.mark.parametrize(
    ("in_flight", "going"),
    [(frozenset(), 2), (frozenset({"east"}), 1)],
    ids=["nothing on its way: the worker and the head go",
         "a launch in flight to the pool: the idle worker goes, the head stays"],
)  # fmt: skip
def test_the_head_stays_while_a_launch_to_its_pool_is_in_flight(
    in_flight: frozenset[str], going: int
) -> None:
    from meshctl.controller.deciding.idle import idle_pools
    from meshctl.controller.deciding.step import Step

    store, clock, _, loop = headed()
    spill = queue(store, "spill")
    loop.cycle()
    current = store.get(JobRecord, spill.id)
    assert current is not None
    store.update(replace(current, state=JobState.CANCELLED), expected_version=current.version)
    clock.now += 3600
    world = replace(loop.world(clock.now), launching=in_flight)
    step = Step()
    idle_pools(world, loop.rules, [], step)
    [down] = step.teardowns
    assert len(down.instance_ids) == going
    head = next(r.id for r in store.list(InstanceRecord) if r.request_id.endswith(".h"))
    assert (head in down.instance_ids) == (going == 2)
    assert down.instance_ids[-1] == head or going == 1  # the head last


def test_a_worker_left_joining_without_a_head_is_taken_out_never_made_the_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head went while a worker was on its way (its join found no cluster): in a pool
    with a head of its own, the worker is orphaned (interrupted, terminated), not booted as
    a new cluster's head."""
    store, clock, clouds, loop = headed(max_nodes=2)
    burst = loop.burst
    assert burst is not None
    queue(store, "spill")
    loop.cycle()
    head = next(r for r in store.list(InstanceRecord) if r.request_id.endswith(".h"))
    worker = next(r for r in store.list(InstanceRecord) if r.request_id.endswith(".w"))
    store.update(replace(worker, state="joining"), expected_version=worker.version)  # type: ignore[arg-type]
    clouds["east"].terminate([head.id], "gone")  # the head is gone, the worker still joins
    monkeypatch.setattr(burst.joiner, "scripted", lambda cloud: True)
    monkeypatch.setattr(burst.joiner, "head_address", lambda pool: None)
    burst.watch(clock.now + 1)
    after = store.get(InstanceRecord, worker.id)
    assert after is not None
    assert after.state == "interrupted"
    assert worker.id not in {i.id for i in clouds["east"].list_instances("m")}
    said = [e.message for e in store.events() if e.kind == "instance.orphaned"]
    assert said == [f"{worker.id} in east: its head is gone"]


def test_a_join_tried_again_runs_on_the_launch_thread_never_in_the_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A join can wait minutes (a boot that does not come up): in the daemon its retry runs
    on the launch thread, so the controller's cycle goes on; the pool's head stays meanwhile,
    and the retry is not started twice."""
    import threading

    store, clock, _, loop = headed(max_nodes=2)
    burst = loop.burst
    assert burst is not None
    queue(store, "spill")
    loop.cycle()
    worker = next(r for r in store.list(InstanceRecord) if r.request_id.endswith(".w"))
    store.update(replace(worker, state="joining"), expected_version=worker.version)  # type: ignore[arg-type]
    burst.background = True
    release, calls = threading.Event(), []

    def slow_join(*args: object) -> None:
        calls.append(args)
        release.wait(30)

    monkeypatch.setattr(burst.joiner, "scripted", lambda cloud: True)
    monkeypatch.setattr(burst.joiner, "head_address", lambda pool: "10.0.0.1:6379")
    monkeypatch.setattr(burst.joiner, "join", slow_join)
    burst.watch(clock.now + 1)  # returns at once: the join waits on the launch thread
    assert burst.launching_pools() == {"east"}
    burst.watch(clock.now + 2)  # in flight: not started twice
    release.set()
    burst.close()
    assert len(calls) == 1
    after = store.get(InstanceRecord, worker.id)
    assert after is not None
    assert after.state == "ready"
