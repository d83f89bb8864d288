"""The shipped provider catalogs, and the mesh's references into them."""

from __future__ import annotations

import textwrap

import pytest

from meshctl.catalog import load_catalog, load_catalogs
from meshctl.catalog.check import mesh_node_types
from meshctl.files import load_text
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
