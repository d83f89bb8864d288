"""`meshctl explain JOB.yaml`: the scheduler's decision for a job file, rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT

from meshctl.cli.app import app

pytestmark = pytest.mark.unit

BASE = ["--mesh", str(EXAMPLES / "mesh.yaml"), "explain"]
POLICIES = ["--policies", str(ROOT / "policies")]


def explain(cli, job: str, *extra: str) -> dict:
    result = cli.invoke(app, [*BASE, str(EXAMPLES / "jobs" / job), *POLICIES, "-o", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_an_idle_mesh_places_the_job(cli):
    shown = explain(cli, "train-resnet.yaml")
    decision = shown["decision"]
    assert decision["status"] == "placed"
    assert decision["summary"] in ("placed on gpu-rack1", "placed on gpu-rack2")
    assert shown["actions"][0]["action"] == "place"


def test_a_saturated_on_prem_pool_makes_best_effort_work_burst(cli, tmp_path: Path):
    state = tmp_path / "busy.yaml"
    state.write_text(
        "apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\n"
        "spec:\n  pools: {onprem: {free_gpus: 0, expected_wait_s: 30m}}\n"
    )
    shown = explain(cli, "batch-embed.yaml", "--mesh", str(state))
    assert shown["decision"]["status"] == "provisioning"
    (launch,) = shown["actions"]
    # a quarter GPU (4 GiB of a 24 GiB L4 fits): the only GCP type, g2-standard-8, spot 0.34
    # USD/h, beats AWS g6.xlarge spot-less 0.8048
    assert (launch["pool"], launch["node_type"], launch["spot"]) == (
        "gcp-burst",
        "g2-standard-8",
        True,
    )
    assert launch["price_uncertain"] is False  # g2 prices follow the catalog's exact rule


def test_critical_work_waits_with_the_reason(cli, tmp_path: Path):
    state = tmp_path / "busy.yaml"
    state.write_text(
        "apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\n"
        "spec:\n  pools: {onprem: {free_gpus: 0, expected_wait_s: 2h}}\n"
    )
    decision = explain(cli, "serve-pii.yaml", "--mesh", str(state))["decision"]
    assert decision["status"] == "pending"
    assert decision["summary"] == (
        "pending; 3 nodes; 3 lack 1 free GPU; burst not allowed: no burst rule applies to this"
        " job now"
    )


DATA_JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {name: read-corpus}
spec:
  kind: batch
  entrypoint: python read.py
  resources: {gpus: 1, cpus: 500m, memory_gib: 1GiB}
  data:
    - {name: corpus, location: /data/corpus, size_gib: 2GiB}
    - {name: vocab, location: /data/vocab, size_gib: 512MiB}
    - {name: notes, location: /data/notes}
"""


def test_candidates_show_the_bytes_of_the_jobs_data_local(cli, tmp_path: Path):
    # From the files, no node holds a data set yet: 0 of the 2.5 GiB that have a size.
    job = tmp_path / "read.yaml"
    job.write_text(DATA_JOB)
    args = [*BASE, str(job), *POLICIES]
    result = cli.invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    candidates = json.loads(result.stdout)["decision"]["candidates"]
    assert candidates
    assert {(c["data_local_gib"], c["data_gib"]) for c in candidates} == {(0.0, 2.5)}
    table = cli.invoke(app, args, terminal_width=200)
    assert table.exit_code == 0, table.output
    assert "data local 0.0 of 2.5 GiB" in table.stdout


@pytest.mark.parametrize(
    ("local_gib", "gib", "shown"),
    [
        pytest.param(1.5, 2.0, "data local 1.5 of 2.0 GiB", id="sized"),
        pytest.param(0.0, 0.03125, "data local 0.0 of 0.0312 GiB", id="under-a-gib"),
        pytest.param(0.0, 0.0, "data local: no sizes given", id="none-sized"),
        pytest.param(None, None, "", id="no-data-sets"),
    ],
)
def test_bytes_local_as_people_read_them(local_gib, gib, shown):
    from meshctl.app.decisions import data_local

    assert data_local(local_gib, gib) == shown


def test_a_job_file_is_planned_against_the_live_mesh_where_a_controller_runs(cli) -> None:
    """Reported: explain JOB.yaml said "placed on gpu-rack1" while that node was full: it
    planned against the idle mesh, and did not say so."""
    import os

    from meshctl.state import JobState, open_store
    from tests.unit.controller.test_decide import attempt, job
    from tests.unit.controller.test_enforced_policies import pretend_controller

    home = Path(os.environ["MESHCTL_HOME"])
    with open_store(home) as store:  # four GPUs held on each A100 node by a running job
        for node in ("gpu-rack1", "gpu-rack2"):
            view = job(
                node, gpus=4, state=JobState.RUNNING, attempt=attempt(node, nodes=(node,), gpus=4)
            )
            store.create(view.record)
            assert view.attempt is not None
            store.create(view.attempt)
    idle = explain(cli, "train-resnet.yaml")
    assert idle["planned_against"] == "idle"
    assert idle["decision"]["status"] == "placed"
    pretend_controller(home)
    live = explain(cli, "train-resnet.yaml")
    assert live["planned_against"] == "live"
    assert live["decision"]["status"] != "placed", live["decision"]["summary"]
    table = cli.invoke(app, [*BASE, str(EXAMPLES / "jobs" / "train-resnet.yaml"), *POLICIES])
    said = "planned against the live mesh as the controller last recorded it (2 jobs running)"
    assert said in table.stdout
