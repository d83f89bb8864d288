"""The scheduler's node from what a node has, what meshctl's jobs hold there and what other
work Ray counts there."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.controller.deciding.nodes import _others_gpus
from meshctl.lifecycle.snapshot import NodeShape, node_of
from meshctl.pools.observed import ObservedNode
from meshctl.scheduler import Allocation

pytestmark = pytest.mark.unit

SHAPE = NodeShape(gpus=4, gpu_memory_gib=80, accelerator="A100", cpus=16, memory_gib=256)


def held(indices: tuple[int, ...], share: float = 1.0) -> Allocation:
    return Allocation("n1", indices, share, 1.0, 8.0, 0.0)


@pytest.mark.parametrize(
    ("mine", "others", "free"),
    [
        ((), 0.0, (1.0, 1.0, 1.0, 1.0)),
        ((), 2.0, (1.0, 1.0, 0.0, 0.0)),
        ((held((0,)),), 1.5, (0.0, 1.0, 0.5, 0.0)),
        ((held((3,), 0.5),), 1.0, (1.0, 1.0, 0.5, 0.0)),
        ((), 9.0, (0.0, 0.0, 0.0, 0.0)),
    ],
    ids=["nothing", "two whole GPUs", "beside meshctl's", "a share", "more than it has"],
)
def test_gpus_taken_by_other_work_come_off_the_last_free_ones(
    mine: tuple[Allocation, ...], others: float, free: tuple[float, ...]
) -> None:
    assert node_of("lab", "n1", SHAPE, 1.0, "ready", mine, others).gpu_free == pytest.approx(free)


def seen(in_use: float | None) -> ObservedNode:
    return ObservedNode("n1", "id1", True, 4, 16.0, 256.0, "A100", gpus_in_use=in_use)


@given(
    st.lists(st.sampled_from([0.25, 0.5, 1.0]), max_size=4),
    st.floats(min_value=0, max_value=4),
)
def test_meshctl_s_own_jobs_are_never_counted_as_other_work(
    shares: list[float], foreign: float
) -> None:
    mine = [held((i,), share) for i, share in enumerate(shares)]
    ours = sum(shares)
    assert _others_gpus(seen(ours + foreign), mine) == pytest.approx(foreign, abs=1e-6)
    assert _others_gpus(seen(ours), mine) == 0.0
    assert _others_gpus(seen(None), mine) == 0.0  # the cluster does not say
