"""Why a job can never run: every dimension named, with what it needs and what the mesh has.

The mesh of most cases: two on-prem nodes of 4 A100 (80 GiB) with 16 CPUs, 64 GiB and 200 Gbps,
one per rack; a cloud pool offering g6.xlarge (1 L4 of 24 GiB, 4 CPUs, 16 GiB, 25 Gbps; at most
2) where a case adds it.
"""

from __future__ import annotations

import dataclasses

import pytest

from meshctl.scheduler import Node, Offer, Snapshot
from meshctl.scheduler.request import Request
from meshctl.scheduler.unschedulable import never_fits
from tests.unit.scheduler.sched_helpers import node, req

pytestmark = pytest.mark.unit

ONPREM = (
    node("a", gpus=4, model="A100", cpus=16, memory=64, nic=200, rack="r1"),
    node("b", gpus=4, model="A100", cpus=16, memory=64, nic=200, rack="r2"),
)
L4 = Offer("cloud", "g6.xlarge", 1, 24, "L4", "nvidia", 4, 16, 25, 0.8, None, False, 2)


def vendor(request: Request, name: str) -> Request:
    return dataclasses.replace(request, vendor=name)


def named(request: Request, *names: str) -> Request:
    return dataclasses.replace(request, accelerator_names=names)


NO_GPUS = tuple(node(n.name, gpus=0, rack=n.labels["rack"]) for n in ONPREM)
SMALL = tuple(dataclasses.replace(n, memory_gib=32) for n in ONPREM)

CASES = [
    pytest.param(
        req(9), ONPREM, (), "needs 9 GPUs per node; the largest node has 4", id="GPUs per node"
    ),
    pytest.param(
        req(2),
        NO_GPUS,
        (L4,),
        "needs 2 GPUs per node; the largest node type has 1",
        id="GPUs per node, judged on cloud node types",
    ),
    pytest.param(
        req(1), NO_GPUS, (), "needs GPUs; no node in the pools it may use has any", id="any GPU"
    ),
    pytest.param(
        named(req(1, models=["h100", "h200"]), "H100", "H200"),
        ONPREM,
        (L4,),
        "needs a GPU of model H100 or H200; the pools it may use have A100, L4",
        id="GPU model",
    ),
    pytest.param(
        vendor(req(1), "amd"),
        ONPREM,
        (L4,),
        "needs amd GPUs; the pools it may use have nvidia",
        id="GPU vendor",
    ),
    pytest.param(
        req(1, gpu_memory=141),
        ONPREM,
        (L4,),
        "needs 141 GiB memory per GPU; the largest GPU has 80 GiB",
        id="GPU memory",
    ),
    pytest.param(
        req(0.25, gpu_memory=30),
        ONPREM,
        (),
        "needs 30 GiB of GPU memory in 0.25 of a GPU; 0.25 of the largest GPU has 20 GiB",
        id="GPU memory of a fraction of a GPU",
    ),
    pytest.param(
        req(1, cpus=64),
        ONPREM,
        (L4,),
        "needs 64 CPUs per node; the largest node or node type has 16",
        id="CPUs",
    ),
    pytest.param(
        req(1, memory=512),
        ONPREM,
        (),
        "needs 512 GiB memory per node; the largest node has 64 GiB",
        id="memory",
    ),
    pytest.param(
        req(1, nic=400),
        ONPREM,
        (),
        "needs 400 Gbps NIC bandwidth per node; the largest node has 200 Gbps",
        id="NIC bandwidth",
    ),
    pytest.param(
        req(4, nodes=3),
        ONPREM,
        (),
        "needs 3 nodes with 4 GPUs each; the pool onprem has 2 such nodes",
        id="node count",
    ),
    pytest.param(
        req(2, nodes=2, topology="rack", required=True),
        ONPREM,
        (),
        "needs 2 nodes with 2 GPUs each in one rack; the most in one rack is 1",
        id="topology domain",
    ),
    pytest.param(
        req(1, nodes=3, cpus=2, memory=8),
        ONPREM,
        (dataclasses.replace(L4, pool="other"),),
        "needs 3 nodes with 1 GPU each; the pool onprem has 2 such nodes; "
        "other may launch at most 2 g6.xlarge",
        id="cloud node type cap",
    ),
    pytest.param(
        req(4, memory=48),
        SMALL,
        (L4,),
        "needs 48 GiB memory per node; the largest node has 32 GiB",
        id="a dimension is judged among what passed the ones before (the L4 has too few GPUs)",
    ),
]


@pytest.mark.parametrize(("request_", "nodes", "offers", "reason"), CASES)
def test_the_reason_names_the_dimension_and_by_how_much(
    request_: Request, nodes: tuple[Node, ...], offers: tuple[Offer, ...], reason: str
) -> None:
    eligible = frozenset({"onprem", "cloud", "other"})
    assert never_fits(request_, eligible, Snapshot(0.0, nodes, offers=offers)) == reason


def test_what_fits_somewhere_is_not_unschedulable() -> None:
    snap = Snapshot(0.0, ONPREM, offers=(L4,))
    for fits in (req(4), req(4, nodes=2), req(1, nodes=2, cpus=2, memory=8), req(0.5)):
        assert never_fits(fits, frozenset({"onprem", "cloud"}), snap) is None


def test_nothing_eligible_says_policy_denies_every_pool() -> None:
    snap = Snapshot(0.0, ONPREM)
    assert never_fits(req(1), frozenset(), snap) == "every pool is denied by policy"
    assert never_fits(req(1), frozenset({"gone"}), snap) == (
        "no nodes or node types in the pools it may use (gone)"
    )


def test_pools_the_policies_keep_it_from_are_named() -> None:
    """Only on-prem is eligible and none of its nodes has a GPU, while the cloud pool's node
    type would hold the job: the reason names the pool the policies keep it from."""
    from meshctl.scheduler import PoolInfo

    pools = (PoolInfo("onprem", False), PoolInfo("cloud", True))
    snap = Snapshot(0.0, NO_GPUS, offers=(L4,), pools=pools)
    assert never_fits(req(1), frozenset({"onprem"}), snap) == (
        "needs GPUs; no node in the pools it may use has any (the policies do not let it use cloud)"
    )
    assert never_fits(req(1), frozenset({"onprem", "cloud"}), snap) is None
