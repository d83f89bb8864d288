"""Bursting for real: the on-prem pool (one 1-GPU node) is full, a best-effort job bursts to
an AWS pool (EC2 on moto_server; each instance a local Ray node booted by its own startup
script: the pool's own on-demand m7i.large head first, then a spot g6.xlarge worker), runs
there and succeeds; a critical job waits for on-prem as its policy says; the idle cloud pool
is torn down (the worker, then the head) and its instances are terminated in the emulator;
the spend is recorded, the head's included. A spot worker taken back leaves the head, and
its cluster, up.

A second burst pool, on GCP (the GCE emulator), is cheaper for spot work but its credentials
may not use its project: it shows as unavailable, with why, and every burst goes to AWS.

The shipped policies are used with one change: bursting starts after 3 s of waiting instead of
ten minutes; and the AWS catalog gains a spot price for g6.xlarge, so best-effort work runs
on spot instances there.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from meshctl.clouds.aws import AwsCloud
from meshctl.controller import daemon
from meshctl.controller.rundir import run_dir
from meshctl.pools import local
from meshctl.state import (
    InstanceRecord,
    InstanceState,
    JobRecord,
    JobState,
    PoolRecord,
    open_store,
)
from tests.conftest import ROOT, wait_until
from tests.emulators.aws import MotoServer
from tests.emulators.gce import GceEmulator
from tests.integration.meshes import WAIT_S, Mesh

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
      head_node_type: m7i.large
      max_nodes: 2
      idle_minutes: 0.1
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
    - name: gcp-spill
      provider: gcp
      project: meshctl-denied
      region: us-central1
      zones: [us-central1-a]
      endpoint_url: {gce}
      labels: {{tier: burst, vendor: gcp}}
      node_types: [{{name: g2-standard-8, max_nodes: 2, spot: true}}]
      max_nodes: 2
      idle_minutes: 0.1
"""
DENIED = "Forbidden: Required permission for 'projects/meshctl-denied'"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


GCP_BUDGET = "    - {name: gcp-monthly, scope: {provider: gcp}, usd_per_month: 15000, soft_pct: 80}"


@dataclass
class Burst:
    mesh: Mesh
    moto: MotoServer
    gce: GceEmulator
    up: subprocess.CompletedProcess[str]  # what `meshctl up` said


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Burst]:
    """The mesh, up. Its first test checks what `up` said and its last brings it down, so
    that the start and the stop are timed as tests of their own (the fixture's `down` below
    is for a run that skipped the last one)."""
    base = tmp_path_factory.mktemp("burst")
    with MotoServer() as moto, GceEmulator() as gce:
        moto.stock_out("us-east-1a")  # the first zone has no capacity: fail over to the second
        gce.deny("meshctl-denied")  # gcp-spill's credentials may not use its project
        checkpoints = base / "checkpoints"
        mesh_yaml = MESH.format(endpoint=moto.endpoint, checkpoints=checkpoints, gce=gce.endpoint)
        (base / "mesh.yaml").write_text(mesh_yaml)
        (base / "providers").mkdir()  # the shipped AWS catalog, with a spot price for g6.xlarge
        shipped = (ROOT / "providers" / "aws.yaml").read_text()
        g6 = shipped.index("  - name: g6.xlarge")
        at = shipped.index("on_demand_usd_per_hour: 0.8048", g6)
        spot = "spot_usd_per_hour: 0.3512\n        "
        (base / "providers" / "aws.yaml").write_text(shipped[:at] + spot + shipped[at:])
        policies = base / "policies"
        shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("tests"))
        burst_yaml = policies / "burst.yaml"
        burst_yaml.write_text(burst_yaml.read_text().replace("> 600.0", "> 3.0"))
        for name, gcp in (("onprem-first", " gcp-burst,"), ("budgets", GCP_BUDGET)):
            # this mesh has no GCP pool: policies that name one are refused at `up`
            path = policies / f"{name}.yaml"
            path.write_text(path.read_text().replace(gcp, "").replace("\n\n", "\n"))
        mesh = Mesh(base / "home", base)
        up = mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--policies", str(policies),
                      "--interval", "0.5", env=ENV)  # fmt: skip
        try:
            yield Burst(mesh, moto, gce, up)
        finally:
            mesh.run("down", "--force", check=False, env=ENV)
            assert [r for r in gce.requests if r[0] == "POST"] == []  # nothing launched there


def test_up_warns_that_a_pool_whose_credentials_are_refused_is_unavailable(burst: Burst) -> None:
    """`up` goes on without the pool it may not use, and says why (the controller's view of
    it, and where bursts go instead: the next test)."""
    assert f"warning: pool gcp-spill: unavailable: {DENIED}" in burst.up.stderr
    assert "mesh burst-test is up" in burst.up.stdout
    assert daemon.running(burst.mesh.home) is not None


@pytest.fixture
def blocked(burst: Burst) -> Iterator[str]:
    """A critical job holding the on-prem pool's one GPU for the test, so that best-effort
    work bursts; cancelled after it, whatever happened (a failed test leaves the GPU free)."""
    mesh = burst.mesh
    blocker = mesh.submit("--gpus", "1", "--criticality", "critical", "--name", "blocker", "--",
                          "python", "-c", "import time; time.sleep(600)")  # fmt: skip
    mesh.wait_for(blocker, "running")
    try:
        yield blocker
    finally:
        mesh.run("jobs", "cancel", blocker, check=False)


def test_a_best_effort_job_bursts_runs_and_the_idle_pool_is_torn_down(
    burst: Burst, blocked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh, moto = burst.mesh, burst.moto
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    critical = mesh.submit("--gpus", "1", "--criticality", "critical", "--name", "waits", "--",
                           "python", "-c", "print('on-prem at last')")  # fmt: skip
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spill", "--",
                      "python", "-c", "print('ran in the cloud')")  # fmt: skip
    mesh.wait_done(job)
    assert mesh.show(job)["pool"] == "aws-burst"
    assert "ran in the cloud" in mesh.run("jobs", "logs", job).stdout
    assert mesh.show(critical)["state"] == "pending"  # critical work never leaves on-prem

    cloud = AwsCloud("us-east-1", endpoint_url=moto.endpoint)
    with open_store(mesh.home) as store:
        wait_until(  # idle for 6 s: torn down
            "the idle cloud pool was not torn down",
            lambda: (
                not cloud.list_instances("burst-test")
                and all(i.state == "terminated" for i in store.list(InstanceRecord))
            ),
            WAIT_S,
            every_s=0.5,
        )
        instances = store.list(InstanceRecord)
        assert {i.state for i in instances} == {"terminated"}
        heads = [i for i in instances if i.request_id.endswith(".h")]
        assert [(i.instance_type, i.spot) for i in heads] == [("m7i.large", False)]
        assert {i.instance_type for i in instances if i not in heads} == {"g6.xlarge"}
        assert mesh.show(job)["nodes"] != [heads[0].id]  # the head took no work
        launched = [e for e in store.events() if e.kind == "instance.launched"]
        assert "as the pool's head" in launched[0].message
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
    mesh.run("jobs", "cancel", blocked)
    mesh.wait_done(critical)
    assert mesh.show(critical)["pool"] == "onprem"


def test_a_pool_with_refused_credentials_is_unavailable_and_bursts_go_to_the_next(
    burst: Burst, blocked: str
) -> None:
    mesh = burst.mesh
    checked = mesh.run("pools", "check", "-o", "json", check=False, env=ENV)
    assert checked.returncode == 1
    health = {r["pool"]: (r["available"], r["reason"]) for r in json.loads(checked.stdout)}
    assert health == {
        "onprem": (True, None),
        "aws-burst": (True, None),
        "gcp-spill": (False, DENIED),
    }
    wait_until(  # the controller's view
        lambda: str(_status_pools(mesh)),
        lambda: _status_pools(mesh)["gcp-spill"] == (False, DENIED),
        WAIT_S,
        every_s=0.5,
    )
    assert _status_pools(mesh)["aws-burst"] == (True, None)
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spill2", "--",
                      "python", "-c", "print('not on gcp')")  # fmt: skip
    mesh.wait_done(job)
    assert mesh.show(job)["pool"] == "aws-burst"  # gcp-spill was the cheaper spot offer
    with open_store(mesh.home) as store:
        told = [e.message for e in store.events() if e.kind == "pool.unavailable"]
    assert told == [f"gcp-spill: {DENIED}"]


def _status_pools(mesh: Mesh) -> dict[str, tuple[bool, str | None]]:
    data = json.loads(mesh.run("status", "-o", "json").stdout)
    return {p["pool"]: (p["available"], p["reason"]) for p in data["pools"]}


SPOT_JOB = """\
import os, pathlib, time
from meshctl.workload import checkpoint_requested

saved = pathlib.Path(os.environ["MESHCTL_CHECKPOINT_DIR"]) / "step"
step = start = int(saved.read_text()) if saved.exists() else 0
print("attempt", os.environ["MESHCTL_ATTEMPT"], "resumed from step", start, flush=True)
while step < 3000:
    step += 1
    time.sleep(0.1)
    if checkpoint_requested(every_s=0.5):
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(str(step))
        print("checkpointed at step", step, flush=True)
        time.sleep(600)  # until stopped, or the instance goes
    if start:
        break
print("done on attempt", os.environ["MESHCTL_ATTEMPT"], flush=True)
"""


def test_a_spot_notice_checkpoints_the_job_and_it_resumes_on_a_new_instance(
    burst: Burst, blocked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS gives the spot instance its two-minute notice: the job is asked to checkpoint and
    does, is preempted, the instance is taken back, and the job is requeued, runs on a new
    instance and resumes from its checkpoint."""
    mesh, moto = burst.mesh, burst.moto
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spot", "--",
                      "python", "-c", SPOT_JOB)  # fmt: skip
    mesh.wait_for(job, "running")
    assert mesh.show(job)["pool"] == "aws-burst"
    [instance] = mesh.show(job)["nodes"]
    moto.spot_notice(instance)  # two minutes left
    mesh.wait_for(job, "preempted")
    wait_until(
        "the job was not asked to checkpoint",
        lambda: "checkpointed at step" in mesh.run("jobs", "logs", job).stdout,
        WAIT_S,
        every_s=0.5,
    )
    AwsCloud("us-east-1", endpoint_url=moto.endpoint).terminate([instance], "reclaimed")
    mesh.wait_done(job)
    shown = mesh.show(job)
    assert shown["attempt"] == 2, mesh.story(job)
    assert shown["pool"] == "aws-burst"
    assert mesh.show(job)["nodes"] != [instance]  # a new instance replaced it
    logs = mesh.run("jobs", "logs", job).stdout
    assert "done on attempt 2" in logs
    resumed = re.search(r"attempt 2 resumed from step (\d+)", logs)
    assert resumed is not None
    assert int(resumed.group(1)) > 0  # from its checkpoint, not from scratch
    kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
    assert kinds.count("job.preempted") == 1  # a spot instance taken back: preempted
    assert "job.checkpoint-request" in kinds
    assert "job.evicted" not in kinds
    assert "job.requeued" in kinds
    with open_store(mesh.home) as store:  # the head outlived the worker: no new cluster
        again = [r for r in store.list(InstanceRecord) if r.request_id.startswith(f"burst-{job}-2")]
    assert again
    assert not [r for r in again if r.request_id.endswith(".h")]


def test_a_controller_killed_between_a_launch_and_its_record_leaks_nothing(
    burst: Burst, blocked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL right after EC2 accepted the launch, before the instance was recorded (the
    pool's head, when its cluster had gone idle; else the worker): the restarted controller
    records that very instance once (its reconcile adopts it, or the relaunch of the same
    request finds it), it boots from its script, the job runs, and nothing is launched
    twice."""
    mesh, moto = burst.mesh, burst.moto
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    daemon.stop(mesh.home)
    args = ["--home", str(mesh.home), "controller", "run", "--interval", "0.5"]
    pid = daemon.start(mesh.home, args, env={**ENV, "MESHCTL_FAILPOINT": "after-launch"})
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "adopted", "--",
                      "python", "-c", "print('on the adopted instance')")  # fmt: skip
    wait_until("the failpoint never fired", lambda: daemon.running(mesh.home) != pid, WAIT_S)
    cloud = AwsCloud("us-east-1", endpoint_url=moto.endpoint)
    [launched] = [i for i in cloud.list_instances("burst-test") if i.labels.get("job") == job]
    with open_store(mesh.home) as store:
        assert store.get(InstanceRecord, launched.id) is None  # EC2 has it; the store does not
    mesh.run("up", env=ENV)  # restarts the controller
    mesh.wait_done(job)
    shown = mesh.show(job)
    with open_store(mesh.home) as store:
        mine = [r for r in store.list(InstanceRecord) if r.request_id.startswith(f"burst-{job}-")]
    assert launched.id in {r.id for r in mine}
    assert len(mine) == len({r.request_id for r in mine})  # one instance per request part
    [worker] = [r.id for r in mine if r.instance_type == "g6.xlarge"]
    assert (shown["pool"], shown["nodes"]) == ("aws-burst", [worker])
    if launched.node_type == "g6.xlarge":
        assert worker == launched.id  # that very one
    said = [e for e in shown["events"] if e["message"].startswith(launched.id)]  # type: ignore[index, union-attr]
    # recorded once: adopted by the reconcile, or found again by the relaunch of the same
    # request (EC2's idempotency), whichever came first
    assert [e["kind"] for e in said if e["kind"] in ("instance.adopted", "instance.launched")] in (
        ["instance.adopted"], ["instance.launched"],
    )  # fmt: skip


def test_down_terminates_the_instances_and_leaves_no_process_behind(
    burst: Burst, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last: `down --force` ends what the tests left (the AWS pool's instances when its idle
    teardown has not yet come, and the on-prem cluster): nothing runs in the emulator or on
    this machine afterwards, the store says so, and a second `down` finds nothing up."""
    mesh, moto = burst.mesh, burst.moto
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    clusters = [local.LocalCluster.load(p) for p in run_dir(mesh.home).glob("pool-*.json")]
    assert clusters  # the on-prem pool's
    mesh.run("down", "--force", env=ENV)
    assert daemon.running(mesh.home) is None
    assert AwsCloud("us-east-1", endpoint_url=moto.endpoint).list_instances("burst-test") == []
    with open_store(mesh.home) as store:
        ended = {InstanceState.TERMINATED, InstanceState.INTERRUPTED}  # by meshctl, or taken back
        assert {i.state for i in store.list(InstanceRecord)} <= ended
    assert [c.pool for c in clusters if local.leftover(c)] == []
    assert list(run_dir(mesh.home).glob("pool-*.json")) == []
    assert [r for r in burst.gce.requests if r[0] == "POST"] == []  # nothing launched there
    assert "nothing was up" in mesh.run("down", "--force", env=ENV).stdout
