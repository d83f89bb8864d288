"""A job no pool could ever hold, however long it waited: reported so submit can reject it.

"Ever" ignores what is busy now and node health (a cordoned node may come back); it asks
whether some eligible node, empty, has the GPUs (model, memory, count), CPUs, memory and NIC
for one of the job's nodes, whether enough of them exist for a gang (in one rack or switch
when the topology is required), or whether an eligible cloud pool has a node type that fits.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from meshctl.scheduler.burst import fits as offer_fits
from meshctl.scheduler.filters import accelerator
from meshctl.scheduler.request import Request, shortfall
from meshctl.scheduler.snapshot import Node, Offer, Snapshot

EPS = 1e-9


def node_never(req: Request, node: Node) -> str | None:
    """Why ``node``, even empty, cannot hold one node of ``req``; None if it can."""
    found = accelerator.check(req, node)
    if found is not None:
        return found.reason
    if req.whole_gpus > node.gpus:
        return f"have fewer than {req.whole_gpus} GPUs"
    short = shortfall(req, node.cpus, node.memory_gib, node.nic_gbps)
    return None if short is None else f"have fewer than {short[0]:g} {short[1]}"


def _enough(req: Request, nodes: Sequence[Node]) -> bool:
    if not req.topology_required:
        return len(nodes) >= req.nodes
    domains: dict[str, int] = defaultdict(int)
    for node in nodes:
        domains[node.labels.get(req.topology or "rack", node.name)] += 1
    return max(domains.values(), default=0) >= req.nodes


def _some_fit(req: Request, nodes: Sequence[Node]) -> bool:
    """Whether ``req.nodes`` of ``nodes`` could each hold one node of ``req``."""
    found = 0
    for node in nodes:
        if node_never(req, node) is None:
            found += 1
            if found >= req.nodes:
                return True
    return False


def _cap(offer: Offer) -> int:
    return offer.max_nodes if offer.max_nodes_configured is None else offer.max_nodes_configured


def never_fits(req: Request, eligible: frozenset[str], snap: Snapshot) -> str | None:
    """The reason no eligible pool could ever run ``req``; None if one could."""
    if not eligible:
        return "every pool is denied by policy"
    nodes = [n for n in snap.nodes if n.pool in eligible]
    if not req.topology_required and _some_fit(req, nodes):
        return None  # the common case, answered without looking at every node
    reasons = Counter(r for n in nodes if (r := node_never(req, n)) is not None)
    if _enough(req, [n for n in nodes if node_never(req, n) is None]):
        return None
    offers = [o for o in snap.offers if o.pool in eligible]
    if any(offer_fits(req, o) is None and _cap(o) >= req.nodes for o in offers):
        return None
    if not nodes and not offers:
        return f"no nodes or node types in the pools it may use ({', '.join(sorted(eligible))})"
    if reasons:
        why, count = reasons.most_common(1)[0]
        largest = max((n.gpus for n in nodes), default=0)
        return (
            f"no node can ever hold it: {count} of {len(nodes)} eligible nodes {why}"
            f" (the largest has {largest} GPUs)"
        )
    where = f"in one {req.topology}" if req.topology_required else "in the eligible pools"
    return f"needs {req.nodes} nodes {where}; not enough nodes can hold it"
