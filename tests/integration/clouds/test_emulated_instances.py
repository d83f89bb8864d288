"""An instance launched in moto_server becomes a Ray node of its pool's cluster, with its
type's GPUs; terminating it stops exactly that node; `meshctl down` would stop the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.catalog import load_catalogs
from meshctl.clouds.aws import AwsCloud
from meshctl.clouds.base import LaunchRequest
from meshctl.pools import local
from meshctl.pools.emulated import EmulatedInstances, node_name
from meshctl.pools.ray import RayPoolClient
from tests.conftest import wait_until
from tests.emulators.aws import MotoServer

pytestmark = pytest.mark.integration


def test_instances_join_their_pool_and_leave_when_terminated(
    moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    cloud = AwsCloud("us-east-1", endpoint_url=moto.endpoint)
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    request = LaunchRequest("m", "aws-burst", "g6e.12xlarge", 2, "r-join", ("us-east-1a",))
    first, second = cloud.launch(request).instances
    nodes = EmulatedInstances(tmp_path / "run", catalogs)
    try:
        nodes.join("aws", first)  # the head
        cluster = nodes.join("aws", second)
        ray = RayPoolClient("aws-burst", cluster.dashboard, cluster.token)
        seen = {n.name: n for n in ray.nodes() if n.alive}
        assert set(seen) == {node_name(first.id), node_name(second.id)}
        assert {(n.gpus, n.accelerator) for n in seen.values()} == {(4, "L40S")}
        cloud.terminate([second.id], "stop-1")
        nodes.leave("aws-burst", second.id)
        wait_until(
            "the terminated instance's node is still alive",
            lambda: node_name(second.id) not in {n.name for n in ray.nodes() if n.alive},
            60,
            every_s=0.5,
        )
        assert local.running(cluster)  # the head (first instance) is still up
    finally:
        found = nodes.cluster("aws-burst")
        if found is not None:
            local.stop(found)
    assert found is not None
    assert local.leftover(found) == []


def test_a_gcp_burst_launches_joins_and_tears_down(tmp_path: Path) -> None:
    """The controller's cloud side against the GCE emulator: a launch becomes an instance
    and a Ray node of the pool's cluster; the teardown deletes it in the emulator."""
    from meshctl.clouds.gcp import GcpCloud
    from meshctl.controller.burst import Burst
    from meshctl.controller.decide import Launch, Teardown
    from meshctl.model import Mesh
    from meshctl.state import InstanceRecord, MemoryStore
    from tests.emulators.gce import GceEmulator

    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    with GceEmulator() as gce:
        mesh = Mesh.model_validate(
            {"apiVersion": "meshctl/v1", "kind": "Mesh", "metadata": {"name": "g"},
             "spec": {"pools": [{"name": "gcp-burst", "provider": "gcp", "project": "meshctl-test",
                                 "region": "us-central1", "zones": ["us-central1-a"],
                                 "endpoint_url": gce.endpoint,
                                 "node_types": [{"name": "g2-standard-8", "max_nodes": 2}]}]}}
        )  # fmt: skip
        store = MemoryStore()
        nodes = EmulatedInstances(tmp_path / "run", catalogs)
        cloud = GcpCloud("meshctl-test", endpoint_url=gce.endpoint)
        burst = Burst(store, mesh, catalogs, {"gcp-burst": cloud}, nodes)
        try:
            assert (
                burst.launch(
                    Launch("j", "gcp-burst", "g2-standard-8", 1, False, 0.0, "burst-j-1"), 1.0
                )
                is None
            )
            [record] = store.list(InstanceRecord)
            assert record.state == "ready"
            cluster = nodes.cluster("gcp-burst")
            assert cluster is not None
            ray = RayPoolClient("gcp-burst", cluster.dashboard, cluster.token)
            [node] = [n for n in ray.nodes() if n.alive]
            assert (node.name, node.gpus, node.accelerator) == (node_name(record.id), 1, "L4")
            assert len(gce.instances()) == 1
            burst.teardown(Teardown("gcp-burst", (record.id,), "idle"), 2.0)
            assert gce.instances() == []
            assert store.list(InstanceRecord)[0].state == "terminated"
            assert nodes.cluster("gcp-burst") is None  # the last instance took the cluster along
            assert local.leftover(cluster) == []
        finally:
            left = nodes.cluster("gcp-burst")
            if left is not None:
                local.stop(left)
