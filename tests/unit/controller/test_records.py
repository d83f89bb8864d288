"""Node health as the controller records it (``Recorder.node_health``), over a MemoryStore: a
node out of service remembers what the operator had it at and goes back to that when healthy;
each new signal counts as a failure (what the pool's MTBF is computed from)."""

from __future__ import annotations

import pytest

from meshctl.controller.deciding.step import NodeChange
from meshctl.controller.records import Recorder
from meshctl.state import MemoryStore, NodeRecord

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
XID = ("unhealthy", "GPU XID 79")
HEALTHY = ("ready", "healthy again")

CASES = [
    # (the operator's state, the changes in order, state after, failures, events)
    pytest.param("ready", [XID], "unhealthy", 1, ["node.unhealthy"], id="out of service"),
    pytest.param(
        "cordoned", [XID, HEALTHY], "cordoned", 1, ["node.unhealthy", "node.healthy"],
        id="healthy again: back to cordoned, not ready",
    ),
    pytest.param(
        "ready", [XID, HEALTHY, XID], "unhealthy", 2,
        ["node.unhealthy", "node.healthy", "node.unhealthy"],
        id="the same signal after a recovery is a new failure",
    ),
    pytest.param(
        "ready", [XID, XID], "unhealthy", 1, ["node.unhealthy"], id="a change seen again: nothing"
    ),
]  # fmt: skip


@pytest.mark.parametrize(("was", "changes", "state", "failures", "events"), CASES)
def test_node_health_changes(
    was: str, changes: list[tuple[str, str]], state: str, failures: int, events: list[str]
) -> None:
    store = MemoryStore()
    store.create(NodeRecord("onprem/n1", "onprem", was, {}, {}, NOW))
    recorder = Recorder(store)
    for i, (to, reason) in enumerate(changes):
        recorder.node_health(NodeChange("onprem/n1", to, reason), NOW + i)
    record = store.get(NodeRecord, "onprem/n1")
    assert record is not None
    assert (record.state, record.detail.failures) == (state, failures)
    assert [e.kind for e in store.events()] == events
