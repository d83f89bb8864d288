"""Growing a running elastic job back towards its size (``Pending.grows_in``): as many of
the nodes it lacks as are free in its pool, at least one; none it runs on already, none held
for another job, none past its team's quota. Never by preempting or launching. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from meshctl.scheduler.config import SchedulerConfig
from meshctl.scheduler.filters import FILTERS
from meshctl.scheduler.framework import CycleContext, Rejection
from meshctl.scheduler.placement import Choice, Weighted, choose
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Pending
from meshctl.scheduler.working import FreeIndex, NodeState

Extra = Callable[[NodeState], Rejection | None]


def growth(
    job: Pending,
    index: FreeIndex,
    ctx: CycleContext,
    scorers: tuple[Weighted, ...],
    config: SchedulerConfig,
    spread: bool,
    held: Extra | None,
    over_quota: Callable[[Pending], str | None],
) -> tuple[Request, Choice] | None:
    """The largest growth that fits, and where; None when not even one node does."""
    pool, mine = job.grows_in, frozenset(job.holds)
    assert pool is not None

    def extra(node: NodeState) -> Rejection | None:
        if node.name in mine:
            return Rejection("own", "runs a worker of it already")
        return held(node) if held is not None else None

    for count in range(job.request.nodes, 0, -1):
        req = replace(job.request, nodes=count)
        if over_quota(replace(job, request=req)) is not None:
            continue
        choice = choose(
            req, {pool: index}, ctx, FILTERS, scorers, limit=config.max_candidates,
            spread=spread, top=1, topology_weight=0.0, rank=lambda _: 0, extra=extra,
        )  # fmt: skip
        if choice is not None:
            return req, choice
    return None
