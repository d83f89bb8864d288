"""Fragmentation-aware scoring after FGD (Weng et al., "Beware of Fragmentation", ATC'23).

A node's free GPU capacity is *fragmented for* a task when the task cannot use it: a task of
``g`` whole GPUs cannot use a partly used GPU, nor any GPU of a node with fewer than ``g``
whole free; a task of a fraction ``f`` cannot use a GPU with less than ``f`` free. The node's
expected fragmentation is the sum over the workload's task sizes of their probability times
the capacity fragmented for them. A placement scores by how little it changes that (the change lies
within +-GPUs on the node): (1 - change / GPUs) / 2, so [0, 1], and a placement that reduces
fragmentation scores above one half.
"""

from __future__ import annotations

from collections.abc import Sequence

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.state import EPS, NodeState

NAME = "fragmentation"


def fragmented_for(task_gpus: float, free: Sequence[float]) -> float:
    """The free GPU capacity of a node (``free`` per GPU) that a task of this size cannot use."""
    if 0 < task_gpus < 1:
        return sum(f for f in free if f + EPS < task_gpus)
    whole = sum(1 for f in free if f >= 1 - EPS)
    if whole < task_gpus:
        return sum(free)
    return sum(f for f in free if f < 1 - EPS)


def expected(free: Sequence[float], workload: Sequence[tuple[float, float]]) -> float:
    return sum(p * fragmented_for(gpus, free) for gpus, p in workload)


def after(req: Request, node: NodeState) -> list[float]:
    """The node's free GPUs as they would be after placing ``req`` (same choice as allocate)."""
    free = list(node.gpu_free)
    if req.fractional:
        index = node.shared_gpu_for(req.gpus)
        if index is not None:
            free[index] -= req.gpus
    else:
        taken = 0
        for i, f in enumerate(free):
            if taken < req.whole_gpus and f >= 1 - EPS:
                free[i], taken = 0.0, taken + 1
    return free


class FragmentationScorer:
    """Scores with a memo of expected fragmentation per free-GPU vector: a cycle sees few
    distinct vectors (a node's GPUs are whole, taken or shared in a handful of ways), so the
    sums run once per vector, not once per candidate. One scorer serves one cycle (one
    workload)."""

    name = NAME

    def __init__(self) -> None:
        self._memo: dict[tuple[float, ...], float] = {}

    def _expected(self, free: Sequence[float], ctx: CycleContext) -> float:
        key = tuple(free)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = expected(key, ctx.workload)
        return found

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        if not ctx.workload or node.node.gpus == 0 or req.gpus == 0:
            return 1.0
        growth = self._expected(after(req, node), ctx) - self._expected(node.gpu_free, ctx)
        return min(1.0, max(0.0, (1 - growth / node.node.gpus) / 2))
