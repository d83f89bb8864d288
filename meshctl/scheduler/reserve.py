"""Backfill's reservation: where and when the blocked job at the head of the queue will fit.

From each running job's expected end (its start plus its maximum runtime), the nodes that can
take the head job soonest are held from that moment; a later job may use them only if it is
sure to finish before (it has a maximum runtime that ends in time). Jobs without a maximum
runtime never free a node in this reckoning, so a node held only by them is not reserved.
Topology is not considered here: the reservation is a promise of capacity, not of a rack.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from meshctl.scheduler.filters import fit
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Running
from meshctl.scheduler.working import NodeState


def free_at(
    node: NodeState, req: Request, running: Sequence[Running], now_s: float
) -> float | None:
    """When ``req`` fits on ``node`` as its running jobs end; None if that cannot be known."""
    twin = node.copy()
    if fit.check(req, twin) is None:
        return now_s
    for job in sorted(running, key=lambda r: r.expected_end_s if r.expected_end_s else math.inf):
        if job.expected_end_s is None:
            return None
        for alloc in job.allocations:
            if alloc.node == node.name:
                twin.release(alloc)
        if fit.check(req, twin) is None:
            return max(now_s, job.expected_end_s)
    return None


def reserve(
    req: Request, nodes: Sequence[NodeState], running_on: Mapping[str, list[Running]], now_s: float
) -> tuple[tuple[NodeState, ...], float] | None:
    """The ``req.nodes`` nodes free soonest for ``req``, and the moment all of them are."""
    times = sorted(
        (t, node.name, node)
        for node in nodes
        if (t := free_at(node, req, running_on.get(node.name, []), now_s)) is not None
    )
    if len(times) < req.nodes:
        return None
    chosen = times[: req.nodes]
    return tuple(node for _, _, node in chosen), max(t for t, _, _ in chosen)
