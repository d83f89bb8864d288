"""Cheaper GPU-hours score higher: 1 - price / the dearest price in the snapshot. [0, 1]."""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.state import NodeState

NAME = "cost"


class CostScorer:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        return 1 - node.node.usd_per_gpu_hour / ctx.max_usd_per_gpu_hour
