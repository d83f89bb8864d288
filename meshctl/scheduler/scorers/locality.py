"""Nodes that already hold the job's data sets score higher: the share of them present. A job
without data sets scores 1 everywhere (no preference). [0, 1]."""

from __future__ import annotations

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.state import NodeState

NAME = "locality"


class LocalityScorer:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        if not req.datasets:
            return 1.0
        return len(req.datasets & node.node.datasets) / len(req.datasets)
