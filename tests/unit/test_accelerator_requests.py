"""What submit refuses of a job's accelerator request, each in one line naming the file, line
and field, with exit 2 and nothing queued: a fungible class with no throughput factor, a TPU
job whose workers do not fill whole slices, a slice shape its model has not. A request that
fits is taken, a fungible one with its options worked out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app

pytestmark = pytest.mark.unit

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: mixed}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - {name: h100, count: 2, gpus: 8, cpus: 8, memory_gib: 64GiB,
           accelerator: {model: H100, memory_gib: 80GiB}}
        - {name: mi, gpus: 8, cpus: 8, memory_gib: 64GiB,
           accelerator: {vendor: amd, model: MI300X, memory_gib: 192GiB}}
        - {name: gaudi, gpus: 8, cpus: 8, memory_gib: 64GiB,
           accelerator: {vendor: intel, model: Gaudi, memory_gib: 32GiB}}
        - {name: tpu, count: 8, gpus: 4, cpus: 8, memory_gib: 64GiB,
           accelerator: {vendor: google, model: TPU-v5e, memory_gib: 16GiB}}
"""
JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {name: j}
spec:
  kind: batch
  entrypoint: python x.py
  resources:
    cpus: 1
    memory_gib: 1GiB
    %s
"""


@pytest.mark.parametrize(
    ("resources", "line", "said"),
    [
        ("accelerator: {equivalents: 8, any_of: [H100, Gaudi]}", 10,
         "spec.resources.accelerator.any_of[1]: expected models with a throughput factor in"
         " the accelerator registry for a fungible request (equivalents of H100), got 'Gaudi',"
         " which has none"),
        ("accelerator: {equivalents: 8, vendor: intel}", 10,
         "spec.resources.accelerator.equivalents: expected a class of models with throughput"
         " factors (any_of, or models of vendor intel the mesh or catalogs have) for"
         " equivalents of H100; there is none"),
        ("gpus: 4\n    nodes: 6\n    accelerator: {vendor: google, topology: 4x4}", 11,
         "spec.resources.nodes: expected a worker count that is a multiple of the 4 hosts of a"
         " 4x4 TPU-v5e slice, got 6"),
        ("gpus: 8\n    nodes: 4\n    accelerator: {any_of: [TPU-v5e], topology: 4x4}", 10,
         "spec.resources.gpus: expected 4, the chips on each host of a 4x4 TPU-v5e slice,"
         " got 8"),
        ("gpus: 4\n    accelerator: {any_of: [TPU-v5e], topology: 3x3}", 11,
         "spec.resources.accelerator.topology: expected a slice shape of the models it may use"
         " (TPU-v5e: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16), got '3x3'"),
    ],
    ids=["a-model-with-no-factor", "a-class-with-no-factor", "workers-not-whole-slices",
         "not-the-chips-of-a-host", "an-unknown-slice-shape"],
)  # fmt: skip
def test_a_request_that_cannot_be_met_is_one_line_and_nothing_is_queued(
    cli: CliRunner, tmp_path: Path, resources: str, line: int, said: str
) -> None:
    (tmp_path / "mesh.yaml").write_text(MESH)
    job = tmp_path / "job.yaml"
    job.write_text(JOB % resources)
    mesh = ["--mesh", str(tmp_path / "mesh.yaml")]
    result = cli.invoke(app, [*mesh, "submit", str(job)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {job}:{line}: {said}"
    listed = cli.invoke(app, [*mesh, "jobs", "list", "-o", "json"])
    assert listed.stdout.strip() in ("[]", "")


@pytest.mark.parametrize(
    ("resources", "options"),
    [
        ("accelerator: {equivalents: 8, any_of: [H100, MI300X]}",
         [{"model": "MI300X", "gpus": 7}, {"model": "H100", "gpus": 8}]),
        ("gpus: 4\n    nodes: 8\n    accelerator: {vendor: google, topology: 4x4}", []),
    ],
    ids=["fungible-options-worked-out", "two-whole-tpu-slices"],
)  # fmt: skip
def test_a_request_that_fits_is_queued(
    cli: CliRunner, tmp_path: Path, resources: str, options: list[dict[str, object]]
) -> None:
    (tmp_path / "mesh.yaml").write_text(MESH)
    job = tmp_path / "job.yaml"
    job.write_text(JOB % resources)
    mesh = ["--mesh", str(tmp_path / "mesh.yaml")]
    result = cli.invoke(app, [*mesh, "submit", str(job), "-o", "json"])
    assert result.exit_code == 0, result.output
    job_id = json.loads(result.stdout)["id"]
    shown = cli.invoke(app, [*mesh, "jobs", "show", job_id, "-o", "json"])
    resources = json.loads(shown.stdout)["resources"]
    assert resources["accelerator"].get("options", []) == options
