"""Finding nodes for one job: filter the candidates the free-GPU index offers, score them,
and pick the best node (or, for a gang, the best set of nodes, see gang.py).

Like Kubernetes' percentage of nodes to score, a single-node job scores at most
``max_candidates`` feasible nodes per pool, taken best fit first (worst fit first to spread),
so a decision costs the same on 100 nodes or 10,000; a node identical to one already taken
(same free resources, price, data sets) counts towards that limit but is not scored again,
since it would score the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from meshctl.scheduler.framework import CycleContext, Filter, Rejection, Scorer
from meshctl.scheduler.gang import choose_gang
from meshctl.scheduler.plan import Candidate
from meshctl.scheduler.request import Request
from meshctl.scheduler.scorers.locality import local_gib
from meshctl.scheduler.state import FreeIndex, NodeState

Extra = Callable[[NodeState], Rejection | None]


@dataclass(frozen=True, slots=True)
class Weighted:
    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class Choice:
    nodes: tuple[NodeState, ...]
    candidates: tuple[Candidate, ...]
    considered: int


def rejection(
    req: Request,
    node: NodeState,
    ctx: CycleContext,
    filters: Sequence[Filter],
    extra: Extra | None = None,
) -> Rejection | None:
    for check in filters:
        found = check(req, node, ctx)
        if found is not None:
            return found
    return extra(node) if extra is not None else None


def score(
    req: Request, node: NodeState, ctx: CycleContext, scorers: Sequence[Weighted]
) -> Candidate:
    parts, total, total_weight = [], 0.0, 0.0
    for w in scorers:  # one pass: this runs for every candidate of every job
        value = w.scorer(req, node, ctx)
        parts.append((w.scorer.name, value))
        total += w.weight * value
        total_weight += w.weight
    local, gib = local_gib(req, (node.node.datasets,)) or (None, None)
    return Candidate((node.name,), total / (total_weight or 1.0), tuple(parts), local, gib)


def feasible(
    req: Request,
    indexes: Mapping[str, FreeIndex],
    ctx: CycleContext,
    filters: Sequence[Filter],
    limit: int | None,
    spread: bool,
    extra: Extra | None = None,
) -> tuple[list[NodeState], int]:
    """Nodes that can take ``req`` now (at most ``limit`` per pool), and how many were looked at."""
    found, looked = [], 0
    for pool in sorted(ctx.usable_pools):
        index = indexes.get(pool)
        if index is None:
            continue
        seen: set[tuple[object, ...]] = set()
        feasible_here = 0
        for node in index.candidates(req, spread):
            looked += 1
            if rejection(req, node, ctx, filters, extra) is not None:
                continue
            feasible_here += 1
            if limit is not None:  # a twin of a node already taken would score the same
                shape = _shape(node)
                if shape in seen:
                    if feasible_here >= limit:
                        break
                    continue
                seen.add(shape)
            found.append(node)
            if limit is not None and feasible_here >= limit:
                break
    return found, looked


def _shape(node: NodeState) -> tuple[object, ...]:
    """Everything a scorer of a single-node placement reads from a node."""
    n = node.node
    return (
        tuple(node.gpu_free),
        node.cpus_free,
        node.memory_free,
        node.nic_free,
        n.usd_per_gpu_hour,
        n.datasets,
        n.cpus,
        n.memory_gib,
        n.pool,
        n.accelerator,
        n.vendor,
        n.gpu_memory_gib,
    )


def _scored(
    req: Request, nodes: Sequence[NodeState], ctx: CycleContext, scorers: Sequence[Weighted]
) -> dict[str, Candidate]:
    """Each node's score, computed once per node shape: a gang looks at every feasible node,
    and on a large pool most of them are twins (empty nodes of one type)."""
    by_shape: dict[tuple[object, ...], Candidate] = {}
    scored = {}
    for node in nodes:
        key = _shape(node)
        found = by_shape.get(key)
        if found is None:
            found = by_shape[key] = score(req, node, ctx, scorers)
        elif found.nodes != (node.name,):
            found = replace(found, nodes=(node.name,))
        scored[node.name] = found
    return scored


def choose(
    req: Request,
    indexes: Mapping[str, FreeIndex],
    ctx: CycleContext,
    filters: Sequence[Filter],
    scorers: Sequence[Weighted],
    *,
    limit: int,
    spread: bool,
    top: int,
    topology_weight: float,
    rank: Callable[[str], int],
    extra: Extra | None = None,
) -> Choice | None:
    """The best placement for ``req`` now, or None if no node (or set of nodes) can take it."""
    gang = req.nodes > 1
    nodes, looked = feasible(req, indexes, ctx, filters, None if gang else limit, spread, extra)
    if len(nodes) < req.nodes:
        return None
    scored = _scored(req, nodes, ctx, scorers)
    if gang:
        picked = choose_gang(req, nodes, scored, topology_weight)
        if picked is None:
            return None
        chosen, best = picked
        return Choice(chosen, (best,), looked)
    ranked = sorted(nodes, key=lambda n: (-scored[n.name].total, rank(n.node.pool), n.name))
    return Choice((ranked[0],), tuple(scored[n.name] for n in ranked[:top]), looked)


def rejections(
    req: Request, nodes: Iterable[NodeState], ctx: CycleContext, filters: Sequence[Filter]
) -> tuple[Counter[str], Counter[str], int]:
    """Every node's first rejection: counts by reason and by exhausted dimension; node count."""
    reasons: Counter[str] = Counter()
    dimensions: Counter[str] = Counter()
    total = 0
    for node in nodes:
        total += 1
        found = rejection(req, node, ctx, filters)
        if found is not None:
            reasons[found.reason] += 1
            if found.dimension:
                dimensions[found.dimension] += 1
    return reasons, dimensions, total
