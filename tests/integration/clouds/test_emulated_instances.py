"""An instance launched in moto_server joins its pool's Ray cluster by running its own startup
script (EC2 user data read back from moto): the cluster token comes from Secrets Manager, never
from the script; the head boots first, then a worker joins its address, each with its type's
GPUs and its agent; terminating the worker stops exactly its node; the head takes the cluster
with it."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import boto3
import pytest

from meshctl.catalog import load_catalogs
from meshctl.clouds.aws import AwsCloud
from meshctl.controller.burst import Burst
from meshctl.controller.deciding.decide import Launch, Teardown
from meshctl.model import Mesh
from meshctl.pools import local
from meshctl.pools.emulated import EmulatedInstances, node_name
from meshctl.pools.observed import AGENT_HOST_LABEL, AGENT_PORT_LABEL, NODE_TYPE_LABEL
from meshctl.pools.ray import RayPoolClient
from meshctl.state import InstanceRecord, MemoryStore
from tests.conftest import wait_until
from tests.emulators.aws import MotoServer

pytestmark = pytest.mark.integration


def test_instances_boot_from_their_startup_script_join_and_leave(
    moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    mesh = Mesh.model_validate(
        {"apiVersion": "meshctl/v1", "kind": "Mesh", "metadata": {"name": "m"},
         "spec": {"pools": [{"name": "aws-burst", "provider": "aws", "region": "us-east-1",
                             "zones": ["us-east-1a"], "endpoint_url": moto.endpoint,
                             "node_types": [{"name": "g6e.12xlarge", "max_nodes": 2}]}]}}
    )  # fmt: skip
    store, nodes = MemoryStore(), EmulatedInstances(tmp_path / "run")
    cloud = AwsCloud("us-east-1", endpoint_url=moto.endpoint)
    burst = Burst(store, mesh, catalogs, {"aws-burst": cloud}, nodes)
    try:
        want = Launch("j", "aws-burst", "g6e.12xlarge", 2, False, 0.0, "burst-j-1")
        assert burst.launch(want, 1.0) is None
        head, worker = sorted(store.list(InstanceRecord), key=lambda r: r.request_id)
        assert (head.request_id, worker.request_id) == ("burst-j-1", "burst-j-1.w")
        assert {head.state, worker.state} == {"ready"}
        cluster = nodes.cluster("aws-burst")
        assert cluster is not None
        ray = RayPoolClient("aws-burst", cluster.dashboard, cluster.token)
        seen = {n.name: n for n in ray.nodes() if n.alive}
        assert set(seen) == {node_name(head.id), node_name(worker.id)}
        assert {(n.gpus, n.accelerator) for n in seen.values()} == {(4, "L40S")}
        for node in seen.values():  # each says where its agent answers, and its type
            assert node.labels[AGENT_HOST_LABEL] == "127.0.0.1"
            assert int(node.labels[AGENT_PORT_LABEL]) > 0
            assert node.labels[NODE_TYPE_LABEL] == "g6e.12xlarge"

        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto.moto)
        scripts = [
            base64.b64decode(
                ec2.describe_instance_attribute(InstanceId=i, Attribute="userData")["UserData"][
                    "Value"
                ]
            ).decode()
            for i in (head.id, worker.id)
        ]
        assert "--role head" in scripts[0]
        assert f"--head {cluster.gcs}" in scripts[1]
        secrets = boto3.client("secretsmanager", region_name="us-east-1", endpoint_url=moto.moto)
        token = secrets.get_secret_value(SecretId="meshctl-m-aws-burst-ray-token")["SecretString"]
        assert token == cluster.token
        assert all(token not in script for script in scripts)
        logs = [f.read_text(errors="replace") for f in Path(cluster.log_dir).iterdir()]
        assert all(token not in text for text in logs)
        node_token = tmp_path / "run" / "nodes" / node_name(worker.id) / "ray-token"
        assert stat.S_IMODE(node_token.stat().st_mode) == 0o600

        burst.teardown(Teardown("aws-burst", (worker.id,), "idle"), 2.0)
        wait_until(
            "the terminated instance's node is still alive",
            lambda: node_name(worker.id) not in {n.name for n in ray.nodes() if n.alive},
            60,
            every_s=0.5,
        )
        assert local.running(cluster)  # the head is still up
        burst.teardown(Teardown("aws-burst", (head.id,), "idle"), 3.0)
        assert nodes.cluster("aws-burst") is None  # the head took the cluster along
    finally:
        found = nodes.cluster("aws-burst")
        if found is not None:
            local.stop(found)
        nodes.close()
    assert local.leftover(cluster) == []


def test_a_gcp_burst_launches_joins_and_tears_down(tmp_path: Path) -> None:
    """The controller's cloud side against the GCE emulator: a launch becomes an instance
    that boots from its startup-script metadata (the token from Secret Manager, served by
    the emulator) and joins as a Ray node of the pool's cluster; the teardown deletes it."""
    from meshctl.clouds.gcp import GcpCloud
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
        nodes = EmulatedInstances(tmp_path / "run")
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
            [instance] = gce.instances()
            [script] = [i["value"] for i in instance["metadata"]["items"]
                        if i["key"] == "startup-script"]  # fmt: skip
            assert "--role head" in script
            token = gce.secrets.value("meshctl-test", "meshctl-g-gcp-burst-ray-token")
            assert token == cluster.token
            assert token not in script
            burst.teardown(Teardown("gcp-burst", (record.id,), "idle"), 2.0)
            assert gce.instances() == []
            assert store.list(InstanceRecord)[0].state == "terminating"  # asked to go
            burst.watch(3.0)  # the emulator no longer lists it: confirmed
            assert store.list(InstanceRecord)[0].state == "terminated"
            assert nodes.cluster("gcp-burst") is None  # the last instance took the cluster along
            assert local.leftover(cluster) == []
        finally:
            left = nodes.cluster("gcp-burst")
            if left is not None:
                local.stop(left)
