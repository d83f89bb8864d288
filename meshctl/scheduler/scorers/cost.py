"""Cheaper GPU-hours score higher: 1 - the node's effective price / the dearest node's price in
the snapshot, at least 0. [0, 1].

The effective price is the node's USD per GPU-hour plus what moving the job's data to it
would cost, spread over the job's expected GPU-hours: for each data set the node does not
hold whole, its GiB times the egress price of its home (the side data leaves pays; on the
node's own provider: nothing; ``CycleContext.egress_usd_per_gib``), divided by the job's GPUs
(1 for a job without any) times its runtime (declared or estimated; ``DEFAULT_RUNTIME_S``
when unknown). A data set without a size adds nothing: no bytes known, no dollars invented.
A copy on another node of the pool is not counted (it would be fetched from the peer): the
scorer sees one node. Where the egress takes a node past the dearest price, it scores 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState

NAME = "cost"
DEFAULT_RUNTIME_S = 3600.0  # a job of unknown runtime: its egress spread over one hour


def egress_usd(req: Request, held: frozenset[str], prices: Mapping[str, float]) -> float:
    """USD to move the data sets of ``req`` not ``held`` on a node to it, at ``prices`` (a
    data set's home -> USD a GiB)."""
    return sum(
        d.size_gib * prices.get(d.home, 0.0)
        for d in req.data
        if d.size_gib and d.location not in held
    )


def gpu_hours(req: Request, runtime_s: float | None) -> float:
    hours = (runtime_s if runtime_s and runtime_s > 0 else DEFAULT_RUNTIME_S) / 3600.0
    return (req.total_gpus or 1.0) * hours


def effective_usd_per_gpu_hour(req: Request, node: NodeState, ctx: CycleContext) -> float:
    price = node.node.usd_per_gpu_hour
    prices = ctx.egress_usd_per_gib.get(node.node.pool) if req.data else None
    if not prices:
        return price
    return price + egress_usd(req, node.node.datasets, prices) / gpu_hours(req, ctx.runtime_s)


class CostScorer:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        return max(0.0, 1 - effective_usd_per_gpu_hour(req, node, ctx) / ctx.max_usd_per_gpu_hour)
