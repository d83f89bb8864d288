"""Bin-pack (prefer the most allocated node, keeping others whole) or spread (the least).

Score = the node's allocated share after the placement, averaged over GPUs, CPUs and memory;
spread is one minus that. Range [0, 1].
"""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState

BINPACK, SPREAD = "binpack", "spread"


def allocated_after(req: Request, node: NodeState) -> float:
    n = node.node
    shares = []
    if n.gpus:
        shares.append(1 - (sum(node.gpu_free) - req.gpus) / n.gpus)
    if n.cpus:
        shares.append(1 - (node.cpus_free - req.cpus) / n.cpus)
    if n.memory_gib:
        shares.append(1 - (node.memory_free - req.memory_gib) / n.memory_gib)
    return min(1.0, max(0.0, sum(shares) / len(shares))) if shares else 0.0


class BinPackScorer:
    name = BINPACK

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        return allocated_after(req, node)


class SpreadScorer:
    name = SPREAD

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        return 1 - allocated_after(req, node)
