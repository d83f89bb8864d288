"""`meshctl gc` against moto_server: it finds an instance tagged with the mesh that the store
does not own, leaves alone what the store owns and other meshes' instances, and terminates
the leak unless --dry-run; a pool it could not reach is reported, and it exits 1."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from meshctl.app.shapes.mesh import LeakedInstance
from meshctl.cli.app import app
from meshctl.clouds.aws import AwsCloud
from meshctl.clouds.base import LaunchRequest
from meshctl.state import InstanceRecord, open_store
from tests.conftest import wait_until
from tests.emulators.aws import MotoServer
from tests.emulators.gce import GceEmulator

pytestmark = pytest.mark.integration


def test_gc_finds_and_terminates_a_leaked_instance(
    moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    home = tmp_path / "home"
    monkeypatch.setenv("MESHCTL_HOME", str(home))
    mesh = tmp_path / "mesh.yaml"
    mesh.write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: gc-test}\nspec:\n  pools:\n"
        "    - name: burst\n      provider: aws\n      region: us-east-1\n"
        f"      endpoint_url: {moto.endpoint}\n"
        "      node_types: [{name: g6.xlarge, max_nodes: 4}]\n"
    )
    cloud = AwsCloud("us-east-1", endpoint_url=moto.endpoint)

    def start(mesh_name: str, rid: str) -> str:
        request = LaunchRequest(mesh_name, "burst", "g6.xlarge", 1, rid, ("us-east-1a",))
        return cloud.launch(request).instances[0].id

    leaked, owned, foreign = (
        start("gc-test", "r-leak"),
        start("gc-test", "r-own"),
        start("other", "r-x"),
    )
    with open_store(home) as store:
        store.create(
            InstanceRecord(
                owned, "burst", "aws", "r-own", "g6.xlarge", "ready", time.time(), time.time()
            )
        )
    runner = CliRunner()
    dry = runner.invoke(
        app, ["--mesh", str(mesh), "gc", "--dry-run", "--min-age", "0", "-o", "json"]
    )
    assert dry.exit_code == 0, dry.output
    assert [(r["instance"], r["action"]) for r in json.loads(dry.stdout)] == [
        (leaked, "would_terminate")
    ]
    TypeAdapter(list[LeakedInstance]).validate_python(json.loads(dry.stdout))  # the contract
    done = runner.invoke(app, ["--mesh", str(mesh), "gc", "--min-age", "0", "-o", "json"])
    assert [(r["instance"], r["action"]) for r in json.loads(done.stdout)] == [
        (leaked, "terminated")
    ]
    wait_until(
        "the leaked instance is still listed",
        lambda: leaked not in {i.id for i in cloud.list_instances("gc-test")},
        30,
    )
    assert {i.id for i in cloud.list_instances("gc-test")} == {owned}
    assert {i.id for i in cloud.list_instances("other")} == {foreign}


def test_gc_goes_through_every_pool_and_exits_1_for_those_it_could_not_reach(
    moto: MotoServer, gce: GceEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused credentials (AWS), a project the credentials may not use (GCP), a missing key
    file: one line each; the pool that answers is still gone through; exit 1 at the end."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDREFUSED")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    moto.refuse("AKIDREFUSED")
    gce.deny("meshctl-denied")
    mesh = tmp_path / "mesh.yaml"
    gcp = f"provider: gcp, region: us-central1, endpoint_url: '{gce.endpoint}'"
    nodes = "node_types: [{name: g2-standard-8, max_nodes: 1}]"
    mesh.write_text(
        "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: gc-reach}\nspec:\n  pools:\n"
        f"    - {{name: aws-refused, provider: aws, region: us-east-1, "
        f"endpoint_url: '{moto.endpoint}', node_types: [{{name: g6.xlarge, max_nodes: 1}}]}}\n"
        f"    - {{name: gcp-denied, project: meshctl-denied, {gcp}, {nodes}}}\n"
        f"    - {{name: gcp-nokey, project: meshctl-test, {gcp}, {nodes},"
        f" credentials_file: '{tmp_path / 'key.json'}'}}\n"
        f"    - {{name: gcp-ok, project: meshctl-test, {gcp}, {nodes}}}\n"
    )
    done = CliRunner().invoke(app, ["--mesh", str(mesh), "gc", "--dry-run", "-o", "json"])
    assert done.exit_code == 1
    assert json.loads(done.stdout) == []
    [line] = done.stderr.splitlines()  # -o json: one error document
    error = json.loads(line)["error"]
    assert error["exit_code"] == 1
    assert [p["message"] for p in error["problems"]] == [
        "pool aws-refused: could not be reached: AuthFailure: AWS was not able to"
        " validate the provided access credentials",
        "pool gcp-denied: could not be reached: Forbidden: Required permission for"
        " 'projects/meshctl-denied'",
        f"pool gcp-nokey: could not be reached: no credentials: {tmp_path / 'key.json'}:"
        " No such file or directory",
    ]
