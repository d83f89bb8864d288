"""Bursting to GCP end to end, against the GCE emulator (Compute and Secret Manager): the
on-prem pool is full, a best-effort job bursts to the GCP pool, its instance boots from its
own startup-script metadata (the cluster token from Secret Manager), joins, the job runs,
the idle pool is torn down and nothing is left in the emulator; the token never appears in
the instance's metadata, the logs or the store. Then a spot notice (the instance STOPPING):
the job is asked to checkpoint, is preempted, and resumes from its checkpoint on a new
instance."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.state import InstanceRecord, open_store
from tests.conftest import ROOT, wait_until
from tests.emulators.gce import GceEmulator
from tests.integration.controller.test_burst import SPOT_JOB
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration

PROJECT = "meshctl-burst"
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: gcp-test}}
spec:
  pools:
    - name: onprem
      provider: local
      labels: {{site: lab, tier: strategic}}
      nodes:
        - {{name: gpu, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
    - name: gcp-burst
      provider: gcp
      project: {project}
      region: us-central1
      zones: [us-central1-a]
      endpoint_url: {gce}
      labels: {{tier: burst, vendor: gcp}}
      node_types: [{{name: g2-standard-8, max_nodes: 2, spot: true}}]
      max_nodes: 2
      idle_minutes: 0.1
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
"""


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, GceEmulator]]:
    base = tmp_path_factory.mktemp("gcp")
    with GceEmulator() as gce:
        checkpoints = base / "checkpoints"
        mesh_yaml = MESH.format(project=PROJECT, gce=gce.endpoint, checkpoints=checkpoints)
        (base / "mesh.yaml").write_text(mesh_yaml)
        policies = base / "policies"
        shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("tests"))
        burst_yaml = policies / "burst.yaml"
        burst_yaml.write_text(burst_yaml.read_text().replace("> 600.0", "> 3.0"))
        budgets = policies / "budgets.yaml"  # this mesh has no AWS pool: a rule naming it
        lines = budgets.read_text().splitlines(keepends=True)
        budgets.write_text("".join(line for line in lines if "aws-monthly" not in line))
        first = policies / "onprem-first.yaml"
        first.write_text(first.read_text().replace(", aws-burst", ""))
        mesh = Mesh(base / "home", base)
        mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--policies", str(policies),
                 "--interval", "0.5")  # fmt: skip
        try:
            yield mesh, gce
        finally:
            mesh.run("down", "--force", check=False)
        assert gce.instances() == []  # down terminated whatever was left


def _blocked(mesh: Mesh, name: str) -> str:
    blocker = mesh.submit("--gpus", "1", "--criticality", "critical", "--name", name, "--",
                          "python", "-c", "import time; time.sleep(600)")  # fmt: skip
    mesh.wait_for(blocker, "running")
    return blocker


def test_a_best_effort_job_bursts_to_gcp_runs_and_the_idle_pool_is_torn_down(
    burst: tuple[Mesh, GceEmulator],
) -> None:
    mesh, gce = burst
    blocker = _blocked(mesh, "blocker")
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spill", "--",
                      "python", "-c", "print('ran in GCP')")  # fmt: skip
    mesh.wait_done(job)
    assert mesh.show(job)["pool"] == "gcp-burst"
    assert "ran in GCP" in mesh.run("jobs", "logs", job).stdout
    [instance] = gce.instances()
    node = f"gcp-burst/{instance['zone'].rsplit('/', 1)[-1]}-{instance['name']}"
    wait_until(  # its agent, started by the script, is pulled like an on-prem node's
        "the cloud node's agent was never pulled",
        lambda: (_agent(mesh, node) or {}).get("probed_at") is not None,
        WAIT_S,
        every_s=0.5,
    )
    [script] = [i["value"] for i in instance["metadata"]["items"] if i["key"] == "startup-script"]
    assert "--role head" in script
    token = gce.secrets.value(PROJECT, "meshctl-gcp-test-gcp-burst-ray-token")
    assert token is not None
    assert token not in str(instance)  # not in its metadata, labels or anything else
    with open_store(mesh.home) as store:
        wait_until(  # idle for 6 s: torn down
            "the idle GCP pool was not torn down",
            lambda: (
                not gce.instances()
                and all(i.state == "terminated" for i in store.list(InstanceRecord))
            ),
            WAIT_S,
            every_s=0.5,
        )
    assert _nowhere(token, mesh.home)
    mesh.run("jobs", "cancel", blocker)


def _agent(mesh: Mesh, node: str) -> dict[str, object] | None:
    rows = json.loads(mesh.run("nodes", "list", "-o", "json").stdout)
    found: dict[str, object] | None = next((r["agent"] for r in rows if r["node"] == node), None)
    return found


def _nowhere(token: str, home: Path) -> bool:
    """Whether ``token`` is in no log and not in the store (the run folder's token files are
    where it belongs: the controller's copy and each node's, 0600)."""
    logs = [p for p in home.rglob("*.log") if p.is_file()]
    stored = [p for p in home.glob("state.db*") if p.is_file()]
    return all(token.encode() not in p.read_bytes() for p in [*logs, *stored])


def test_a_gcp_spot_notice_checkpoints_the_job_and_it_resumes_on_a_new_instance(
    burst: tuple[Mesh, GceEmulator],
) -> None:
    """Compute Engine begins preempting the spot instance (STOPPING, about 30 s): the job is
    asked to checkpoint and does, is preempted, the instance goes, and the job runs on a new
    instance from its checkpoint."""
    mesh, gce = burst
    blocker = _blocked(mesh, "blocker2")
    job = mesh.submit("--gpus", "1", "--criticality", "best-effort", "--name", "spot", "--",
                      "python", "-c", SPOT_JOB)  # fmt: skip
    mesh.wait_for(job, "running")
    assert mesh.show(job)["pool"] == "gcp-burst"
    [first] = [i["name"] for i in gce.instances()]
    gce.preempt(first, notice=True)  # STOPPING: about 30 s left
    mesh.wait_for(job, "preempted")
    wait_until(
        "the job was not asked to checkpoint",
        lambda: "checkpointed at step" in mesh.run("jobs", "logs", job).stdout,
        WAIT_S,
        every_s=0.5,
    )
    gce.preempt(first)  # taken back
    mesh.wait_done(job)
    shown = mesh.show(job)
    assert (shown["attempt"], shown["pool"]) == (2, "gcp-burst"), mesh.story(job)
    assert all(first not in node for node in shown["nodes"])  # type: ignore[union-attr]
    logs = mesh.run("jobs", "logs", job).stdout
    resumed = re.search(r"attempt 2 resumed from step (\d+)", logs)
    assert resumed is not None
    assert int(resumed.group(1)) > 0  # from its checkpoint, not from scratch
    kinds = [e["kind"] for e in shown["events"]]  # type: ignore[index, union-attr]
    assert kinds.count("job.preempted") == 1
    assert "job.checkpoint-request" in kinds
    mesh.run("jobs", "cancel", blocker)
