"""The FGD-style fragmentation scorer, with the arithmetic of each case."""

from __future__ import annotations

import dataclasses

import pytest
from sched_helpers import node, req

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.scorers.fragmentation import FragmentationScorer, fragmented_for
from meshctl.scheduler.state import NodeState

pytestmark = pytest.mark.unit

ANY: frozenset[str] = frozenset()


@pytest.mark.parametrize(
    ("task", "free", "cpus_free", "model", "expected"),
    [
        # 2 whole GPUs free, a 2-GPU task fits: only the half GPU (0.5) is stranded
        pytest.param((2, 1, ANY), (1.0, 1.0, 0.5, 0.0), 8, "h100", 0.5, id="partial-strands"),
        # a 4-GPU task cannot fit on 2 whole GPUs: everything free (2.5) is stranded
        pytest.param((4, 1, ANY), (1.0, 1.0, 0.5, 0.0), 8, "h100", 2.5, id="too-few-whole"),
        # a 0.6 share cannot use the 0.5 GPU: 0.5 stranded; the whole ones can host it
        pytest.param((0.6, 1, ANY), (1.0, 1.0, 0.5, 0.0), 8, "h100", 0.5, id="fraction"),
        # the task needs 16 CPUs, 8 are free: all 2.5 free GPUs are stranded
        pytest.param((1, 16, ANY), (1.0, 1.0, 0.5, 0.0), 8, "h100", 2.5, id="cpus-strand"),
        # the task only runs on A100s: all free GPUs of an H100 node are stranded for it
        pytest.param((1, 1, frozenset({"a100"})), (1.0, 0.0), 8, "h100", 1.0, id="model"),
    ],
)
def test_fragmented_for(task, free, cpus_free, model, expected):
    assert fragmented_for(task, free, cpus_free, model) == pytest.approx(expected)


def scores(workload, nodes, request):
    ctx = CycleContext(now_s=0, workload=workload, most_gpus_per_node=2)
    scorer = FragmentationScorer()
    return {n.name: scorer(request, NodeState(n), ctx) for n in nodes}


def test_a_half_gpu_goes_where_it_strands_least():
    # workload: half-GPU and 1-GPU tasks, equally often. On a (one GPU half used), the 0.5
    # fills the half GPU: nothing new is stranded. On b (both GPUs whole), it breaks a whole
    # GPU: its remaining 0.5 is stranded for the 1-GPU tasks, so b's fragmentation grows.
    a = dataclasses.replace(node("a", gpus=2), gpu_free=(1.0, 0.5))
    b = node("b", gpus=2)
    workload = (((0.5, 1, ANY), 0.5), ((1, 1, ANY), 0.5))
    got = scores(workload, [a, b], req(0.5))
    assert got["a"] > got["b"]


def test_a_cpu_only_task_avoids_stranding_gpus():
    # 1-GPU tasks need 4 CPUs. A CPU-only pod of 62 CPUs on the GPU node leaves it 2 CPUs:
    # both its GPUs become stranded (+2 / 2 most GPUs: score (1 - 1) / 2 = 0);
    # on the CPU node (no GPUs) it strands nothing (score 1).
    gpu_node, cpu_node = node("g", gpus=2, cpus=64), node("c", gpus=0, cpus=64)
    got = scores((((1, 4, ANY), 1.0),), [gpu_node, cpu_node], req(0, cpus=62))
    assert got == {"g": 0.0, "c": 1.0}
