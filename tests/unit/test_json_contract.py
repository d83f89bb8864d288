"""JSON output as a contract: every read command, run with ``-o json`` against a store with
jobs in several states, prints exactly its documented shape (``meshctl/app/shapes``): no key
missing or extra, the right types, every ``_at`` time a UTC ISO-8601 string. docs/JSON.md is
what the shapes say."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from meshctl.app import shapes
from meshctl.app.shapes.doc import markdown
from meshctl.app.shapes.mesh import PoolShowExtra
from meshctl.cli.app import app
from meshctl.model.mesh import Pool
from meshctl.state import (
    AttemptDetail,
    AttemptRecord,
    Decision,
    Event,
    JobRecord,
    JobState,
    NodeDetail,
    NodeRecord,
    PoolRecord,
    open_store,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

NOW = time.time()
ALLOCATION = {"node": "gpu-rack1", "gpu_indices": [0], "gpu_share": 1.0, "cpus": 0.25,
              "memory_gib": 0.5, "nic_gbps": 0.0}  # fmt: skip
PLACED = AttemptDetail.of({"allocations": [ALLOCATION]})
EXPLANATION = {
    "summary": "pending: 2 nodes; 2 lack 4 free GPUs",
    "status": "pending",
    "reason": "",
    "nodes_considered": 2,
    "filtered": {"lack 4 free GPUs": 2},
    "exhausted": "gpus",
    "candidates": [{"nodes": ["gpu-rack1"], "total": 0.5, "scores": {"binpack": 0.5}}],
    "notes": ["burst not allowed"],
}


def job(job_id: str, state: JobState, spec: dict[str, Any], pool: str | None = None) -> JobRecord:
    resources = {"gpus": 1.0, "cpus": 0.25, "memory_gib": 0.5, "nic_gbps": 0.0, "nodes": 1}
    body = {"kind": "batch", "entrypoint": "python x.py", "resources": resources} | spec
    return JobRecord(job_id, job_id.rsplit("-", 1)[0], "default", state, 200,
                     {"spec": body}, pool, NOW - 60, NOW - 30)  # fmt: skip


@pytest.fixture
def mesh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A mesh from ``meshctl init``, with a store holding jobs running, waiting and done,
    their attempts, events and decisions, nodes (one draining) and pool records."""
    assert CliRunner().invoke(app, ["init", str(tmp_path / "m")]).exit_code == 0
    monkeypatch.chdir(tmp_path / "m")
    home = tmp_path / "home"
    monkeypatch.setenv("MESHCTL_HOME", str(home))
    train = {"kind": "train", "entrypoint": None, "train": {"loop": "model:fit", "config": {}}}
    with open_store(home) as store:
        store.create(job("runs-000001", JobState.RUNNING, {}, "onprem"))
        store.create(job("waits-000002", JobState.PENDING, {"priority_class": "batch"}))
        store.create(job("done-000003", JobState.SUCCEEDED, train, "onprem"))
        store.create(
            AttemptRecord("runs-000001-1", "runs-000001", 1, "onprem", "meshctl-runs-000001-1",
                          "running", NOW - 20, None, "", PLACED)
        )  # fmt: skip
        store.create(
            AttemptRecord("done-000003-1", "done-000003", 1, "onprem", "meshctl-done-000003-1",
                          "succeeded", NOW - 50, NOW - 40, "", PLACED)
        )  # fmt: skip
        labels = {"rack": "rack1"}
        resources = {"gpus": 4, "cpus": 1.0, "memory_gib": 2.0, "accelerator": "A100",
                     "alive": True}  # fmt: skip
        store.create(NodeRecord("onprem/gpu-rack1", "onprem", "ready", labels, resources, NOW))
        store.create(
            NodeRecord("onprem/gpu-rack2", "onprem", "draining", labels, resources, NOW,
                       NodeDetail(deadline_s=NOW + 600, reason="GPU XID 79"))
        )  # fmt: skip
        store.create(PoolRecord("onprem", "local", "up", {"nodes": 2, "gpus": 8}, NOW))
        store.create(PoolRecord("aws-burst", "aws", "idle", {"spend_usd": 1.5}, NOW))
        store.append_event(Event(NOW - 60, "job.pending", "waits-000002", "submitted"))
        store.append_event(Event(NOW - 10, "node.draining", None, "gpu-rack2: draining"))
        store.record_decision(Decision(NOW, "waits-000002", "pending", "abc", EXPLANATION))
    return {"running": "runs-000001", "waiting": "waits-000002", "done": "done-000003"}


def commands(ids: dict[str, str]) -> list[tuple[list[str], Any]]:
    """Every read command with what its output must be (``shapes.OUTPUTS``, by command)."""
    by = {o.command: o.shape for o in shapes.OUTPUTS}
    return [
        (["pools", "check"], by["meshctl pools check"]),
        (["status"], by["meshctl status"]),
        (["queues"], by["meshctl queues"]),
        (["pools", "list"], by["meshctl pools list"]),
        (["nodes", "list"], by["meshctl nodes list"]),
        (["nodes", "show", "gpu-rack1"], by["meshctl nodes show NODE"]),
        (["jobs", "list"], by["meshctl jobs list"]),
        (["jobs", "show", ids["running"]], by["meshctl jobs show JOB"]),
        (["jobs", "show", ids["done"]], by["meshctl jobs show JOB"]),
        (["jobs", "wait", ids["done"]], by["meshctl jobs wait JOB..."]),
        (["explain", ids["running"]], by["meshctl explain JOB"]),
        (["explain", ids["waiting"]], by["meshctl explain JOB"]),
        (["explain", "jobs/gang-llm.yaml"], by["meshctl explain JOB.yaml"]),
        # its dataset (s3://corpus/web-v3, no endpoint) is not listed: no network in tests
        (["submit", "jobs/gang-llm.yaml", "--dry-run", "--no-data-check"], by["meshctl submit"]),
        (["submit", "jobs/batch-embed.yaml", "--explain"], by["meshctl submit"]),
        (["policy", "validate"], by["meshctl policy validate"]),
        (["policy", "test"], by["meshctl policy test"]),
        (["policy", "explain", "jobs/gang-llm.yaml"], by["meshctl policy explain JOB.yaml"]),
        # the history's files here are fragments: a trace (the one made up here) is replayed
        (["policy", "diff", "--trace", "synthetic", "--since", "1h"], by["meshctl policy diff"]),
        (["providers", "list"], by["meshctl providers list"]),
        (["providers", "prices"], by["meshctl providers prices"]),
        (["providers", "heads"], by["meshctl providers heads"]),
        (["providers", "accelerators"], by["meshctl providers accelerators"]),
        (["validate", "."], by["meshctl validate PATH..."]),
        (["jobs", "cancel", ids["waiting"], ids["done"]], by["meshctl jobs cancel JOB..."]),
    ]


def walk(data: Any, path: str = "") -> list[str]:
    """What no output may hold anywhere: a placeholder, a key that is prose, an ``_at`` key
    that is not a time."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            if not key.replace("_", "").isalnum() or key != key.lower():
                found.append(f"{path}: key {key!r} is not snake_case")
            if key.endswith("_at") and not (value is None or str(value).endswith("Z")):
                found.append(f"{path}.{key}: {value!r} is not a UTC time")
            found += walk(value, f"{path}.{key}")
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += walk(item, f"{path}[{i}]")
    elif data in ("-", "") or (isinstance(data, str) and " / " in data):
        found.append(f"{path}: placeholder {data!r}")
    return found


def test_every_read_command_prints_its_shape(mesh: dict[str, str]) -> None:
    runner = CliRunner()
    for args, shape in commands(mesh):
        result = runner.invoke(app, [*args, "-o", "json"])
        lines = result.stderr.splitlines()
        if args[:2] == ["pools", "check"] and result.exit_code == 1:  # clouds without keys
            TypeAdapter(shapes.ErrorDocument).validate_json(lines.pop())
        elif args == ["status"]:  # no controller runs here: exit 1, after the document
            assert result.exit_code == 1, result.output
            TypeAdapter(shapes.ErrorDocument).validate_json(lines.pop())
        else:
            assert result.exit_code == 0, (args, result.output)
        for line in lines:  # JSON lines only: warnings
            TypeAdapter(shapes.WarningDocument).validate_json(line)
        data = json.loads(result.stdout)
        TypeAdapter(shape).validate_python(data)
        assert walk(data) == [], args
        if isinstance(data, list):
            assert data, f"{args}: an empty list checks no item's shape"


@pytest.mark.parametrize("pool", ["onprem", "aws-burst", "gcp-burst"])
def test_pools_show_is_the_pool_as_configured_and_its_prices(
    mesh: dict[str, str], pool: str
) -> None:
    result = CliRunner().invoke(app, ["pools", "show", pool, "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    TypeAdapter(PoolShowExtra).validate_python({"prices": data.pop("prices")})
    configured = TypeAdapter(Pool).validate_python(data)
    assert configured.model_dump(mode="json") == data  # every key, nothing more


def test_schema_prints_a_json_schema(mesh: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["schema", "Job", "-o", "json"])
    document = json.loads(result.stdout)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["$id"].endswith(":Job")


def test_gc_with_no_cloud_pool_is_an_empty_list(mesh: dict[str, str], tmp_path: Path) -> None:
    local = tmp_path / "local.yaml"
    local.write_text(
        (ROOT / "examples" / "mesh.yaml").read_text().split("    - name: aws-burst")[0]
    )
    result = CliRunner().invoke(app, ["--mesh", str(local), "gc", "--dry-run", "-o", "json"])
    assert (result.exit_code, json.loads(result.stdout)) == (0, [])


def test_docs_json_md_is_what_the_shapes_say() -> None:
    written = (ROOT / "docs" / "JSON.md").read_text()
    assert written == markdown(), "run: python -m meshctl.app.shapes.doc > docs/JSON.md"
