"""Fragmentation-aware scoring after FGD (Weng et al., "Beware of Fragmentation", ATC'23).

A node's free GPU capacity is *fragmented for* a task of the workload when the task cannot use
it: every free GPU, if the task cannot run on the node at all (too few whole GPUs, too few
free CPUs, a GPU model it does not accept); otherwise, for a task of ``g`` whole GPUs, the
partly used GPUs, and for a fraction ``f`` of a GPU, the GPUs with less than ``f`` free. A
node's expected fragmentation sums that over the workload's task shapes, weighted by how
often each occurs. A placement (GPU or CPU-only: CPUs taken can strand GPUs) scores by how
little it changes that, against the largest node's GPU count, so nodes of every size are
judged on one scale: (1 - change / most GPUs on a node) / 2, in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

from meshctl.scheduler.framework import CycleContext, Task
from meshctl.scheduler.request import Request
from meshctl.scheduler.state import EPS, NodeState

NAME = "fragmentation"


def fragmented_for(task: Task, free: Sequence[float], cpus_free: float, model: str) -> float:
    """The free GPU capacity of a node that a task of this shape cannot use."""
    gpus, cpus, models = task
    if cpus > cpus_free + EPS or (models and model not in models):
        return sum(free)
    if 0 < gpus < 1:
        return sum(f for f in free if f + EPS < gpus)
    whole = sum(1 for f in free if f >= 1 - EPS)
    if whole < gpus:
        return sum(free)
    return sum(f for f in free if f < 1 - EPS)


def expected(
    free: Sequence[float], cpus_free: float, model: str, workload: Sequence[tuple[Task, float]]
) -> float:
    return sum(p * fragmented_for(task, free, cpus_free, model) for task, p in workload)


def after(req: Request, node: NodeState) -> tuple[float, ...]:
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
    return tuple(free)


class FragmentationScorer:
    """Scores with a memo of expected fragmentation per (free GPUs, free CPUs, model): a cycle
    sees few distinct ones, so the sums run once each, not once per candidate. One scorer
    serves one cycle (one workload)."""

    name = NAME

    def __init__(self) -> None:
        self._memo: dict[tuple[tuple[float, ...], float, str], float] = {}

    def _expected(
        self, free: tuple[float, ...], cpus: float, model: str, ctx: CycleContext
    ) -> float:
        key = (free, cpus, model)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = expected(free, cpus, model, ctx.workload)
        return found

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        if not ctx.workload or node.node.gpus == 0:
            return 1.0
        model = (node.node.accelerator or "").lower()
        before = self._expected(tuple(node.gpu_free), node.cpus_free, model, ctx)
        now = self._expected(after(req, node), node.cpus_free - req.cpus, model, ctx)
        return min(1.0, max(0.0, (1 - (now - before) / ctx.most_gpus_per_node) / 2))
