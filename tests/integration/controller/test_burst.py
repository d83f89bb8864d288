"""Bursting for real: the on-prem pool (one 1-GPU node) is full, a best-effort job bursts to
an AWS pool (EC2 on moto_server; each instance a local Ray node), runs there and succeeds; a
critical job waits for on-prem as its policy says; the idle cloud pool is torn down and its
instances are terminated in the emulator; the spend is recorded.

The shipped policies are used with one change: bursting starts after 3 s of waiting instead of
ten minutes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from meshctl.clouds.aws import AwsCloud
from meshctl.state import InstanceRecord, JobRecord, JobState, PoolRecord, open_store
from tests.conftest import ROOT
from tests.emulators.aws import MotoServer
from tests.integration.controller.test_local_mesh import WAIT_S, Mesh

pytestmark = pytest.mark.integration

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: burst-test}}
spec:
  pools:
    - name: onprem
      provider: local
      labels: {{site: lab, tier: strategic}}
      nodes:
        - {{name: gpu, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
    - name: aws-burst
      provider: aws
      region: us-east-1
      zones: [us-east-1a, us-east-1b]
      endpoint_url: {endpoint}
      labels: {{tier: burst, vendor: aws}}
      node_types: [{{name: g6.xlarge, max_nodes: 2, spot: true}}]
      max_nodes: 2
      idle_minutes: 0.1
"""


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, MotoServer]]:
    base = tmp_path_factory.mktemp("burst")
    with MotoServer() as moto:
        moto.stock_out("us-east-1a")  # the first zone has no capacity: fail over to the second
        (base / "mesh.yaml").write_text(MESH.format(endpoint=moto.endpoint))
        policies = base / "policies"
        shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("tests"))
        burst_yaml = policies / "burst.yaml"
        burst_yaml.write_text(burst_yaml.read_text().replace("> 600.0", "> 3.0"))
        mesh = Mesh(base / "home", base)
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--policies", str(policies),
                 "--interval", "0.5", env=env)  # fmt: skip
        try:
            yield mesh, moto
        finally:
            mesh.run("down", check=False, env=env)


def test_a_best_effort_job_bursts_runs_and_the_idle_pool_is_torn_down(
    burst: tuple[Mesh, MotoServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh, moto = burst
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    blocker = mesh.submit("--gpus", "1", "--criticality", "critical", "--name", "blocker", "--",
                          "python", "-c", "import time; time.sleep(600)")  # fmt: skip
    mesh.wait_for(blocker, "running")
    critical = mesh.submit("--gpus", "1", "--criticality", "critical", "--name", "waits", "--",
                           "python", "-c", "print('on-prem at last')")  # fmt: skip
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spill", "--",
                      "python", "-c", "print('ran in the cloud')")  # fmt: skip
    assert mesh.run("jobs", "wait", job, "--timeout", str(WAIT_S)).returncode == 0
    assert mesh.show(job)["pool"] == "aws-burst"
    assert "ran in the cloud" in mesh.run("jobs", "logs", job).stdout
    assert mesh.show(critical)["state"] == "pending"  # critical work never leaves on-prem

    cloud = AwsCloud("us-east-1", endpoint_url=moto.endpoint)
    deadline = time.monotonic() + WAIT_S
    with open_store(mesh.home) as store:
        while cloud.list_instances("burst-test") or any(  # idle for 6 s: torn down
            i.state != "terminated" for i in store.list(InstanceRecord)
        ):
            assert time.monotonic() < deadline, "the idle cloud pool was not torn down"
            time.sleep(0.5)
        instances = store.list(InstanceRecord)
        assert instances
        assert {i.state for i in instances} == {"terminated"}
        assert all(i.instance_type == "g6.xlarge" for i in instances)
        kinds = [e.kind for e in store.events()]
        assert "instance.refused" in kinds  # us-east-1a was out of capacity
        assert "pool.teardown" in kinds
        pool = store.get(PoolRecord, "aws-burst")
        assert pool is not None
        assert pool.observed["spend_usd"] > 0
        assert pool.observed["spend_usd_by_team"]["default"] == pool.observed["spend_usd"]
        waiting = store.get(JobRecord, critical)
        assert waiting is not None
        assert waiting.state is JobState.PENDING
    mesh.run("jobs", "cancel", blocker)
    assert mesh.run("jobs", "wait", critical, "--timeout", str(WAIT_S)).returncode == 0
    assert mesh.show(critical)["pool"] == "onprem"


def test_a_spot_interruption_requeues_the_job_and_it_completes(
    burst: tuple[Mesh, MotoServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh, moto = burst
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    blocker = mesh.submit("--gpus", "1", "--criticality", "critical", "--name", "blocker2", "--",
                          "python", "-c", "import time; time.sleep(600)")  # fmt: skip
    mesh.wait_for(blocker, "running")
    script = (
        "import os, time; first = os.environ['MESHCTL_ATTEMPT'] == '1'; "
        "time.sleep(600 if first else 0); print('done on attempt', os.environ['MESHCTL_ATTEMPT'])"
    )
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spot", "--",
                      "python", "-c", script)  # fmt: skip
    mesh.wait_for(job, "running")
    assert mesh.show(job)["pool"] == "aws-burst"
    [instance] = str(mesh.show(job)["nodes"]).split(", ")
    AwsCloud("us-east-1", endpoint_url=moto.endpoint).terminate([instance], "reclaimed")  # the
    # provider takes the spot instance back: gone from its listing, as after AWS's 2-minute notice
    assert mesh.run("jobs", "wait", job, "--timeout", str(WAIT_S)).returncode == 0
    shown = mesh.show(job)
    assert shown["attempt"] == 2
    assert shown["pool"] == "aws-burst"
    assert "done on attempt 2" in mesh.run("jobs", "logs", job).stdout
    kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
    assert kinds.count("job.preempted") == 1  # a spot instance taken back: preempted
    assert "job.evicted" not in kinds
    assert "job.requeued" in kinds
    mesh.run("jobs", "cancel", blocker)
