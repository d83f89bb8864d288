"""What a GiB of data costs to reach each pool's nodes, by the data's home: the home side's
egress price (the catalogs' internet egress for aws and gcp, the on-prem pools' own
``cost.egress_usd_per_gib``), nothing from the pool's own home. The controller
(``configured_pools``) and the files' snapshot (``snapshot_from_mesh``, which the simulator's
mesh is built from) give the same."""

from __future__ import annotations

import textwrap

import pytest

from meshctl.catalog import load_catalogs
from meshctl.files import load_text
from meshctl.lifecycle.configured import snapshot_from_mesh
from meshctl.lifecycle.snapshot import configured_pools
from meshctl.model import Mesh

pytestmark = pytest.mark.unit

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: m}}
spec:
  pools:
    - name: lab
      provider: local
      {cost}
      nodes: [{{name: n, gpus: 1, accelerator: {{model: H100, memory_gib: 80}}, cpus: 8,
               memory_gib: 64}}]
    - name: aws-burst
      provider: aws
      region: us-east-1
      node_types: [{{name: g6.xlarge, max_nodes: 2}}]
    - name: gcp-burst
      provider: gcp
      project: meshctl-test
      region: us-central1
      node_types: [{{name: g2-standard-8, max_nodes: 2}}]
"""


def mesh(cost: str) -> Mesh:
    (loaded,) = load_text(textwrap.dedent(MESH.format(cost=cost)), "m.yaml")
    assert isinstance(loaded.document, Mesh)
    return loaded.document


@pytest.mark.parametrize(
    ("cost", "expected"),
    [
        pytest.param(  # on-prem transit free by default: the clouds' list prices only
            "",
            {
                "lab": {"aws": 0.09, "gcp": 0.12},
                "aws-burst": {"gcp": 0.12},
                "gcp-burst": {"aws": 0.09},
            },
            id="default-on-prem-egress-free",
        ),
        pytest.param(  # the site's transit, paid by on-prem data leaving for a cloud
            "cost: {egress_usd_per_gib: 0.01}",
            {
                "lab": {"aws": 0.09, "gcp": 0.12},
                "aws-burst": {"gcp": 0.12, "onprem": 0.01},
                "gcp-burst": {"aws": 0.09, "onprem": 0.01},
            },
            id="on-prem-egress-from-the-mesh",
        ),
    ],
)
def test_each_pool_pays_the_egress_of_the_data_homes_it_is_not(cost, expected):
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    the_mesh = mesh(cost)
    configured = {
        p.name: dict(p.egress_usd_per_gib) for p in configured_pools(the_mesh.spec.pools, catalogs)
    }
    assert configured == expected
    from_files = snapshot_from_mesh(the_mesh, catalogs, None, (), 0.0).pools
    assert {p.name: dict(p.egress_usd_per_gib) for p in from_files} == expected


def test_a_catalog_without_egress_prices_counts_that_home_free():
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    gcp = catalogs["gcp"]
    catalogs["gcp"] = gcp.model_copy(update={"spec": gcp.spec.model_copy(update={"egress": None})})
    pools = {
        p.name: dict(p.egress_usd_per_gib) for p in configured_pools(mesh("").spec.pools, catalogs)
    }
    assert pools == {"lab": {"aws": 0.09}, "aws-burst": {}, "gcp-burst": {"aws": 0.09}}


@pytest.mark.parametrize(
    ("home", "expected"),
    [
        ("aws", {"lab": 0.09, "aws-burst": 0.0, "gcp-burst": 0.09}),
        ("gcp", {"lab": 0.12, "aws-burst": 0.12, "gcp-burst": 0.0}),
        ("onprem", {"lab": 0.0, "aws-burst": 0.0, "gcp-burst": 0.0}),
    ],
)
def test_the_simulator_charges_the_egress_the_scheduler_prices(home, expected):
    """sim run --data-home: what a node of each pool pays a GiB of central storage's data."""
    from meshctl.sim.run import egress_usd_per_gib

    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    assert egress_usd_per_gib(mesh(""), catalogs, home) == expected
