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
from dataclasses import dataclass

from meshctl.model.policy import Weights
from meshctl.scheduler.framework import CycleContext, Filter, Rejection, Scorer
from meshctl.scheduler.gang import choose_gang
from meshctl.scheduler.plan import Candidate
from meshctl.scheduler.request import Request
from meshctl.scheduler.scorers import (
    BinPackScorer,
    CostScorer,
    FragmentationScorer,
    LocalityScorer,
    SpreadScorer,
    WaitScorer,
)
from meshctl.scheduler.scorers.locality import local_gib
from meshctl.scheduler.working import FreeIndex, NodeState

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


def weighted(weights: Weights, spread: bool, fragmentation: bool) -> tuple[Weighted, ...]:
    """The cycle's scorers with the policy's weights (packing weighs 1); none of weight 0."""
    scorers = [
        Weighted(SpreadScorer() if spread else BinPackScorer(), 1.0),
        Weighted(CostScorer(), weights.cost),
        Weighted(WaitScorer(), weights.wait),
        Weighted(LocalityScorer(), weights.locality),
    ]
    if fragmentation:
        scorers.append(Weighted(FragmentationScorer(), weights.fragmentation))
    return tuple(s for s in scorers if s.weight > 0)


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
    """Nodes that can take ``req`` now (at most ``limit`` per pool), and how many were looked at.

    The filters read nothing of a node but its shape (``NodeState.shape``), so they run once
    per shape; only ``extra`` (holds on named nodes) runs for every node. On a large pool most
    candidates are twins, and a twin costs a dictionary lookup."""
    found: list[NodeState] = []
    looked = 0
    for pool in sorted(ctx.usable_pools):
        index = indexes.get(pool)
        if index is not None:
            looked += _feasible_in(req, index, ctx, filters, limit, spread, extra, found)
    return found, looked


def _feasible_in(
    req: Request,
    index: FreeIndex,
    ctx: CycleContext,
    filters: Sequence[Filter],
    limit: int | None,
    spread: bool,
    extra: Extra | None,
    found: list[NodeState],
) -> int:
    """``feasible`` in one pool: appends to ``found``, returns how many nodes it looked at.
    The hottest loop of a cycle: it reads the nodes' shape numbers, not their shapes."""
    passes: dict[int, bool] = {}  # by shape: whether the filters pass
    seen: set[int] = set()
    feasible_here = looked = 0
    states = index.states
    for bucket in index.walk(req, spread):
        for name in bucket:
            node = states[name]
            looked += 1
            shape = node.shape_key
            if shape < 0:
                shape = node.shape_id()
            ok = passes.get(shape)
            if ok is None:
                ok = passes[shape] = rejection(req, node, ctx, filters) is None
            if not ok or (extra is not None and extra(node) is not None):
                continue
            feasible_here += 1
            if limit is not None:  # a twin of a node already taken would score the same
                if shape in seen:
                    if feasible_here >= limit:
                        return looked
                    continue
                seen.add(shape)
            found.append(node)
            if limit is not None and feasible_here >= limit:
                return looked
    return looked


# Scores by what they depend on: the request and the job's runtime where its data's egress is
# spread over it (the rest of the context is the cycle's), then the node's shape.
ScoreMemo = dict[tuple[Request, float | None], dict[int, Candidate]]


def _scored(
    req: Request,
    nodes: Sequence[NodeState],
    ctx: CycleContext,
    scorers: Sequence[Weighted],
    memo: ScoreMemo,
) -> dict[str, Candidate]:
    """Each node's score, computed once per node shape and request in a cycle (``memo``): a
    gang looks at every feasible node, and on a large pool most of them are twins (empty
    nodes of one type); the jobs of a queue ask for a few kinds of request. Twins share one
    ``Candidate``, which names the first node scored (``_named`` names another)."""
    by_shape = memo.setdefault((req, ctx.runtime_s if req.data else None), {})
    scored = {}
    for node in nodes:
        shape = node.shape_id()
        found = by_shape.get(shape)
        if found is None:
            found = by_shape[shape] = score(req, node, ctx, scorers)
        scored[node.name] = found
    return scored


def _named(candidate: Candidate, name: str) -> Candidate:
    if candidate.nodes == (name,):
        return candidate
    c = candidate  # not dataclasses.replace: this runs for every candidate of every job
    return Candidate((name,), c.total, c.scores, c.data_local_gib, c.data_gib)


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
    memo: ScoreMemo | None = None,
) -> Choice | None:
    """The best placement for ``req`` now, or None if no node (or set of nodes) can take it.
    ``memo``: scores already worked out this cycle (the same scorers and cycle context)."""
    gang = req.nodes > 1
    nodes, looked = feasible(req, indexes, ctx, filters, None if gang else limit, spread, extra)
    if len(nodes) < req.nodes:
        return None
    scored = _scored(req, nodes, ctx, scorers, {} if memo is None else memo)
    if gang:
        picked = choose_gang(req, nodes, scored, topology_weight)
        if picked is None:
            return None
        chosen, best = picked
        return Choice(chosen, (best,), looked)
    ranked = sorted(nodes, key=lambda n: (-scored[n.name].total, rank(n.node.pool), n.name))
    return Choice((ranked[0],), tuple(_named(scored[n.name], n.name) for n in ranked[:top]), looked)


def rejections(
    req: Request, nodes: Iterable[NodeState], ctx: CycleContext, filters: Sequence[Filter]
) -> tuple[Counter[str], Counter[str], int]:
    """Every node's first rejection: counts by reason and by exhausted dimension; node count.
    The filters read a node's shape only, so each shape is checked once, for all its twins."""
    twins: dict[tuple[object, ...], list[NodeState]] = {}
    for node in nodes:
        twins.setdefault(node.shape(), []).append(node)
    reasons: Counter[str] = Counter()
    dimensions: Counter[str] = Counter()
    total = 0
    for alike in twins.values():
        total += len(alike)
        found = rejection(req, alike[0], ctx, filters)
        if found is not None:
            reasons[found.reason] += len(alike)
            if found.dimension:
                dimensions[found.dimension] += len(alike)
    return reasons, dimensions, total
