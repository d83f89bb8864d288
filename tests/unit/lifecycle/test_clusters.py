"""A cloud pool's cluster: how a launch splits into its head and its workers, and what the
pool's own head costs; the same split for the controller and the simulator."""

from __future__ import annotations

import pytest

from meshctl.catalog import load_catalogs
from meshctl.lifecycle import Launch
from meshctl.lifecycle.clusters import HeadOffer, Part, head_of, parts
from meshctl.model import Mesh
from tests.builders import aws_pool, mesh

pytestmark = pytest.mark.unit

WANT = Launch("j", "east", "g6.xlarge", 3, True, 2.4, "burst-j-1")
HEAD = HeadOffer("east", "m7i.large", 0.1008)


@pytest.mark.parametrize(
    ("want", "running", "head", "expected"),
    [
        (WANT, True, HEAD, [Part("g6.xlarge", 3, True)]),
        (WANT, True, None, [Part("g6.xlarge", 3, True)]),
        (WANT, False, HEAD, [Part("m7i.large", 1, False, head=True, dedicated=True),
                             Part("g6.xlarge", 3, True)]),
        (WANT, False, None, [Part("g6.xlarge", 1, True, head=True), Part("g6.xlarge", 2, True)]),
        (Launch("j", "east", "g6.xlarge", 1, True, 0.8), False, None,
         [Part("g6.xlarge", 1, True, head=True)]),
    ],
    ids=["its cluster runs: workers only", "its cluster runs, no own head: workers only",
         "a new cluster: its own on-demand head, then every worker",
         "a new cluster without a head type: the first worker is its head",
         "one worker and no head type: it is the head"],
)  # fmt: skip
def test_a_launch_splits_into_the_head_and_the_workers(want, running, head, expected) -> None:
    assert parts(want, running, head) == expected
    workers = sum(p.count for p in expected if not p.dedicated)
    assert workers == want.count  # the job gets the nodes it asked for, whatever the split


def _pool(extra: str) -> Mesh:
    pool = aws_pool("east", max_nodes=2, cost={"discount_pct": 25})
    if extra:
        pool["head_node_type"] = extra
    return mesh(pool)


@pytest.mark.parametrize(
    ("head", "expected"),
    [("m7i.large", HeadOffer("east", "m7i.large", 0.1008 * 0.75)), ("", None),
     ("g6.xlarge", None)],
    ids=["priced on demand less the pool's discount", "none named", "not a head type"],
)  # fmt: skip
def test_the_pools_own_head_offer(head: str, expected: HeadOffer | None) -> None:
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    found = head_of(_pool(head).spec.pools[0], catalogs)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (found.pool, found.node_type) == (expected.pool, expected.node_type)
        assert found.usd_per_hour == pytest.approx(expected.usd_per_hour)
