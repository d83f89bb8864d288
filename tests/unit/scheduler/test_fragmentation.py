"""The fragmentation scorer (FGD's measure, CPUs and memory counted), with the arithmetic of each
case."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_helpers import node, req

from meshctl.scheduler.framework import CycleContext, Task
from meshctl.scheduler.scorers.fragmentation import (
    FragmentationScorer,
    Mix,
    copies,
    effective_cpus,
    fragmented_for,
)
from meshctl.scheduler.working import NodeState

pytestmark = pytest.mark.unit

ANY: frozenset[str] = frozenset()
HALF_USED = (1.0, 1.0, 0.5, 0.0)  # two whole GPUs, half of one, one taken: 2.5 free


@pytest.mark.parametrize(
    ("task", "free", "cpus_free", "model", "expected"),
    [
        # one copy of a 2-GPU task fits on the 2 whole GPUs: only the half GPU (0.5) is stranded
        pytest.param((2, 1, ANY), HALF_USED, 8, "h100", 0.5, id="partial-strands"),
        # a 4-GPU task cannot fit on 2 whole GPUs: everything free (2.5) is stranded
        pytest.param((4, 1, ANY), HALF_USED, 8, "h100", 2.5, id="too-few-whole"),
        # a 0.6 share: one copy on each whole GPU (0.4 of each left), none on the 0.5:
        # 2.5 - 2 x 0.6 = 1.3
        pytest.param((0.6, 1, ANY), HALF_USED, 8, "h100", 1.3, id="fraction"),
        # a quarter share: 4 copies on the whole GPU, 2 on the 0.6: 1.6 - 6 x 0.25 = 0.1
        pytest.param((0.25, 1, ANY), (1.0, 0.6), 8, "h100", 0.1, id="quarters"),
        # 16 CPUs a copy, 8 free: half a copy's GPU is usable, 2.5 - 0.5 = 2.0
        pytest.param((1, 16, ANY), HALF_USED, 8, "h100", 2.0, id="cpus-half-a-copy"),
        # 4 whole GPUs, CPUs for 2.5 copies of 4: 4 - 2.5 = 1.5 stranded by CPUs
        pytest.param((1, 4, ANY), (1.0,) * 4, 10, "h100", 1.5, id="cpus-bind-first"),
        # a task that asks for no CPU is bounded by GPUs alone: 2 copies of 1, 0.5 stranded
        pytest.param((1, 0, ANY), HALF_USED, 0, "h100", 0.5, id="no-cpus-asked"),
        # the task only runs on A100s: all free GPUs of an H100 node are stranded for it
        pytest.param((1, 1, frozenset({"a100"})), (1.0, 0.0), 8, "h100", 1.0, id="model"),
    ],
)
def test_fragmented_for(task, free, cpus_free, model, expected):
    assert fragmented_for(task, free, cpus_free, model) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("gpus", "free", "expected"),
    [
        pytest.param(2, (1.0, 1.0, 1.0, 0.5), 1, id="whole-in-pairs"),  # 3 whole: one pair
        pytest.param(0.5, (1.0, 0.5, 0.4), 3, id="halves"),  # 2 + 1 + 0
        pytest.param(0.3, (0.9,), 3, id="rounding"),  # 0.9 / 0.3 is 2.999...: still 3
        pytest.param(0, (1.0,), 0, id="no-gpus"),
    ],
)
def test_copies(gpus, free, expected):
    assert copies(gpus, free) == expected


@pytest.mark.parametrize(
    ("cpus_free", "memory_free", "taken", "expected"),
    [
        # 64 CPUs and 512 GiB: 8 GiB a CPU. Half the memory free, all CPUs: 32 count
        pytest.param(64, 256, (0, 0), 32, id="memory-scarcer"),
        # 16 CPUs, all memory free: the CPUs are the scarcer share, 16
        pytest.param(16, 512, (0, 0), 16, id="cpus-scarcer"),
        # taking 8 CPUs and 128 GiB of 64 / 512: min(56, 384 / 8 = 48) = 48
        pytest.param(64, 512, (8, 128), 48, id="after-a-placement"),
    ],
)
def test_effective_cpus(cpus_free, memory_free, taken, expected):
    state = NodeState(
        dataclasses.replace(
            node("n", gpus=2, cpus=64, memory=512),
            cpus_free=cpus_free,
            memory_gib_free=memory_free,
        )
    )
    assert effective_cpus(state, *taken) == pytest.approx(expected)


SHAPES = st.tuples(
    st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.81, 1, 2, 4, 8]),
    st.sampled_from([0, 1, 4, 12.5, 32]),
    st.sampled_from([ANY, frozenset({"h100"}), frozenset({"a100"})]),
)
FREE = st.lists(st.sampled_from([0.0, 0.1, 0.19, 0.5, 0.53, 1.0]), min_size=1, max_size=8)


@given(
    workload=st.lists(st.tuples(SHAPES, st.floats(0.01, 1)), min_size=1, max_size=12),
    free=FREE,
    cpus=st.floats(0, 128),
)
def test_the_grouped_mix_sums_fragmented_for_over_the_shapes(
    workload: list[tuple[Task, float]], free: list[float], cpus: float
) -> None:
    by_hand = sum(p * fragmented_for(task, free, cpus, "h100") for task, p in workload)
    assert Mix(workload).expected(free, cpus, "h100") == pytest.approx(by_hand, abs=1e-9)


@given(task=SHAPES, free=FREE, cpus=st.floats(0, 128), used=st.integers(0, 7))
def test_fragmentation_is_never_negative_nor_more_than_is_free(
    task: Task, free: list[float], cpus: float, used: int
) -> None:
    fewer = [0.0 if i < used else f for i, f in enumerate(free)]
    for gpus in (free, fewer):
        assert -1e-6 <= fragmented_for(task, gpus, cpus, "h100") <= sum(gpus) + 1e-6


def scores(workload, nodes, request):
    ctx = CycleContext(now_s=0, workload=workload)
    scorer = FragmentationScorer()
    return {n.name: scorer(request, NodeState(n), ctx) for n in nodes}


def test_a_half_gpu_goes_where_it_strands_least():
    # workload: half-GPU and 1-GPU tasks, equally often. On a (one GPU half used), the 0.5
    # fills the half GPU: for the 1-GPU tasks the stranded 0.5 is gone (-0.25 expected).
    # On b (both GPUs whole), it breaks a whole GPU, stranding 0.5 for them (+0.25).
    a = dataclasses.replace(node("a", gpus=2), gpu_free=(1.0, 0.5))
    b = node("b", gpus=2)
    workload = (((0.5, 1, ANY), 0.5), ((1, 1, ANY), 0.5))
    got = scores(workload, [a, b], req(0.5))
    assert got == pytest.approx({"a": (1 + 0.25) / 2, "b": (1 - 0.25) / 2})


def test_a_cpu_only_task_avoids_stranding_gpus():
    # 1-GPU tasks need 4 CPUs. A CPU-only pod of 62 CPUs on the GPU node leaves it 2 CPUs:
    # half a copy, so 1.5 of its 2 GPUs become stranded (score (1 - 1.5) / 2, at least 0);
    # on the CPU node (no GPUs) it strands nothing (score 1).
    gpu_node, cpu_node = node("g", gpus=2, cpus=64), node("c", gpus=0, cpus=64)
    got = scores((((1, 4, ANY), 1.0),), [gpu_node, cpu_node], req(0, cpus=62))
    assert got == {"g": 0.0, "c": 1.0}


def test_a_cpu_light_task_goes_where_cpus_are_short():
    # The workload's tasks take 1 GPU and 16 CPUs. On "lean" (2 GPUs, 8 CPUs) they could use
    # half a GPU (1.5 stranded); a 1-GPU 2-CPU pod there leaves 1 GPU and 6 CPUs: 0.375 usable,
    # 0.625 stranded, -0.875 in all. On "rich" (64 CPUs) nothing was or is stranded (0). The
    # pod takes the GPU the lean node's CPUs strand anyway and keeps the rich one's.
    lean, rich = node("lean", gpus=2, cpus=8), node("rich", gpus=2, cpus=64)
    got = scores((((1, 16, ANY), 1.0),), [lean, rich], req(1, cpus=2, memory=0))
    assert got == pytest.approx({"lean": (1 + 0.875) / 2, "rich": 0.5})


def test_memory_taken_strands_gpus_like_cpus():
    # 2 GPUs, 64 CPUs, 512 GiB (8 GiB a CPU); tasks of 1 GPU and 4 CPUs. A CPU-only pod of
    # 1 CPU and 496 GiB leaves 16 GiB: the CPUs count as 2, half a copy: 1.5 GPUs stranded.
    g = node("g", gpus=2, cpus=64, memory=512)
    got = scores((((1, 4, ANY), 1.0),), [g], req(0, cpus=1, memory=496))
    assert got == {"g": 0.0}


def test_without_a_workload_every_node_scores_one():
    got = scores((), [node("a", gpus=2)], req(1))
    assert got == {"a": 1.0}
