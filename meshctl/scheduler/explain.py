"""Why each waiting job waits, worked out once the cycle has decided: each node's first
rejection counted by reason and by the dimension that ran out, one scan of the nodes per kind
of request (and the pools it may use), each node shape checked once. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from meshctl.policy.verdict import Verdict
from meshctl.scheduler.availability import Availability
from meshctl.scheduler.filters import FILTERS
from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.placement import rejections
from meshctl.scheduler.plan import Decision
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Pending
from meshctl.scheduler.working import NodeState

_Key = tuple[Request, frozenset[str], frozenset[str]]  # request, usable, eligible pools


def explain_pending(
    pending: Sequence[Pending],
    decisions: Mapping[str, Decision],
    avail: Availability,
    verdict: Callable[[str], Verdict | None],
    base: CycleContext,
    every_node: Callable[[], Sequence[NodeState]],
) -> None:
    """Fill in ``filtered``, ``nodes_considered`` and ``exhausted`` of each pending decision
    (``every_node``: asked for once, when a job waits)."""
    cache: dict[_Key, tuple[Counter[str], Counter[str], int]] = {}
    nodes: Sequence[NodeState] | None = None
    for job in pending:
        decision = decisions.get(job.job_id)
        if decision is None or decision.status != "pending":
            continue
        _, usable, eligible = avail.pools(verdict(job.job_id))
        key = (job.request, usable, eligible if avail.down else usable)
        if key not in cache:
            ctx = avail.context(base, usable, eligible)
            nodes = every_node() if nodes is None else nodes
            cache[key] = rejections(job.request, nodes, ctx, FILTERS)
        reasons, dimensions, total = cache[key]
        decision.filtered, decision.nodes_considered = reasons, total
        decision.exhausted = dimensions.most_common(1)[0][0] if dimensions else None
