"""Nodes that are cordoned, draining, drained, unhealthy or down take no new work."""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext, Rejection
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState

NAME = "health"
_REJECTIONS = {
    health: Rejection(NAME, health)
    for health in ("cordoned", "draining", "drained", "unhealthy", "down")
}


class HealthFilter:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> Rejection | None:
        return _REJECTIONS.get(node.node.health)
