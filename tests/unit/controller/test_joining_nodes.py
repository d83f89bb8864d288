"""A cloud instance takes work once its join is done, not when Ray first lists its node: a
start-up tried again (the first ``ray start`` ran out of time on a loaded machine, and its
node is stopped) or an agent not answering yet would lose the job placed there at once. And
an instance joined is never joined again, nor swept as an orphan, because a watch read the
records a moment before its launch finished."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from meshctl.controller.deciding.nodes import nodes
from meshctl.controller.loop import Controller
from meshctl.pools.observed import node_name
from meshctl.state import InstanceRecord, MemoryStore
from meshctl.state.records import InstanceState
from tests.builders import observed_node, observed_pool
from tests.unit.controller.test_loop import bursting, queue

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("state", "offered"),
    [
        (InstanceState.JOINING, False),
        (InstanceState.READY, True),
        (InstanceState.RECLAIMING, True),  # offered, cordoned: its jobs stay until they leave
    ],
    ids=["joining: not there yet", "ready: takes work", "given notice: still listed"],
)
def test_a_cloud_node_is_offered_once_its_instance_has_joined(
    state: InstanceState, offered: bool
) -> None:
    store, clock, _, loop, _ = bursting()
    queue(store, "spill")
    loop.cycle()  # launched: one g6.xlarge in east
    [worker] = store.list(InstanceRecord)
    name = node_name(worker.id)
    alive = observed_node(name, ray_node_id="ray-1", gpus=1, cpus=4.0, memory_gib=16.0,
                          accelerator="L4")  # fmt: skip
    world = replace(
        loop.world(clock.now),
        pools={"east": observed_pool("east", alive)},
        instances=(replace(worker, state=state),),
    )
    found = [n.name for n in nodes(world, loop.rules.mesh, [], loop.rules.catalogs)]
    assert found == ([name] if offered else [])


class Machines:
    """Stand-in machines that count the joins they are asked for."""

    def __init__(self) -> None:
        self.joined: list[str] = []

    def join(self, provider: str, instance: Any) -> None:
        self.joined.append(instance.id)

    def leave(self, pool: str, instance_id: str) -> list[str]:
        return []


def test_an_instance_its_launch_joined_after_the_watch_read_it_is_not_joined_again() -> None:
    """The watch reads the records, then asks whether a launch is in flight: a launch that
    joined its instance in between is done, and the record the watch holds still says joining.
    Joining it again would start its node anew under the job just placed there (on the
    emulated clouds: stop it first, and the job loses its node)."""
    from meshctl.controller.burst import Burst
    from meshctl.controller.deciding.step import Rules
    from tests.unit.controller.test_loop import Clock, clouds_mesh

    mesh, catalogs, shipped, clouds = clouds_mesh(1)
    store, clock, machines = MemoryStore(), Clock(), Machines()
    burst = Burst(store, mesh, catalogs, clouds, machines)
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst)
    queue(store, "spill")
    loop.cycle()  # launched and joined: ready
    [record] = store.list(InstanceRecord)
    assert (record.state, machines.joined) == (InstanceState.READY, [record.id])
    [instance] = clouds["east"].list_instances("m")
    stale = replace(record, state=InstanceState.JOINING)  # as the watch read it
    burst._watch_one("east", clouds["east"], stale, instance, clock.now + 120)
    assert machines.joined == [record.id]  # once
    store.update(replace(record, state=InstanceState.JOINING), expected_version=record.version)
    burst._watch_one("east", clouds["east"], stale, instance, clock.now + 120)
    assert machines.joined == [record.id, record.id]  # still joining: tried again


def test_an_instance_recorded_after_the_sweep_read_the_records_is_no_orphan() -> None:
    """The same moment for the sweep: an instance its launch recorded after the sweep read
    the records is listed by the provider but was not among them; it is neither adopted nor
    terminated."""
    from meshctl.controller.burst import Burst
    from meshctl.controller.deciding.step import Rules
    from meshctl.controller.sweep import Orphan
    from tests.unit.controller.test_loop import Clock, clouds_mesh

    mesh, catalogs, shipped, clouds = clouds_mesh(1)
    store, clock = MemoryStore(), Clock()
    burst = Burst(store, mesh, catalogs, clouds, Machines())
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst)
    queue(store, "spill")
    loop.cycle()
    [instance] = clouds["east"].list_instances("m")
    burst._sweep("east", clouds["east"], [Orphan(instance, "terminate", "no job")], clock.now)
    assert [i.id for i in clouds["east"].list_instances("m")] == [instance.id]  # still there
    [record] = store.list(InstanceRecord)
    assert record.state == InstanceState.READY
    assert not [e for e in store.events() if e.kind == "instance.swept"]
