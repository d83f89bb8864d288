"""A job no pool could ever hold, however long it waited: reported so submit can reject it.

"Ever" ignores what is busy now and node health (a cordoned node may come back); it asks
whether some eligible node, empty, has the GPUs (model, memory, count), CPUs, memory and NIC
for one of the job's nodes, whether enough of them exist for a gang (in one rack or switch
when the topology is required), or whether an eligible cloud pool has a node type that fits
and may launch enough of it.

The reason names the dimension and by how much, as a person would check it by hand: the
dimensions are tried in the order below, each among the nodes and node types that passed the
ones before, and the first that none passes is the one reported ("needs 9 GPUs per node; the
largest node has 8"). When every dimension is met by some, it is their number: "needs 3 nodes
with 4 GPUs each; the pool onprem has 2 such nodes".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from meshctl.scheduler.burst import fits as offer_fits
from meshctl.scheduler.filters import accelerator
from meshctl.scheduler.request import Request, shortfall
from meshctl.scheduler.snapshot import Node, Offer, Snapshot

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Shape:
    """An empty node, or one of a cloud node type: all that "ever" looks at."""

    pool: str
    name: str
    cloud: bool
    gpus: int
    accelerator: str
    vendor: str | None
    gpu_memory_gib: float
    cpus: float
    memory_gib: float
    nic_gbps: float
    domain: str  # the node's topology domain (rack or switch) when the job requires one
    cap: int  # how many of it there may ever be: 1 for a node, the type's cap for a cloud


def _of_node(node: Node, topology: str | None) -> Shape:
    domain = node.labels.get(topology or "rack", node.name)
    return Shape(
        node.pool,
        node.name,
        False,
        node.gpus,
        node.accelerator or "",
        node.vendor,
        node.gpu_memory_gib,
        node.cpus,
        node.memory_gib,
        node.nic_gbps,
        domain,
        1,
    )


def _of_offer(offer: Offer) -> Shape:
    return Shape(
        offer.pool,
        offer.node_type,
        True,
        offer.gpus,
        offer.accelerator,
        offer.vendor,
        offer.gpu_memory_gib,
        offer.cpus,
        offer.memory_gib,
        offer.nic_gbps,
        "",
        _cap(offer),
    )


def _fits(req: Request, node: Node) -> bool:
    """Whether ``node``, even empty, could hold one node of ``req`` (why not is ``_why``'s)."""
    return (
        accelerator.check(req, node) is None
        and req.whole_gpus <= node.gpus
        and shortfall(req, node.cpus, node.memory_gib, node.nic_gbps) is None
    )


def _cap(offer: Offer) -> int:
    return offer.max_nodes if offer.max_nodes_configured is None else offer.max_nodes_configured


def _enough_nodes(req: Request, nodes: Sequence[Shape]) -> bool:
    """Enough nodes of one kind (a gang's nodes are of one pool and model), in one domain
    when the job requires one."""
    return _most(req, nodes) >= req.nodes


def _most(req: Request, nodes: Sequence[Shape]) -> int:
    """The most nodes a gang could have: of one pool and model (``gang.py``), and in one
    domain when it requires one."""
    kinds: dict[tuple[str, str], list[Shape]] = {}
    for node in nodes:
        kinds.setdefault((node.pool, node.accelerator.lower()), []).append(node)
    if not req.topology_required:
        return max((len(k) for k in kinds.values()), default=0)
    counts = (Counter(n.domain for n in k).values() for k in kinds.values())
    return max((max(c, default=0) for c in counts), default=0)


def _quick_fit(req: Request, nodes: Sequence[Node], offers: Sequence[Offer]) -> bool:
    """The common case, answered without looking at every node: enough nodes fit (no
    topology to respect), or a node type fits and may be launched often enough."""
    if not req.topology_required:
        found: Counter[tuple[str, str]] = Counter()  # a gang's nodes: one pool and model
        for node in nodes:
            if _fits(req, node):
                kind = (node.pool, (node.accelerator or "").lower())
                found[kind] += 1
                if found[kind] >= req.nodes:
                    return True
    return any(offer_fits(req, o) is None and _cap(o) >= req.nodes for o in offers)


def never_fits(
    req: Request,
    eligible: frozenset[str],
    snap: Snapshot,
    node_pools: frozenset[str] | None = None,
) -> str | None:
    """The reason no eligible pool could ever run ``req``; None if one could. When the
    policies keep it from some pools, the reason names them: the job might fit there.
    ``node_pools``: the pools the snapshot's nodes are in, if known (every node eligible:
    the nodes are not copied)."""
    if not eligible:
        return "every pool is denied by policy"
    if node_pools is not None and node_pools <= eligible:
        nodes: Sequence[Node] = snap.nodes
    else:
        nodes = [n for n in snap.nodes if n.pool in eligible]
    offers = [o for o in snap.offers if o.pool in eligible]
    if _quick_fit(req, nodes, offers):
        return None
    why = _why(req, nodes, offers, eligible)
    denied = sorted(p.name for p in snap.pools if p.name not in eligible)
    if why is None or not denied:
        return why
    return f"{why} (the policies do not let it use {', '.join(denied)})"


def _why(
    req: Request, nodes: Sequence[Node], offers: Sequence[Offer], eligible: frozenset[str]
) -> str | None:
    if not nodes and not offers:
        return f"no nodes or node types in the pools it may use ({', '.join(sorted(eligible))})"
    shapes = [_of_node(n, req.topology) for n in nodes] + [_of_offer(o) for o in offers]
    for passes, say in _dimensions(req):
        kept = [s for s in shapes if passes(s)]
        if not kept:
            return say(shapes)
        shapes = kept
    return _too_few(req, shapes)


# A dimension: whether a shape passes it, and what to say when none of those left does.
Dimension = tuple[Callable[[Shape], bool], Callable[[Sequence[Shape]], str]]
# Per node, beyond the GPUs: (the request's field and the shape's, what it is, its unit)
_AMOUNTS = (
    ("cpus", "CPUs per node", ""),
    ("memory_gib", "GiB memory per node", " GiB"),
    ("nic_gbps", "Gbps NIC bandwidth per node", " Gbps"),
)


def _dimensions(req: Request) -> list[Dimension]:
    """The dimensions ``req`` asks for, in the order a person would check them."""
    found = _gpu_dimensions(req) if req.gpus > 0 else []
    if req.whole_gpus:
        found.append(_at_least("gpus", req.whole_gpus, "GPUs per node", ""))
    for field, what, unit in _AMOUNTS:
        need = float(getattr(req, field))
        if need > 0:
            found.append(_at_least(field, need, what, unit))
    return found


def _at_least(field: str, need: float, what: str, unit: str) -> Dimension:
    def passes(shape: Shape) -> bool:
        return need <= float(getattr(shape, field)) + EPS

    def say(shapes: Sequence[Shape]) -> str:
        has = max(float(getattr(s, field)) for s in shapes)
        return f"needs {need:g} {what}; the largest {_kind(shapes)} has {has:g}{unit}"

    return passes, say


def _gpu_dimensions(req: Request) -> list[Dimension]:
    """Any GPU at all, then its vendor, its model and its memory."""
    vendor, models = req.vendor, req.accelerators
    wanted = " or ".join(sorted(req.accelerator_names or models))
    found: list[Dimension] = [
        (
            lambda s: s.gpus > 0,
            lambda ss: f"needs GPUs; no {_kind(ss)} in the pools it may use has any",
        )
    ]
    if vendor:
        found.append(
            (
                lambda s: s.vendor in (None, vendor),
                lambda ss: (
                    f"needs {vendor} GPUs; the pools it may use have "
                    + _listed(s.vendor or "" for s in ss)
                ),
            )
        )
    if models:
        found.append(
            (
                lambda s: s.accelerator.lower() in models,
                lambda ss: (
                    f"needs a GPU of model {wanted}; the pools it may use have "
                    + _listed(s.accelerator for s in ss)
                ),
            )
        )
    if req.gpu_memory_gib > 0:
        found.append(
            (
                lambda s: req.gpu_memory_gib <= _gpu_memory(req, s) + EPS,
                lambda ss: _gpu_memory_reason(req, ss),
            )
        )
    return found


def _gpu_memory(req: Request, shape: Shape) -> float:
    """What one of the job's GPUs would have: a fraction of a GPU gets that share of it."""
    return shape.gpu_memory_gib * (req.gpus if req.fractional else 1.0)


def _gpu_memory_reason(req: Request, shapes: Sequence[Shape]) -> str:
    has = max(_gpu_memory(req, s) for s in shapes)
    if req.fractional:
        return (
            f"needs {req.gpu_memory_gib:g} GiB of GPU memory in {req.gpus:g} of a GPU; "
            f"{req.gpus:g} of the largest GPU has {has:g} GiB"
        )
    return f"needs {req.gpu_memory_gib:g} GiB memory per GPU; the largest GPU has {has:g} GiB"


def _kind(shapes: Sequence[Shape]) -> str:
    clouds = {s.cloud for s in shapes}
    return "node or node type" if len(clouds) == 2 else "node type" if True in clouds else "node"


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted({n for n in names if n})) or "none"


def _too_few(req: Request, shapes: Sequence[Shape]) -> str | None:
    """Every dimension is met by some: then there are too few of them (in one domain), or a
    node type may not be launched often enough."""
    nodes = [s for s in shapes if not s.cloud]
    types = [s for s in shapes if s.cloud]
    if _enough_nodes(req, nodes) or any(t.cap >= req.nodes for t in types):
        # It fits. Reached for a gang that needs one rack or switch: _quick_fit counts
        # nodes, not domains, and leaves it to here.
        return None
    head = f"needs {req.nodes} nodes with {_per_node(req)} each"
    parts = []
    if req.topology_required:
        head += f" in one {req.topology or 'rack'}"
        parts.append(f"the most in one {req.topology or 'rack'} is {_most(req, nodes)}")
    elif len(nodes) >= req.nodes:  # enough, but not of one pool and model
        parts.append(f"the most of one model in one pool is {_most(req, nodes)}")
    elif nodes or not types:
        pools = sorted({n.pool for n in nodes})
        where = f"the pool {pools[0]} has" if len(pools) == 1 else "the pools it may use have"
        parts.append(f"{where} {len(nodes)} such node{'' if len(nodes) == 1 else 's'}")
    parts += [f"{t.pool} may launch at most {t.cap} {t.name}" for t in types]
    return "; ".join([head, *parts])


def _per_node(req: Request) -> str:
    if req.whole_gpus:
        return f"{req.whole_gpus} GPU{'' if req.whole_gpus == 1 else 's'}"
    return f"{req.cpus:g} CPUs and {req.memory_gib:g} GiB memory"
