"""Configured pool capacity and GPU-hour prices, with the arithmetic of each row in a comment."""

from __future__ import annotations

import textwrap

import pytest

from meshctl.catalog import load_catalogs
from meshctl.files import load_text
from meshctl.model.capacity import pool_capacity

pytestmark = pytest.mark.unit

HEAD = "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: m}\nspec:\n  pools:\n"


def capacity(pool_yaml: str):
    (loaded,) = load_text(HEAD + textwrap.indent(textwrap.dedent(pool_yaml), "    "))
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    return pool_capacity(loaded.document.spec.pools[0], catalogs)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("pool", "nodes", "gpus", "usd"),
    [
        pytest.param(  # 3 x 8 + 1 x 4 GPUs; amortised price as configured
            """\
            - name: onprem
              provider: local
              cost: {usd_per_gpu_hour: 1.5}
              nodes:
                - {name: a, count: 3, gpus: 8, cpus: 64, memory_gib: 1TiB,
                   accelerator: {model: H100, memory_gib: 80}}
                - {name: b, gpus: 4, cpus: 32, memory_gib: 512GiB,
                   accelerator: {model: A100, memory_gib: 40}}
            """,
            4,
            28,
            1.5,
            id="onprem-sums-groups",
        ),
        pytest.param(  # 2 x g6e.12xlarge (4 GPUs) + 2 x g6.xlarge (1 GPU) = 10 under max_nodes 4;
            # cheapest GPU-hour: g6.xlarge 0.8048 / 1 GPU
            """\
            - name: burst
              provider: aws
              region: us-east-1
              max_nodes: 4
              node_types: [{name: g6.xlarge, max_nodes: 4}, {name: g6e.12xlarge, max_nodes: 2}]
            """,
            4,
            10,
            0.8048,
            id="cloud-largest-first",
        ),
        pytest.param(  # p5.48xlarge 55.04 / 8 GPUs = 6.88, less 25% = 5.16
            """\
            - name: burst
              provider: aws
              region: us-east-1
              max_nodes: 2
              cost: {discount_pct: 25}
              node_types: [{name: p5.48xlarge, max_nodes: 8}]
            """,
            2,
            16,
            5.16,
            id="cloud-discount",
        ),
    ],
)
def test_pool_capacity(pool, nodes, gpus, usd):
    cap = capacity(pool)
    assert (cap.nodes, cap.gpus) == (nodes, gpus)
    assert cap.usd_per_gpu_hour == pytest.approx(usd)


def test_spot_price_only_where_the_pool_allows_spot():
    pool = """\
    - name: burst
      provider: gcp
      project: my-project
      region: us-central1
      node_types: [{name: g2-standard-4, max_nodes: 2, spot: %s}]
    """
    assert capacity(pool % "false").spot_usd_per_gpu_hour is None
    assert capacity(pool % "true").spot_usd_per_gpu_hour == pytest.approx(0.28184)
