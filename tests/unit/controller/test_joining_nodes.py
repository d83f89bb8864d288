"""A cloud instance takes work once its join is done, not when Ray first lists its node: a
start-up tried again (the first ``ray start`` ran out of time on a loaded machine, and its
node is stopped) or an agent not answering yet would lose the job placed there at once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meshctl.controller.nodes import nodes
from meshctl.pools.observed import ObservedNode, PoolObservation, node_name
from meshctl.state import InstanceRecord
from meshctl.state.records import InstanceState
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
    alive = ObservedNode(name, "ray-1", True, 1, 4.0, 16.0, "L4", {"meshctl.io/node": name})
    world = replace(
        loop.world(clock.now),
        pools={"east": PoolObservation("east", True, "", (alive,))},
        instances=(replace(worker, state=state),),
    )
    found = [n.name for n in nodes(world, loop.rules.mesh, [], loop.rules.catalogs)]
    assert found == ([name] if offered else [])
