"""Nodes that already hold more of the job's data score higher: the share of its bytes held
whole on the node, each data set weighed as ``Request.data_weights`` says (its GiB; one
without a size the mean of the sized ones, or 1 each when none is sized). A job without data
sets, or whose data weighs nothing, scores 1 everywhere (no preference). [0, 1].

Bytes, not data sets, because what a node lacks is what it must fetch before the job computes:
a node holding the 900 GiB corpus beats one holding the 1 GiB vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable

from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.request import Request
from meshctl.scheduler.working import NodeState

NAME = "locality"


def local_share(req: Request, held: frozenset[str]) -> float:
    """The share of ``req``'s data, by weight, among the locations ``held``."""
    total = local = 0.0
    for location, weight in req.data_weights:
        total += weight
        if location in held:
            local += weight
    return local / total if total > 0 else 1.0


def local_gib(req: Request, held: Iterable[frozenset[str]]) -> tuple[float, float] | None:
    """(GiB held, GiB in all) of ``req``'s data sets that give a size, on the node that holds
    the least of it among ``held`` (one set of locations a node): a gang computes once its
    slowest node has its data. None for a job without data sets."""
    if not req.data:
        return None
    sized = [(d.location, d.size_gib) for d in req.data if d.size_gib is not None]
    total = sum((gib for _, gib in sized), 0.0)
    least = min(
        (sum((gib for location, gib in sized if location in node), 0.0) for node in held),
        default=0.0,
    )
    return least, total


class LocalityScorer:
    name = NAME

    def __call__(self, req: Request, node: NodeState, ctx: CycleContext) -> float:
        if not req.data:
            return 1.0
        return local_share(req, node.node.datasets)
