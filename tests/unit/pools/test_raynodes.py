"""Every node of a Ray cluster past the state API's cap: live and dead listed apart, and the
live nodes a cut listing left out taken from the dashboard's node summary, whose camel-case
keys are spelt back as the state API spells them. The HTTP part runs against a real cluster
in tests/integration/controller/test_plain_ray.py."""

from __future__ import annotations

from typing import Any

import pytest

from meshctl.pools import raynodes
from meshctl.pools.ray import PoolError, RayPoolClient

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "spelt"),
    [
        ("neuron_cores", "neuronCores"),
        ("object_store_memory", "objectStoreMemory"),
        ("node:__internal_head__", "node:InternalHead"),
        ("accelerator_type:H100", "acceleratorType:H100"),
        ("GPU", "GPU"),
        ("meshctl.io/node", "meshctl.io/node"),
    ],
    ids=["device", "ray's own", "head marker", "accelerator", "plain", "label"],
)
def test_camel_spells_keys_as_the_dashboard_summary_does(name: str, spelt: str) -> None:
    assert raynodes.camel(name) == spelt


@pytest.mark.parametrize(
    ("result", "cut"),
    [
        ({"result": [{}, {}], "total": 2, "num_filtered": 2}, False),
        ({"result": [{}], "total": 3, "num_filtered": 1}, True),  # cut at the source
        ({"result": [{}], "total": 2, "num_filtered": 2}, True),  # cut by the asked limit
        ({"result": []}, False),
    ],
    ids=["whole", "source cap", "asked limit", "empty"],
)
def test_a_listing_says_when_it_was_cut(result: dict[str, Any], cut: bool) -> None:
    rows, was_cut = raynodes.listed({"data": {"result": result}})
    assert (len(rows), was_cut) == (len(result["result"]), cut)


def _raylet(node_id: str, state: str = "ALIVE", **resources: float) -> dict[str, Any]:
    return {
        "raylet": {
            "nodeId": node_id,
            "state": state,
            "nodeManagerAddress": "10.0.0.9",
            "nodeName": "host-9",
            "resourcesTotal": {raynodes.camel(k): v for k, v in resources.items()},
            "labels": {"meshctl.io/node": node_id, "rack_id": "r1"},
            "startTimeMs": "1700000000000",
            "endTimeMs": "0",
        }
    }


def test_the_summary_gives_the_unlisted_live_nodes_with_their_names_restored() -> None:
    listed = [
        {
            "node_id": "a",
            "resources_total": {"GPU": 8.0, "neuron_cores": 32.0, "gpu_memory_gib": 640.0},
            "labels": {"rack_id": "r0"},
        }
    ]
    summary = {
        "summary": [
            _raylet("a", GPU=8.0),  # listed already
            _raylet("b", GPU=8.0, neuron_cores=32.0, object_store_memory=1e9, made_up_x=1.0),
            _raylet("c", "DEAD", GPU=8.0),  # the dead are listed apart
            {"raylet": {"nodeId": "b", "state": "ALIVE"}},  # twice: once is enough
        ]
    }
    summary["summary"][1]["raylet"]["resourcesTotal"]["acceleratorType:H100"] = 1.0
    found = raynodes.unlisted(summary, listed)
    assert [n["node_id"] for n in found] == ["b"]
    assert found[0]["resources_total"] == {
        "GPU": 8.0,
        "neuron_cores": 32.0,  # seen on a listed node
        "object_store_memory": 1e9,  # Ray's own
        "madeUpX": 1.0,  # seen nowhere: as the summary spells it
        "accelerator_type:H100": 1.0,
    }
    assert found[0]["labels"] == {"meshctl.io/node": "b", "rack_id": "r1"}
    assert (found[0]["state"], found[0]["start_time_ms"], found[0]["end_time_ms"]) == (
        "ALIVE",
        1_700_000_000_000,
        0,
    )


class _Capped(RayPoolClient):
    """A dashboard whose state API lists one live node of two."""

    summary: dict[str, Any] | None = None

    def _request(self, method: str, path: str) -> Any:
        if "view=summary" in path:
            if self.summary is None:
                raise PoolError("timed out")
            return {"data": self.summary}
        if "filter_values=DEAD" in path:
            rows = [{"node_id": "d", "state": "DEAD", "node_name": "old", "resources_total": {}}]
            return {"data": {"result": {"result": rows, "total": 1}}}
        row = {"node_id": "a", "state": "ALIVE", "node_name": "a", "resources_total": {"GPU": 8}}
        return {"data": {"result": {"result": [row], "total": 2, "num_filtered": 1}}}


def test_a_cut_listing_is_completed_from_the_summary_and_dead_nodes_come_last() -> None:
    client = _Capped("lab", "http://dashboard.invalid", None)
    object.__setattr__(client, "summary", {"summary": [_raylet("b", GPU=8.0)]})
    seen = [(n.ray_node_id, n.alive, n.gpus) for n in client.nodes()]
    assert seen == [("a", True, 8), ("b", True, 8), ("d", False, 0)]


def test_a_cut_listing_without_a_summary_is_an_error_not_fewer_nodes() -> None:
    """Nodes left out are not gone: the pool is unobservable this time instead."""
    client = _Capped("lab", "http://dashboard.invalid", None)
    with pytest.raises(PoolError, match="listed 1 live nodes of more"):
        client.nodes()
    assert not client.observe().reachable
