"""The shipped provider catalogs, and the mesh's references into them."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT

from meshctl.catalog import load_accelerators, load_catalog, load_catalogs
from meshctl.catalog.check import (
    case_accelerators,
    catalog_accelerators,
    job_accelerators,
    job_models,
    mesh_accelerators,
    mesh_node_types,
)
from meshctl.cli.app import app
from meshctl.files import load_path, load_text
from meshctl.model import Mesh, PolicyTest
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit

FAMILIES = {
    "aws": {"p4d", "p4de", "p5", "p5e", "p5en", "g5", "g6", "g6e"},
    "gcp": {"a2-highgpu", "a2-ultragpu", "a3-highgpu", "a3-megagpu", "g2-standard"},
}


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_catalog_covers_the_gpu_families_with_a_source_and_date(provider):
    catalog = load_catalog(provider).catalog
    assert FAMILIES[provider] <= {t.family for t in catalog.spec.instance_types}
    assert catalog.spec.source.strip()
    assert catalog.spec.as_of.year >= 2025


@pytest.mark.parametrize(
    ("provider", "internet", "inter_region", "page"),
    [
        pytest.param("aws", 0.09, 0.02, "https://aws.amazon.com/ec2/pricing/on-demand/", id="aws"),
        pytest.param("gcp", 0.12, 0.02, "https://cloud.google.com/vpc/network-pricing", id="gcp"),
    ],
)
def test_catalog_egress_prices_are_dated_and_name_their_price_page(
    provider, internet, inter_region, page
):
    egress = load_catalog(provider).catalog.spec.egress
    assert egress is not None
    assert (egress.internet_usd_per_gib, egress.inter_region_usd_per_gib) == (
        internet,
        inter_region,
    )
    assert page in egress.source
    assert egress.as_of.year >= 2026


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_every_listed_price_is_consistent(provider):
    for t in load_catalog(provider).catalog.spec.instance_types:
        for region, price in t.prices.items():
            assert price.on_demand_usd_per_hour > 0, (t.name, region)
            if price.spot_usd_per_hour is not None:
                assert price.spot_usd_per_hour < price.on_demand_usd_per_hour, (t.name, region)


@pytest.mark.parametrize(
    ("name", "gpus", "model", "gpu_memory_gib"),
    [
        pytest.param("p5.48xlarge", 8, "H100", 80, id="p5"),
        pytest.param("p4d.24xlarge", 8, "A100", 40, id="p4d"),
        pytest.param("p5en.48xlarge", 8, "H200", 141, id="p5en"),
        pytest.param("g6e.xlarge", 1, "L40S", 48, id="g6e"),
        pytest.param("a3-highgpu-8g", 8, "H100", 80, id="a3"),
        pytest.param("a2-ultragpu-8g", 8, "A100", 80, id="a2-ultra"),
        pytest.param("g2-standard-96", 8, "L4", 24, id="g2"),
    ],
)
def test_published_shapes(name, gpus, model, gpu_memory_gib):
    types = {t.name: t for f in load_catalogs() for t in f.catalog.spec.instance_types}
    acc = types[name].accelerator
    assert (acc.count, acc.model, acc.memory_gib) == (gpus, model, gpu_memory_gib)


def test_a_catalog_dir_without_the_file_says_where_it_looked(tmp_path):
    (tmp_path / "aws.yaml").write_text("apiVersion: meshctl/v1\nkind: Catalog\n")
    with pytest.raises(InvalidFileError) as caught:
        load_catalog("aws", tmp_path)
    assert "aws.yaml:1: metadata: required field is missing" in str(caught.value)


MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: m}}
spec:
  pools:
    - name: burst
      provider: aws
      region: {region}
      node_types:
        - {{name: {name}, max_nodes: 2}}
"""


@pytest.mark.parametrize(
    ("name", "region", "expected"),
    [
        pytest.param("g6.xlarge", "us-east-1", None, id="known-and-priced"),
        pytest.param(
            "p5.48xlrge",
            "us-east-1",
            "f.yaml:10: spec.pools[0].node_types[0].name: expected an instance type of the aws"
            " catalog, got 'p5.48xlrge'; did you mean 'p5.48xlarge'?",
            id="typo-suggests",
        ),
        pytest.param(
            "g6.xlarge",
            "ap-south-1",
            "f.yaml:10: spec.pools[0].node_types[0].name: g6.xlarge has no price for ap-south-1"
            " in the aws catalog (priced in: eu-central-1, us-east-1, us-west-2)",
            id="region-not-priced",
        ),
    ],
)
def test_mesh_node_types_must_be_in_the_catalog(name, region, expected):
    (loaded,) = load_text(textwrap.dedent(MESH.format(name=name, region=region)), "f.yaml")
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    problems = [str(p) for p in mesh_node_types(loaded, catalogs)]
    assert problems == ([expected] if expected else [])


HEADED = MESH + "      head_node_type: {head}\n"


@pytest.mark.parametrize(
    ("head", "region", "expected"),
    [
        pytest.param("m7i.large", "us-east-1", None, id="a-head-type-priced-there"),
        pytest.param(
            "m7i.lrge",
            "us-east-1",
            "f.yaml:11: spec.pools[0].head_node_type: expected a head type of the aws catalog"
            " (a CPU type), got 'm7i.lrge'; did you mean 'm7i.large'?",
            id="typo-suggests",
        ),
        pytest.param(
            "g6.xlarge",
            "us-east-1",
            "f.yaml:11: spec.pools[0].head_node_type: expected a head type of the aws catalog"
            " (a CPU type), got 'g6.xlarge', a GPU type (the head takes no work); one of:"
            " m7i.large, m7i.xlarge",
            id="a-gpu-type-is-no-head",
        ),
        pytest.param(
            "m7i.large",
            "ap-south-1",
            "f.yaml:11: spec.pools[0].head_node_type: m7i.large has no price for ap-south-1 in"
            " the aws catalog (priced in: eu-central-1, eu-north-1, eu-west-1, us-east-1,"
            " us-west-2)",
            id="region-not-priced",
        ),
    ],
)
def test_a_pools_head_type_must_be_a_head_type_of_the_catalog(head, region, expected):
    text = textwrap.dedent(HEADED.format(name="g6.xlarge", region="us-east-1", head=head))
    if region != "us-east-1":  # the node type is priced in us-east-1 only of these
        text = text.replace("g6.xlarge, max", "g5.xlarge, max").replace("us-east-1", region)
    (loaded,) = load_text(text, "f.yaml")
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    problems = [str(p) for p in mesh_node_types(loaded, catalogs) if "head_node_type" in str(p)]
    assert problems == ([expected] if expected else [])


def test_a_name_listed_both_as_a_gpu_type_and_a_head_type_is_refused():
    catalog = {f.provider: f.catalog for f in load_catalogs()}["aws"]
    head = catalog.spec.head_types[0].model_copy(update={"name": "g6.xlarge"})
    raw = catalog.model_dump(mode="json")
    raw["spec"]["head_types"] = [head.model_dump(mode="json")]
    with pytest.raises(ValueError, match=r"instance types listed twice: g6\.xlarge"):
        type(catalog).model_validate(raw)


# --- accelerator models ------------------------------------------------------------------------

ONPREM = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: m}}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - name: n
          gpus: 4
          accelerator: {{model: {model}, memory_gib: 80GiB}}
          cpus: 8
          memory_gib: 64GiB
"""
ONPREM_CATALOG = """\
apiVersion: meshctl/v1
kind: Catalog
metadata: {name: aws}
spec:
  provider: aws
  as_of: "2026-12-05"
  source: a test
  instance_types:
    - name: q9.xlarge
      family: q9
      accelerator:
        vendor: nvidia
        count: 1
        memory_gib: 24
        model: Q9
      vcpus: 4
      memory_gib: 16
      nic_gbps: 10
      prices: {us-east-1: {on_demand_usd_per_hour: 1.0}}
"""
JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: j}}
spec:
  kind: train
  entrypoint: python x.py
  resources:
    gpus: 1
    accelerator: {{any_of: [{models}]}}
"""


def _catalogs():
    return {f.provider: f.catalog for f in load_catalogs()}


@pytest.mark.parametrize(
    ("accelerator", "expected"),
    [
        pytest.param("{model: H100, memory_gib: 80GiB}", [], id="a-registry-model"),
        pytest.param("{model: h100, memory_gib: 80GiB}", [], id="any-case"),
        pytest.param(
            "{vendor: amd, model: MI300X, memory_gib: 192GiB}", [], id="no-catalog-sells-it"
        ),
        pytest.param(
            "{model: H100-SXM, memory_gib: 80GiB}",
            ["f.yaml:11: spec.pools[0].nodes[0].accelerator.model: expected an accelerator model"
             " the accelerator registry knows, got 'H100-SXM'; did you mean 'H100'?"],
            id="unknown-suggests",
        ),
        pytest.param(
            "{model: MI300X, memory_gib: 192GiB}",
            ["f.yaml:11: spec.pools[0].nodes[0].accelerator.vendor: expected 'amd', the vendor"
             " of MI300X in the accelerator registry, got 'nvidia'"],
            id="another-vendors-model",
        ),
    ],
)  # fmt: skip
def test_on_prem_accelerators_must_be_ones_the_registry_knows(accelerator, expected):
    text = ONPREM.format(model="M").replace("{model: M, memory_gib: 80GiB}", accelerator)
    (loaded,) = load_text(text, "f.yaml")
    assert [str(p) for p in mesh_accelerators(loaded, load_accelerators())] == expected


def test_every_catalog_accelerator_is_one_the_registry_knows():
    registry = load_accelerators()
    for found in load_catalogs():
        (loaded,) = load_path(Path(found.location))
        assert catalog_accelerators(loaded, registry) == []
    raw = ONPREM_CATALOG
    (loaded,) = load_text(raw, "c.yaml")
    assert [str(p) for p in catalog_accelerators(loaded, registry)] == [
        "c.yaml:15: spec.instance_types[0].accelerator.model: expected an accelerator model the"
        " accelerator registry knows, got 'Q9' (A100, A10G, B200, Gaudi, H100, H200, Inferentia2,"
        " L4, L40S, MI250X, MI300X, TPU-v5e, TPU-v5p, TPU-v6e, Trainium, Trainium2)"
    ]


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        pytest.param("A100, L4", [], id="catalog-models"),
        pytest.param("MI300X", [], id="the-meshs-own-nodes"),
        pytest.param(
            "A100, H100-SXM",
            ["j.yaml:9: spec.resources.accelerator.any_of[1]: expected an accelerator model the"
             " catalogs or the mesh's nodes have, got 'H100-SXM'; did you mean 'H100'?"],
            id="unknown-suggests",
        ),
    ],
)  # fmt: skip
def test_a_jobs_accelerators_must_be_models_someone_has(models, expected):
    (mesh,) = load_text(ONPREM.format(model="MI300X"), "m.yaml")
    (job,) = load_text(JOB.format(models=models), "j.yaml")
    assert isinstance(mesh.document, Mesh)
    problems = job_accelerators(job, _catalogs(), mesh.document)
    assert [str(p) for p in problems] == expected


def test_a_jobs_vendor_must_be_one_the_registry_lists():
    (mesh,) = load_text(ONPREM.format(model="A100"), "m.yaml")
    text = JOB.format(models="A100").replace("{any_of: [A100]}", "{vendor: nvidai}")
    (job,) = load_text(text, "j.yaml")
    assert isinstance(mesh.document, Mesh)
    problems = job_accelerators(job, _catalogs(), mesh.document, load_accelerators())
    assert [str(p) for p in problems] == [
        "j.yaml:9: spec.resources.accelerator.vendor: expected a vendor of the accelerator"
        " registry (nvidia, amd, google, aws, intel), got 'nvidai'"
    ]


CASES = """\
apiVersion: meshctl/v1
kind: PolicyTest
metadata: {{name: t}}
spec:
  cases:
    - name: plain
      job: {{kind: train}}
      expect: {{burst: false}}
    - name: asks
      job: {{kind: train, resources: {{gpus: 1, accelerator: {{any_of: [{job}]}}}}}}
      victim:
        {{kind: batch, pool: lab, resources: {{gpus: 1, accelerator: {{any_of: [{victim}]}}}}}}
      expect: {{burst: false}}
"""
CASE_SAYS = "expected an accelerator model the catalogs or the mesh's nodes have, got"


@pytest.mark.parametrize(
    ("job", "victim", "expected"),
    [
        pytest.param("A100", "MI300X", [], id="catalog-and-own-node-models"),
        pytest.param(
            "A100, H100-SXM",
            "L4",
            [f"t.yaml:10: spec.cases[1].job.resources.accelerator.any_of[1]: {CASE_SAYS}"
             " 'H100-SXM'; did you mean 'H100'?"],
            id="the-job-of-a-case",
        ),
        pytest.param(
            "L4",
            "l4, Q9",
            [f"t.yaml:12: spec.cases[1].victim.resources.accelerator.any_of[1]: {CASE_SAYS}"
             " 'Q9' (A100, A10G, Gaudi, H100, H200, Inferentia2, L4, L40S, MI300X, TPU-v5e,"
             " TPU-v5p, TPU-v6e, Trainium, Trainium2)"],
            id="the-victim-of-a-case",
        ),
    ],
)  # fmt: skip
def test_the_accelerators_of_policy_test_cases_must_be_models_someone_has(job, victim, expected):
    (mesh,) = load_text(ONPREM.format(model="MI300X"), "m.yaml")
    (test,) = load_text(CASES.format(job=job, victim=victim), "t.yaml")
    assert isinstance(mesh.document, Mesh)
    assert isinstance(test.document, PolicyTest)
    known = job_models(_catalogs(), mesh.document)
    problems = case_accelerators(test.path, test.document, test.line_of, known)
    assert [str(p) for p in problems] == expected


@pytest.fixture
def sxm_project(tmp_path):
    """A folder from `meshctl init` whose example training job asks for an H100-SXM."""
    shutil.copy(EXAMPLES / "mesh.yaml", tmp_path / "mesh.yaml")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    job = tmp_path / "train.yaml"
    job.write_text(
        (EXAMPLES / "jobs" / "train-resnet.yaml").read_text().replace("H100]", "H100-SXM]")
    )
    return tmp_path


SXM = "expected an accelerator model the catalogs or the mesh's nodes have, got 'H100-SXM';"


def test_validate_rejects_an_unknown_accelerator(cli, sxm_project):
    result = cli.invoke(app, ["validate", str(sxm_project)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {sxm_project / 'train.yaml'}:17: spec.resources.accelerator.any_of[1]: {SXM}"
        " did you mean 'H100'?\n"
    )


def test_submit_rejects_an_unknown_accelerator_before_anything_is_queued(cli, sxm_project):
    mesh = ["--mesh", str(sxm_project / "mesh.yaml")]
    result = cli.invoke(app, [*mesh, "submit", str(sxm_project / "train.yaml"), "--dry-run"])
    assert result.exit_code == 2
    assert f"train.yaml:17: spec.resources.accelerator.any_of[1]: {SXM}" in result.stderr
    assert not (sxm_project / "home").exists()


def test_policy_test_rejects_an_unknown_accelerator_in_a_case(cli, sxm_project):
    routing = sxm_project / "policies" / "tests" / "routing.yaml"
    routing.write_text(
        routing.read_text().replace(
            "job: {kind: train, criticality: standard, resources: {gpus: 4}}",
            "job: {kind: train, criticality: standard, resources: {gpus: 4,"
            " accelerator: {any_of: [H100-SXM]}}}",
            1,
        )
    )
    result = cli.invoke(app, ["policy", "test", str(sxm_project / "policies")])
    assert result.exit_code == 2
    assert f"routing.yaml:10: spec.cases[0].job.resources.accelerator.any_of[0]: {SXM}" in (
        result.stderr
    )
