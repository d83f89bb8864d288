"""Gangs: a job of N nodes gets all N at once or none, kept in one rack or under one leaf
switch when its topology asks (required: only then; preferred: best effort). A gang's nodes
are of one pool and one accelerator model: its workers talk over one collective library
(NCCL, RCCL, ...) and run in step, so a mixed mesh's A100s and MI300Xs never make one gang.

The topology score of a set of nodes is its compactness: 1 / the number of domains it spans
(1.0 when all share one rack), weighted by the policy's topology weight.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence

from meshctl.scheduler.plan import Candidate
from meshctl.scheduler.request import Request
from meshctl.scheduler.scorers.locality import local_gib
from meshctl.scheduler.working import NodeState

LABELS = {"rack": "rack", "switch": "switch"}


def _best(nodes: Sequence[NodeState], scored: Mapping[str, Candidate], n: int) -> list[NodeState]:
    """The ``n`` best scored (``sorted(...)[:n]``, without sorting a pool of thousands)."""
    return heapq.nsmallest(n, nodes, key=lambda x: (-scored[x.name].total, x.name))


def _compactness(nodes: Sequence[NodeState], domain: str) -> float:
    return 1 / len({node.node.labels.get(domain, node.name) for node in nodes})


def _value(
    nodes: Sequence[NodeState], scored: Mapping[str, Candidate], domain: str, weight: float
) -> float:
    mean = sum(scored[n.name].total for n in nodes) / len(nodes)
    return (mean + weight * _compactness(nodes, domain)) / (1 + weight)


def choose_gang(
    req: Request,
    nodes: Sequence[NodeState],
    scored: Mapping[str, Candidate],
    topology_weight: float,
) -> tuple[tuple[NodeState, ...], Candidate] | None:
    """The best N feasible nodes for the gang, of one pool and accelerator model, or None if
    no kind of node has N or the topology cannot be met."""
    if len({(n.node.pool, n.node.accelerator) for n in nodes}) <= 1:  # the usual: one kind
        return _choose_gang(req, nodes, scored, topology_weight)
    kinds: dict[tuple[str, str], list[NodeState]] = defaultdict(list)
    for node in nodes:
        kinds[(node.node.pool, (node.node.accelerator or "").lower())].append(node)
    if len(kinds) == 1:
        return _choose_gang(req, nodes, scored, topology_weight)
    found = [
        picked
        for group in kinds.values()
        if len(group) >= req.nodes
        and (picked := _choose_gang(req, group, scored, topology_weight)) is not None
    ]
    if not found:
        return None
    return min(found, key=lambda p: (-p[1].total, p[1].nodes))


def _choose_gang(
    req: Request,
    nodes: Sequence[NodeState],
    scored: Mapping[str, Candidate],
    topology_weight: float,
) -> tuple[tuple[NodeState, ...], Candidate] | None:
    domain = LABELS.get(req.topology or "rack", "rack")
    groups: dict[str, list[NodeState]] = defaultdict(list)
    for node in nodes:
        label = node.node.labels.get(domain)
        groups["?" + node.name if label is None else label].append(node)
    options = [
        _best(group, scored, req.nodes) for group in groups.values() if len(group) >= req.nodes
    ]
    if not req.topology_required:
        options.append(_best(nodes, scored, req.nodes))
    options = [o for o in options if len(o) == req.nodes]
    if not options:
        return None
    options.sort(
        key=lambda o: (-_value(o, scored, domain, topology_weight), tuple(n.name for n in o))
    )
    best = options[0]
    value = _value(best, scored, domain, topology_weight)
    parts = (("nodes_mean", value), ("compactness", _compactness(best, domain)))
    local, gib = local_gib(req, (n.node.datasets for n in best)) or (None, None)
    return tuple(best), Candidate(tuple(n.name for n in best), value, parts, local, gib)
