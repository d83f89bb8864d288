"""A price the catalog marks uncertain is flagged wherever it is shown: a ``~`` and a caption
in tables, ``price_uncertain: true`` in JSON (providers, pools, explain's burst)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from tests.conftest import PROVIDERS, ROOT

pytestmark = pytest.mark.unit

# A GCP pool of a2-ultragpu-1g (every price of it marked uncertain) beside a certain one
MESH = """apiVersion: meshctl/v1
kind: Mesh
metadata: {name: m}
spec:
  pools:
    - name: onprem
      provider: local
      nodes: [{name: n, gpus: 1, accelerator: {model: L4, memory_gib: 24}, cpus: 1,
               memory_gib: 2}]
    - name: ultra
      provider: gcp
      project: meshctl-demo
      region: us-central1
      labels: {tier: burst}
      node_types: [{name: a2-ultragpu-1g, max_nodes: 2, spot: true}]
    - name: g2
      provider: gcp
      project: meshctl-demo
      region: us-central1
      labels: {tier: burst}
      node_types: [{name: g2-standard-8, max_nodes: 2}]
"""
CAPTION = "~ marks a price the catalog says may be wrong (see its notes)"


@pytest.fixture
def mesh(tmp_path: Path) -> list[str]:
    path = tmp_path / "mesh.yaml"
    path.write_text(MESH)
    return ["--mesh", str(path), "--providers", str(PROVIDERS)]


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_pools_list_marks_the_pool_priced_from_an_uncertain_price(mesh: list[str]) -> None:
    rows = {r["pool"]: r for r in json.loads(run(*mesh, "pools", "list", "-o", "json"))}
    assert {k: r["price_uncertain"] for k, r in rows.items()} == {
        "onprem": False,
        "ultra": True,
        "g2": False,
    }
    table = run(*mesh, "pools", "list")
    assert f"~{rows['ultra']['usd_per_gpu_hour']:.4f}".rstrip("0") in table
    assert CAPTION in " ".join(table.split())


def test_pools_show_marks_each_node_type_s_price(mesh: list[str]) -> None:
    [price] = json.loads(run(*mesh, "pools", "show", "ultra", "-o", "json"))["prices"]
    assert (price["node_type"], price["price_uncertain"]) == ("a2-ultragpu-1g", True)
    assert price["spot_usd_per_hour"] is not None  # the pool allows spot
    assert "~" in run(*mesh, "pools", "show", "ultra", "-o", "table")


def test_providers_prices_mark_the_uncertain_rows_only(mesh: list[str]) -> None:
    rows = json.loads(run(*mesh, "providers", "prices", "--region", "us-central1", "-o", "json"))
    marked = {r["node_type"] for r in rows if r["price_uncertain"]}
    assert marked == {
        "a2-ultragpu-1g",
        "a2-ultragpu-2g",
        "a2-ultragpu-4g",
        "a2-ultragpu-8g",
        "a3-highgpu-1g",
        "a3-highgpu-2g",
        "a3-highgpu-4g",
        "a3-highgpu-8g",
    }
    table = run(*mesh, "providers", "prices", "--gpu", "L4", "--region", "us-central1")
    assert "~" not in table  # nothing uncertain shown: no mark, no caption
    assert CAPTION not in " ".join(table.split())


def test_explain_flags_a_burst_priced_from_an_uncertain_price(
    mesh: list[str], tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: big}\nspec:\n  kind: batch\n"
        "  entrypoint: python x.py\n  criticality: best-effort\n"
        "  resources: {gpus: 1, gpu_memory_gib: 80, cpus: 1, memory_gib: 8}\n"
    )
    state = tmp_path / "state.yaml"
    state.write_text(
        "apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\n"
        "spec:\n  pools: {onprem: {free_gpus: 0, expected_wait_s: 1h}}\n"
    )
    policies = ["--policies", str(ROOT / "policies")]
    shown = json.loads(
        run(*mesh, "explain", str(job), "--mesh", str(state), *policies, "-o", "json")
    )
    [launch] = shown["actions"]
    assert (launch["node_type"], launch["price_uncertain"]) == ("a2-ultragpu-1g", True)
    table = run(*mesh, "explain", str(job), "--mesh", str(state), *policies)
    assert "~ the catalog marks this node type's price in the region uncertain" in table
