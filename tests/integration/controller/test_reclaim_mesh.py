"""Reclaim on a real embedded mesh (issue 50): two teams of one cohort, 4 GPUs of quota each,
on a local pool of two 4-GPU nodes. The borrower fills the pool while the lender is idle; the
lender comes back with jobs of the same priority and takes its 4 GPUs back, no preemption rule
needed: the two end at half the pool each, the borrower's reclaimed jobs wait (the lender's
quota is not lent again while it is owed), and each reclaimed job says why.

The timing (within the grace and two cycles) is held by the differential check on a virtual
clock, on both the controller and the simulator (``tests/unit/lifecycle/test_differential.py``);
here the real controller, Ray Jobs and the store do it, at whatever pace the machine allows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.meshes import Mesh

pytestmark = pytest.mark.integration

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: reclaim-lab}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - {name: n1, gpus: 4, cpus: 2, memory_gib: 4GiB,
           accelerator: {vendor: nvidia, model: A100, memory_gib: 80GiB}}
        - {name: n2, gpus: 4, cpus: 2, memory_gib: 4GiB,
           accelerator: {vendor: nvidia, model: A100, memory_gib: 80GiB}}
"""
POLICY = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: teams}
spec:
  priority_classes:
    - {name: standard, value: 100}
  default_priority_class: {train: standard, batch: standard, inference: standard,
                           interactive: standard}
  quotas:
    - {team: lender, cohort: lab, gpus: 4}
    - {team: borrower, cohort: lab, gpus: 4}
  reclaim: {grace_s: 3s, min_runtime_s: 0s}
"""
SLEEP = ("--", "python", "-c", "import time; time.sleep(900)")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("reclaim")
    (base / "mesh.yaml").write_text(MESH)
    (base / "policies").mkdir()
    (base / "policies" / "teams.yaml").write_text(POLICY)
    mesh = Mesh(base / "home", base)
    mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--policies", str(base / "policies"))
    try:
        yield mesh
    finally:
        mesh.run("down", "--force", check=False)


def submit(mesh: Mesh, team: str, name: str) -> str:
    return mesh.submit("--team", team, "--name", name, "--gpus", "2", "--cpus", "0.25", *SLEEP)


def queues(mesh: Mesh) -> dict[str, dict[str, object]]:
    (cohort,) = json.loads(mesh.run("queues", "-o", "json").stdout)["cohorts"]
    return {str(t["team"]): t for t in cohort["teams"]}


def test_a_lender_takes_its_quota_back_and_the_two_teams_hold_half_each(lab: Mesh) -> None:
    borrowed = [submit(lab, "borrower", f"b{i}") for i in range(4)]
    for job in borrowed:
        lab.wait_for(job, "running")
    assert queues(lab)["borrower"]["borrowed_gpus"] == 4.0
    back = [submit(lab, "lender", f"l{i}") for i in range(2)]
    for job in back:
        lab.wait_for(job, "running")
    taken = [job for job in borrowed if lab.state(job) != "running"]
    assert len(taken) == 2, {job: lab.state(job) for job in borrowed}
    teams = queues(lab)
    assert (teams["lender"]["used_gpus"], teams["borrower"]["used_gpus"]) == (4.0, 4.0)
    assert teams["borrower"]["borrowed_gpus"] == 0.0
    assert teams["borrower"]["waiting_jobs"] == 2  # not lent the lender's quota again
    for job in taken:
        shown = lab.show(job)
        events = [e["message"] for e in shown["events"]]  # type: ignore[union-attr]
        said = [m for m in events if "reclaimed for team lender, below its quota" in m]
        assert said, events
    for job in borrowed + back:
        lab.run("jobs", "cancel", job)
