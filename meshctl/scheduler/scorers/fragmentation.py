"""Fragmentation-aware scoring after FGD (Weng et al., "Beware of Fragmentation", ATC'23), with
the CPUs and memory a node has left counted as well as its GPUs.

What a task of the workload could use of a node is what copies of it could: as many as the
free GPUs hold (groups of ``g`` whole GPUs for a task of ``g``; ``floor(free / f)`` on each
GPU for a fraction ``f`` of one), fewer where the free CPUs run out first. CPUs count as a
fluid: free CPUs / the task's CPUs copies, a fraction of one included, so that taking CPUs
from a node whose GPUs need them always shows, not only when a whole copy is lost. Memory is
not in the workload's task shapes, so it counts through the CPUs: a node's CPUs count free
only in the share its memory is free as well (``effective_cpus``). A node's free GPU capacity
is *fragmented for* a task by what those copies could not use (all of it where the task does
not accept the node's GPU model); its expected fragmentation sums that over the workload's
task shapes, weighted by how often each occurs.

A placement (GPU or CPU-only: CPUs taken can strand GPUs) scores by how much it changes its
node's expected fragmentation ``d``, in GPUs: ``(1 - d / SCALE_GPUS) / 2``, in [0, 1]: 1/2 for
no change, 1 where it takes a GPU's worth or more out of fragmentation, 0 where it adds one.
Why these choices (measured on the Alibaba openb trace): ``../README.md``, fragmentation.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from meshctl.scheduler.framework import CycleContext, Task
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import EPS, NodeState

NAME = "fragmentation"
# A change of this many GPUs takes the score from 1/2 to 0 (or 1): a tenth of a GPU moves it by
# 0.05, enough to outweigh bin-packing's whole range at weight 100. The largest node's GPUs, the
# scale before, let packing overrule differences under a sixth of a GPU (see the README).
SCALE_GPUS = 1.0


def copies(gpus: float, free: Sequence[float]) -> int:
    """How many tasks of ``gpus`` (a fraction of one GPU, or whole GPUs) the free GPUs hold."""
    if gpus <= 0:
        return 0
    if gpus < 1:
        return sum(int((f + EPS) / gpus) for f in free)
    return sum(1 for f in free if f >= 1 - EPS) // int(gpus)


def usable_by(task: Task, free: Sequence[float], cpus_free: float, model: str) -> float:
    """GPUs of a node that copies of a task of this shape could use (CPUs as a fluid)."""
    gpus, cpus, models = task
    if models and model not in models:
        return 0.0
    n: float = copies(gpus, free)
    if cpus > 0:
        n = min(n, max(cpus_free, 0.0) / cpus)
    return n * gpus


def fragmented_for(task: Task, free: Sequence[float], cpus_free: float, model: str) -> float:
    """The free GPU capacity of a node that a task of this shape cannot use."""
    return sum(free) - usable_by(task, free, cpus_free, model)


def effective_cpus(node: NodeState, cpus_taken: float = 0.0, memory_taken: float = 0.0) -> float:
    """The node's free CPUs after taking these, fewer where its memory is the scarcer share."""
    n, cpus = node.node, node.cpus_free - cpus_taken
    if n.memory_gib <= 0 or n.cpus <= 0:
        return cpus
    return min(cpus, (node.memory_free - memory_taken) * n.cpus / n.memory_gib)


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


@dataclass(frozen=True, slots=True)
class _Group:
    """The workload's tasks of one GPU size and model set, by CPUs ascending, with running
    sums of how often (``share``) and how often per CPU (``per_cpu``; 0 for CPU-free tasks)."""

    gpus: float
    models: frozenset[str]
    cpus: tuple[float, ...]
    share: tuple[float, ...]  # share[i]: the first i tasks'
    per_cpu: tuple[float, ...]


class Mix:
    """A workload's task shapes, grouped so that a node's expected fragmentation costs one pass
    over the GPU sizes (and a bisection each), not one over every shape (openb's queues: 81
    shapes in 24 sizes, 310 in 82). Equal to summing ``fragmented_for`` over the shapes."""

    def __init__(self, workload: Sequence[tuple[Task, float]]) -> None:
        by_size: dict[tuple[float, frozenset[str]], list[tuple[float, float]]] = {}
        for (gpus, cpus, models), p in workload:
            by_size.setdefault((gpus, models), []).append((cpus, p))
        self.total = sum(p for _, p in workload)
        self.groups = tuple(_group(size, sorted(tasks)) for size, tasks in by_size.items())

    def expected(self, free: Sequence[float], cpus_free: float, model: str) -> float:
        cpus, usable = max(cpus_free, 0.0), 0.0
        for g in self.groups:
            if g.models and model not in g.models:
                continue
            n = copies(g.gpus, free)
            if n == 0:
                continue
            # Tasks needing at most cpus / n CPUs each run n copies; the rest cpus / theirs.
            bound = bisect_right(g.cpus, cpus / n + EPS)
            usable += g.gpus * (n * g.share[bound] + cpus * (g.per_cpu[-1] - g.per_cpu[bound]))
        return sum(free) * self.total - usable


def _group(size: tuple[float, frozenset[str]], tasks: list[tuple[float, float]]) -> _Group:
    share, per_cpu = [0.0], [0.0]
    for cpus, p in tasks:
        share.append(share[-1] + p)
        per_cpu.append(per_cpu[-1] + (p / cpus if cpus > 0 else 0.0))
    cpus_each = tuple(cpus for cpus, _ in tasks)
    return _Group(size[0], size[1], cpus_each, tuple(share), tuple(per_cpu))


class FragmentationScorer:
    """Scores with a memo of expected fragmentation per (free GPUs, effective free CPUs,
    model): a cycle sees few distinct ones, so each is worked out once, not once per
    candidate. One scorer serves one cycle (one workload)."""

    name = NAME

    def __init__(self) -> None:
        self._memo: dict[tuple[tuple[float, ...], float, str], float] = {}
        self._workload: tuple[tuple[Task, float], ...] = ()
        self._mix = Mix(())

    def _expected(
        self, free: tuple[float, ...], cpus: float, model: str, ctx: CycleContext
    ) -> float:
        if ctx.workload is not self._workload:
            self._workload, self._mix, self._memo = ctx.workload, Mix(ctx.workload), {}
        key = (free, cpus, model)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._mix.expected(free, cpus, model)
        return found

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        if not ctx.workload or node.node.gpus == 0:
            return 1.0
        model = (node.node.accelerator or "").lower()
        before = self._expected(tuple(node.gpu_free), effective_cpus(node), model, ctx)
        cpus = effective_cpus(node, req.cpus, req.memory_gib)
        change = self._expected(after(req, node), cpus, model, ctx) - before
        return min(1.0, max(0.0, (1 - change / SCALE_GPUS) / 2))
