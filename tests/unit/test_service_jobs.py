"""Services and elastic train jobs in job files: bad input is one line with exit 2 and nothing
queued."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.cli.app import app

pytestmark = pytest.mark.unit

SERVICE = """\
apiVersion: meshctl/v1
kind: Job
metadata: {name: svc}
spec:
  kind: inference
  working_dir: code
  serve:
    app: %s
    replicas: {min: %d, max: %d}
    target_ongoing_requests: %s
  resources: {gpus: 1}
"""

BAD = [
    pytest.param(("nosuch:app", 1, 2, "2"), "error: serve.app: nosuch:app in {work}: cannot "
                 "import nosuch: ModuleNotFoundError: No module named 'nosuch'",
                 id="no such module"),
    pytest.param(("app:other", 1, 2, "2"), "error: serve.app: app:other in {work}: module app "
                 "has no other", id="no such attribute"),
    pytest.param(("app:app", 3, 2, "2"), "error: {job}:9: spec.serve.replicas: min (3) is more "
                 "than max (2)", id="min over max"),
    pytest.param(("app:app", 1, 2, "0"), "error: {job}:10: spec.serve.target_ongoing_requests: "
                 "expected greater than 0, got 0", id="a target of 0"),
    pytest.param(("app:app", 1, 2, "2"), "error: serve.app: app:app in {work}: app.app is not a "
                 "Serve application (Deployment.bind())", id="not a Serve application"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "message"), BAD)
def test_a_bad_service_is_refused_before_queueing(cli, tmp_path: Path, fields, message) -> None:
    work = tmp_path / "code"
    work.mkdir()
    (work / "app.py").write_text("app = object()\n")
    job = tmp_path / "job.yaml"
    job.write_text(SERVICE % fields)
    home = tmp_path / "home"
    result = cli.invoke(app, ["--home", str(home), "submit", str(job)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message.format(work=work, job=job))
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (home / "state.db").exists()


SERVE_APP = """\
class _Deployment:
    name = "Classifier"


class _Application:  # what Deployment.bind() gives, as far as submit looks
    _bound_deployment = _Deployment()


app = _Application()
"""


def test_a_service_is_queued_with_its_ingress_deployment(cli, tmp_path: Path) -> None:
    import json

    work = tmp_path / "code"
    work.mkdir()
    (work / "app.py").write_text(SERVE_APP)
    job = tmp_path / "job.yaml"
    job.write_text(SERVICE % ("app:app", 1, 2, "2"))
    home = tmp_path / "home"
    result = cli.invoke(app, ["--home", str(home), "submit", str(job), "-o", "json"])
    assert result.exit_code == 0, result.output
    job_id = json.loads(result.stdout)["id"]
    from meshctl.state import JobRecord, SqliteStore

    with SqliteStore(home / "state.db") as store:
        record = store.get(JobRecord, job_id)
    assert record is not None
    assert record.spec["spec"]["serve"]["deployment"] == "Classifier"


ELASTIC = """\
apiVersion: meshctl/v1
kind: Job
metadata: {name: el}
spec:
  kind: train
  train: {loop: 'model:fit', workers: %s}
  resources: {gpus: 1%s}
"""


@pytest.mark.parametrize(
    ("workers", "more", "message"),
    [
        ("{min: 3, max: 2}", "", "spec.train.workers: min (3) is more than max (2)"),
        ("{min: 1, max: 3}", ", nodes: 2",
         "spec: resources.nodes (2) must be train.workers.max (3), or left out"),
    ],
    ids=["min over max", "nodes not max"],
)  # fmt: skip
def test_a_bad_elastic_job_is_one_line(cli, tmp_path: Path, workers, more, message) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(ELASTIC % (workers, more))
    result = cli.invoke(app, ["validate", str(job)])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_elastic_job_runs_one_worker_a_node_on_its_most(cli, tmp_path: Path) -> None:
    from meshctl.files import load_text

    (loaded,) = load_text(ELASTIC % ("{min: 1, max: 3}", ""), "job.yaml")
    spec = loaded.document.spec  # type: ignore[union-attr]
    assert (spec.resources.nodes, spec.workers, spec.elastic.min) == (3, 3, 1)
