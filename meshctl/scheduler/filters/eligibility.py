"""Only pools the policies make usable for this job now (eligible, and on-prem or a burst
target) and that are available (a pool without credentials, or not up, is not)."""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext, Rejection
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState

NAME = "policy"
NOT_USABLE = Rejection(NAME, "are in pools the policy does not allow now", never=True)


class EligibilityFilter:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> Rejection | None:
        pool = node.node.pool
        if pool in ctx.usable_pools:
            return None
        return ctx.unavailable.get(pool, NOT_USABLE)  # why, for the pool's nodes
