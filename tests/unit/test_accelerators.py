"""The accelerator registry (``providers/accelerators.yaml``) as data: the shipped one reads
back as it was written, one that contradicts itself is refused with its file, line and field,
and an accelerator a mesh adds to its own registry is one entry, no code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from meshctl.catalog import accelerators_path, load_accelerators
from meshctl.cli.app import app
from meshctl.model import Accelerators
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

SHIPPED = ROOT / "providers" / "accelerators.yaml"


def test_the_shipped_registry_reads_back_as_it_was_written() -> None:
    registry = load_accelerators()
    again = Accelerators.model_validate(registry.model_dump(mode="json"))
    assert again == registry
    spec = registry.spec
    assert {v.name for v in spec.vendors} == {"nvidia", "amd", "google", "aws", "intel"}
    assert {v.name: v.ray_resource for v in spec.vendors} == {
        "nvidia": "GPU", "amd": "GPU", "google": "TPU", "aws": "neuron_cores", "intel": "HPU",
    }  # fmt: skip
    amd = spec.vendor("amd")
    assert amd is not None
    assert (amd.visibility.variable, amd.visibility.by) == ("ROCR_VISIBLE_DEVICES", "uuid")
    trainium, v5p = spec.model("trainium"), spec.model("TPU-v5p")
    assert trainium is not None
    assert trainium.ray_units == 2
    assert v5p is not None
    assert v5p.chips_per_host == 4
    reference = spec.model(spec.reference)
    assert reference is not None
    assert reference.throughput == 1.0


def _registry(tmp_path: Path, edit: str, to: str) -> Path:
    text = SHIPPED.read_text()
    assert edit in text
    (tmp_path / "accelerators.yaml").write_text(text.replace(edit, to, 1))
    return tmp_path / "accelerators.yaml"


@pytest.mark.parametrize(
    ("edit", "to", "field", "says"),
    [
        pytest.param(
            "{vendor: amd, model: MI250X", "{vendor: amdd, model: MI250X", "spec",
            "model MI250X: vendor 'amdd' is not listed (nvidia, amd, google, aws, intel)",
            id="a-model-of-an-unlisted-vendor",
        ),
        pytest.param(
            "model: B200,", "model: h100,", "spec", "models listed twice: H100, h100",
            id="a-model-twice-in-any-case",
        ),
        pytest.param(
            "reference: H100", "reference: H900", "spec",
            "reference 'H900' is not a listed model", id="a-reference-not-listed",
        ),
        pytest.param(
            "interconnect: ICI, chips_per_host: 4,", "interconnect: ICI,", "spec",
            "model TPU-v5p: a sliced vendor's model needs chips_per_host",
            id="a-tpu-without-its-hosts",
        ),
        pytest.param(
            "torch_backend: hccl", "torch_backend: mpi", "spec.vendors[4].torch_backend",
            "expected 'nccl', 'gloo', 'xla' or 'hccl'", id="an-unknown-backend",
        ),
    ],
)  # fmt: skip
def test_a_registry_that_contradicts_itself_is_refused_with_where(
    tmp_path: Path, edit: str, to: str, field: str, says: str
) -> None:
    """One line each, exit 2: the file, the line of the field (the whole spec for what only
    the entries together contradict), the field, and what was expected."""
    path = _registry(tmp_path, edit, to)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert re.fullmatch(rf"error: {re.escape(str(path))}:\d+: {re.escape(field)}: .*", line)
    assert says in line


MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: m}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - {name: n, gpus: 4, cpus: 8, memory_gib: 64GiB,
           accelerator: {vendor: acme, model: X1, memory_gib: 64GiB}}
"""
ACME = """\
    - name: acme
      ray_resource: GPU
      visibility: {variable: ACME_VISIBLE_DEVICES, by: index}
      torch_backend: gloo
"""


def with_acme(providers: Path) -> None:
    """The shipped registry in ``providers``, with one vendor more (acme, its GPUs counted in
    Ray's ``GPU``) and its model X1: two entries, no code."""
    text = SHIPPED.read_text().replace("  models:\n", ACME + "  models:\n", 1)
    text += "    - {vendor: acme, model: X1, memory_gib: 64, interconnect: PCIe}\n"
    (providers / "accelerators.yaml").write_text(text)


@pytest.mark.parametrize("known", [True, False], ids=["its-registry-lists-it", "unknown"])
def test_a_made_up_vendor_is_one_entry_in_the_registry_beside_the_mesh(
    cli: CliRunner, tmp_path: Path, known: bool
) -> None:
    """A mesh's own ``providers/accelerators.yaml`` adds a vendor and its model (no code);
    without it the same mesh is refused, naming the field and what was expected."""
    (tmp_path / "mesh.yaml").write_text(MESH)
    providers = tmp_path / "providers"
    providers.mkdir()
    if known:
        with_acme(providers)
    assert accelerators_path(providers) == (
        providers / "accelerators.yaml" if known else accelerators_path(None)
    )
    mesh = str(tmp_path / "mesh.yaml")
    result = cli.invoke(app, ["--mesh", mesh, "validate", mesh])
    if known:
        assert result.exit_code == 0, result.output
        registry = load_accelerators(providers)
        assert yaml.safe_load(SHIPPED.read_text())["spec"]["reference"] == registry.spec.reference
        acme = registry.spec.vendor("acme")
        assert acme is not None
        assert acme.ray_resource == "GPU"
    else:
        assert result.exit_code == 2
        assert result.stderr.strip() == (
            f"error: {tmp_path / 'mesh.yaml'}:10: spec.pools[0].nodes[0].accelerator.model:"
            " expected an accelerator model the accelerator registry knows, got 'X1' (A100,"
            " A10G, B200, Gaudi, H100, H200, Inferentia2, L4, L40S, MI250X, MI300X, TPU-v5e,"
            " TPU-v5p, TPU-v6e, Trainium, Trainium2)"
        )


CLOUD = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: m}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - {name: n, gpus: 4, cpus: 8, memory_gib: 64GiB,
           accelerator: {accelerator}}
    - name: burst
      {cloud}
      node_types: [{name: {node_type}, max_nodes: 2}]
"""
AWS = "{provider: aws, region: us-east-1}"
GCP = "{provider: gcp, project: my-project, region: us-central1}"


@pytest.mark.parametrize(
    ("accelerator", "cloud", "node_type", "launching", "expected"),
    [
        pytest.param("{model: H100, memory_gib: 80GiB}", AWS, "g6.xlarge", True, [],
                     id="gpus-both"),
        pytest.param("{vendor: google, model: TPU-v5e, memory_gib: 16GiB}", AWS, "g6.xlarge",
                     True, [], id="an-on-prem-tpu-host-counted-in-TPU"),
        pytest.param("{model: H100, memory_gib: 80GiB}", AWS, "trn1.2xlarge", True, [],
                     id="a-trainium-node-type-counted-in-neuron-cores"),
        pytest.param(
            "{model: H100, memory_gib: 80GiB}", GCP, "v5litepod-8", True,
            ["m.yaml:13: spec.pools[1].node_types[0].name: expected a node type launched as a"
             " compute instance: v5litepod-8 is a TPU-v5e slice, made through its own API (the"
             " Cloud TPU API), which meshctl does not call yet; the simulator models it"
             " (docs/ACCELERATORS.md)"],
            id="a-tpu-slice-is-not-launched",
        ),
        pytest.param("{model: H100, memory_gib: 80GiB}", GCP, "v5litepod-8", False, [],
                     id="a-tpu-slice-in-the-simulator"),
    ],
)  # fmt: skip
def test_nodes_of_every_vendor_are_placed_and_tpu_slices_only_simulated(
    accelerator: str, cloud: str, node_type: str, launching: bool, expected: list[str]
) -> None:
    """Catalogs list Trainium, Inferentia, Gaudi and TPU offers, the registry their Ray
    resources: nodes of each are placed in their own resource. A Cloud TPU slice is made
    through the Cloud TPU API, not Compute Engine's: a pool that would launch one is refused;
    the simulator models it."""
    from meshctl.catalog import load_catalogs
    from meshctl.catalog.check import mesh_accelerators
    from meshctl.files import load_text

    text = CLOUD.replace("{accelerator}", accelerator).replace("{node_type}", node_type)
    (loaded,) = load_text(text.replace("{cloud}", f"<<: {cloud}"), "m.yaml")
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    problems = mesh_accelerators(loaded, load_accelerators(), catalogs, launching)
    assert [str(p) for p in problems] == expected


def test_the_catalogs_offer_at_least_four_vendors(cli: CliRunner) -> None:
    import json

    result = cli.invoke(app, ["providers", "list", "-o", "json"])
    assert result.exit_code == 0, result.output
    vendors = {row["vendor"] for row in json.loads(result.stdout)}
    assert vendors >= {"nvidia", "aws", "intel", "google"}


SIM_MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: acme-lab}
spec:
  pools:
    - name: onprem
      provider: ray
      address: http://head:8265
      nodes:
        - {name: x, count: 4, gpus: 8, cpus: 96, memory_gib: 1TiB,
           accelerator: {vendor: acme, model: X1, memory_gib: 64GiB}}
"""


@pytest.mark.parametrize("known", [True, False], ids=["its-registry-lists-it", "unknown"])
def test_a_made_up_vendors_mesh_runs_a_trace_in_the_simulator(
    cli: CliRunner, tmp_path: Path, known: bool
) -> None:
    """The same entry, no code: the simulator places a synthetic trace's GPU jobs on the
    made-up vendor's nodes; without the entry the run is refused before it starts."""
    import json

    (tmp_path / "mesh.yaml").write_text(SIM_MESH)
    providers = tmp_path / "providers"
    providers.mkdir()
    if known:
        with_acme(providers)
    out = tmp_path / "out"
    args = ["--providers", str(providers), "sim", "run", "--mesh", str(tmp_path / "mesh.yaml"),
            "--trace", "synthetic", "--days", "0.25", "--jobs-per-hour", "20", "--seed", "1",
            "--out", str(out), "--no-charts"]  # fmt: skip
    result = cli.invoke(app, args)
    if not known:
        assert result.exit_code == 2
        assert "spec.pools[0].nodes[0].accelerator.model: expected an accelerator model" in (
            result.stderr
        )
        assert not out.exists()
        return
    assert result.exit_code == 0, result.output
    jobs = json.loads((out / "report.json").read_text())["jobs"]
    # of 128; one asks for more GPUs than the 32 there are; the run ends at the window's end,
    # so what still runs then is unfinished
    assert jobs["finished"] > 60
    assert jobs["arrived"] == jobs["finished"] + jobs["rejected"] + jobs["unfinished"]


TPU_SIM_MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: tpu-sim}
spec:
  pools:
    - name: onprem
      provider: ray
      address: http://head:8265
      nodes:
        - {name: n, gpus: 8, cpus: 96, memory_gib: 1TiB,
           accelerator: {vendor: nvidia, model: H100, memory_gib: 80GiB}}
    - name: gcp-burst
      provider: gcp
      project: my-project
      region: us-central1
      node_types: [{name: v5litepod-8, max_nodes: 4, spot: true}]
      max_nodes: 4
"""
BURST_ALL = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: burst-all}
spec:
  burst:
    - {name: all, when: "true", to: pool.cloud, spot: true, max_usd_per_hour: 100}
"""


def test_the_simulator_bursts_to_tpu_slices_that_up_refuses_to_launch(
    cli: CliRunner, tmp_path: Path
) -> None:
    """A Cloud TPU slice is made through the Cloud TPU API, which meshctl does not call: a
    pool naming one is refused by validate (and up), and modelled by the simulator, whose
    jobs burst onto its slices and pay their prices."""
    import json

    (tmp_path / "mesh.yaml").write_text(TPU_SIM_MESH)
    (tmp_path / "burst.yaml").write_text(BURST_ALL)
    mesh = str(tmp_path / "mesh.yaml")
    args = ["sim", "run", "--mesh", mesh, "-p", str(tmp_path / "burst.yaml"), "--trace",
            "synthetic", "--days", "0.1", "--jobs-per-hour", "30", "--seed", "1",
            "-o", "json"]  # fmt: skip
    ran = cli.invoke(app, args)
    assert ran.exit_code == 0, ran.output
    report = json.loads(ran.stdout)
    assert report["jobs"]["ran_on_cloud"] > 0
    assert report["cloud_spend_usd"]["by_pool"]["gcp-burst"] > 0
    refused = cli.invoke(app, ["--mesh", mesh, "validate", mesh])
    assert refused.exit_code == 2
    assert "v5litepod-8 is a TPU-v5e slice, made through its own API" in refused.stderr
