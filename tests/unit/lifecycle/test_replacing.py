"""A dead node replaced inside the attempt, or the job evicted: the lifecycle's rule, which the
controller (``leaving.dead_nodes``) and the simulator (``Attempts.replace_lost``) both follow."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.lifecycle import Leave, Left, Replace, effects
from meshctl.lifecycle.replacing import Free, drivers_apart, replaceable_pool, stand_ins
from meshctl.model.mesh import Mesh
from meshctl.scheduler import Allocation

pytestmark = pytest.mark.unit


def held(node: str, gpus: int = 4, cpus: float = 8.0, memory: float = 32.0) -> Allocation:
    return Allocation(node, tuple(range(2, 2 + gpus)), 1.0, cpus, memory, 0.0)


FREE = [Free("big", 8, 64.0, 512.0), Free("small", 4, 16.0, 64.0), Free("tiny", 1, 4.0, 16.0)]


@pytest.mark.parametrize(
    ("allocations", "lost", "free", "expected"),
    [
        pytest.param([held("n1")], ["n1"], FREE, ["small"], id="the-smallest-that-holds-it"),
        pytest.param([held("n1", gpus=8)], ["n1"], FREE, ["big"], id="only-the-big-one-holds-8"),
        pytest.param([held("n1", gpus=1, cpus=32)], ["n1"], FREE, ["big"],
                     id="cpus-count-too"),
        pytest.param([held("n1"), held("n2")], ["n2"], FREE, ["n1", "small"],
                     id="the-living-stay-in-place"),
        pytest.param([held("n1"), held("n2")], ["n1", "n2"], FREE, ["small", "big"],
                     id="each-lost-one-its-own"),
        pytest.param([held("n1"), held("n2")], ["n1", "n2"], FREE[1:], None,
                     id="one-without-a-stand-in-no-replacement"),
        pytest.param([held("n1")], ["n1"], [], None, id="nothing-free"),
        pytest.param([held("n1")], ["n1"], [Free("b", 4, 8.0, 32.0), Free("a", 4, 8.0, 32.0)],
                     ["a"], id="ties-by-name"),
    ],
)  # fmt: skip
def test_stand_ins(
    allocations: list[Allocation], lost: list[str], free: list[Free], expected: list[str] | None
) -> None:
    found = stand_ins(allocations, lost, free)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert [a.node for a in found] == expected
    for before, after in zip(allocations, found, strict=True):
        assert (after.cpus, after.memory_gib, after.gpu_share) == (
            before.cpus, before.memory_gib, before.gpu_share
        )  # fmt: skip
        assert len(after.gpu_indices) == len(before.gpu_indices)
        if after.node != before.node:  # a wholly free node: its first GPUs
            assert after.gpu_indices == tuple(range(len(before.gpu_indices)))


@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=4),
    st.lists(st.integers(0, 8), max_size=5),
    st.data(),
)
def test_stand_ins_never_share_a_node_and_always_hold_what_they_replace(
    widths: list[int], free_gpus: list[int], data: Any
) -> None:
    allocations = [held(f"n{i}", gpus=w) for i, w in enumerate(widths)]
    lost = data.draw(st.lists(st.sampled_from([a.node for a in allocations]), min_size=1))
    free = [Free(f"f{i}", g, 64.0, 512.0) for i, g in enumerate(free_gpus)]
    found = stand_ins(allocations, lost, free)
    if found is None:
        return
    nodes = [a.node for a in found]
    assert len(set(nodes)) == len(nodes)
    assert not set(nodes) & set(lost)
    capacity = {f.name: f.gpus for f in free}
    for before, after in zip(allocations, found, strict=True):
        if before.node in lost:
            assert capacity[after.node] >= len(before.gpu_indices)
        else:
            assert after == before


@pytest.mark.parametrize(
    ("replaceable", "free", "expected"),
    [
        pytest.param(True, FREE, "replace", id="replaced"),
        pytest.param(True, [], "evicted", id="no-free-node-evicted"),
        pytest.param(False, FREE, "evicted", id="not-replaceable-evicted"),
    ],
)
def test_a_dead_node_is_replaced_or_the_job_evicted_at_once(
    replaceable: bool, free: list[Free], expected: str
) -> None:
    found = effects.lost_nodes("j", "onprem", [held("n1")], ["n1"], replaceable, free, 100.0)
    if expected == "replace":
        assert isinstance(found, Replace)
        assert (found.job_id, found.pool, found.lost) == ("j", "onprem", ("n1",))
        assert [a.node for a in found.allocations] == ["small"]
        assert found.reason == "node n1 is dead; small replaces it inside the attempt"
    else:
        assert found == Leave("j", Left.EVICTED, "node n1 is dead", 100.0, False)


MESH = """
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: m}
spec:
  pools:
    - name: local
      provider: local
      checkpoint_storage: {uri: "file:///tmp/ckpt"}
      nodes:
        - {name: n, count: 1, gpus: 1, cpus: 8, memory_gib: 32,
           accelerator: {model: A100, memory_gib: 80}}
    - name: local-nostore
      provider: local
      nodes:
        - {name: m, count: 1, gpus: 1, cpus: 8, memory_gib: 32,
           accelerator: {model: A100, memory_gib: 80}}
    - name: cluster
      provider: ray
      address: http://ray.example:8265
      checkpoint_storage: {uri: "file:///tmp/ckpt"}
    - name: aws-head
      provider: aws
      region: us-east-1
      head_node_type: m7i.large
      checkpoint_storage: {uri: "s3://bucket/ckpt"}
      node_types: [{name: g6.xlarge, max_nodes: 2}]
    - name: aws
      provider: aws
      region: us-east-1
      checkpoint_storage: {uri: "s3://bucket/ckpt"}
      node_types: [{name: g6.xlarge, max_nodes: 2}]
"""


@pytest.mark.parametrize(
    ("pool", "apart", "replaceable"),
    [
        pytest.param("local", True, True, id="local-its-head-takes-no-work"),
        pytest.param("local-nostore", True, False, id="local-without-checkpoint-storage"),
        pytest.param("cluster", False, False, id="an-existing-ray-cluster"),
        pytest.param("aws-head", True, True, id="cloud-with-a-head-of-its-own"),
        pytest.param("aws", False, False, id="cloud-whose-head-takes-work"),
    ],
)
def test_which_pools_keep_drivers_apart(pool: str, apart: bool, replaceable: bool) -> None:
    import yaml

    mesh = Mesh.model_validate(yaml.safe_load(MESH))
    found = mesh.pool(pool)
    assert found is not None
    assert drivers_apart(found) is apart
    assert replaceable_pool(found) is replaceable
