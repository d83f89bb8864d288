"""Pools with a shorter expected wait score higher: 1 / (1 + wait / 10 minutes). (0, 1]."""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState

NAME = "wait"
HALF_S = 600.0  # a pool ten minutes behind scores one half


class WaitScorer:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        return 1 / (1 + ctx.pool_wait_s.get(node.node.pool, 0.0) / HALF_S)
