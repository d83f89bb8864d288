"""An instance launched in moto_server becomes a Ray node of its pool's cluster, with its
type's GPUs; terminating it stops exactly that node; `meshctl down` would stop the rest."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.catalog import load_catalogs
from meshctl.clouds.aws import AwsCloud
from meshctl.clouds.base import LaunchRequest
from meshctl.pools import local
from meshctl.pools.emulated import EmulatedInstances, node_name
from meshctl.pools.ray import RayPoolClient
from tests.emulators.aws import MotoServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


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
        deadline = time.monotonic() + 60
        while node_name(second.id) in {n.name for n in ray.nodes() if n.alive}:
            assert time.monotonic() < deadline, "the terminated instance's node is still alive"
            time.sleep(0.5)
        assert local.running(cluster)  # the head (first instance) is still up
    finally:
        found = nodes.cluster("aws-burst")
        assert found is not None
        local.stop(found)
    assert local.leftover(found) == []
