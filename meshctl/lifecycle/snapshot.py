"""The scheduler's snapshot, built the one way both the controller and the simulator build it.

- ``node_of``: a node from its shape (what mesh.yaml, a catalog or an observation says it is),
  its price, its health and what running jobs hold on it;
- ``offers_of`` / ``offers_left``: the node types a cloud pool may launch, at the price paid
  (the pool's discount off the catalog's on-demand list price), less what already runs;
- ``configured_pools`` / ``pool_infos``: each pool's facts for the cycle: cloud or not, what
  data from elsewhere costs to reach it (``egress_prices``), expected wait, what it may still
  launch, why it cannot be used now;
- ``running_of``: a running job with its expected end (start plus its runtime, declared or
  estimated) and its latest checkpoint;
- ``pending_of`` and ``nominations``: a waiting job with its runtime for backfill, whether a
  launch for it is under way, and the nodes being freed for it by preemption.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from meshctl.model.catalog import Catalog
from meshctl.model.mesh import AwsPool, GcpPool, NodeGroup, Pool
from meshctl.scheduler import Allocation, Node, Offer, Pending, PoolInfo, Request, Running
from meshctl.scheduler.snapshot import CheckpointPlan, NodeHealth


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What one node has, whatever says so: a node group, a catalog's instance type, Ray."""

    gpus: int
    gpu_memory_gib: float = 0.0
    accelerator: str | None = None
    vendor: str | None = None
    cpus: float = 0.0
    memory_gib: float = 0.0
    nic_gbps: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_group(cls, group: NodeGroup) -> NodeShape:
        acc = group.accelerator
        return cls(
            int(group.gpus),
            acc.memory_gib if acc else 0.0,
            acc.model if acc else None,
            acc.vendor if acc else None,
            group.cpus,
            group.memory_gib,
            group.nic_gbps,
            dict(group.labels),
        )

    @classmethod
    def of_offer(cls, offer: Offer, labels: Mapping[str, str] | None = None) -> NodeShape:
        return cls(
            offer.gpus,
            offer.gpu_memory_gib,
            offer.accelerator,
            offer.vendor,
            offer.cpus,
            offer.memory_gib,
            offer.nic_gbps,
            dict(labels or {}),
        )


def node_of(
    pool: str,
    name: str,
    shape: NodeShape,
    usd_per_gpu_hour: float,
    health: NodeHealth = "ready",
    held: Sequence[Allocation] = (),
    others_gpus: float = 0.0,
) -> Node:
    """The scheduler's node: ``shape`` less what ``held`` takes (a share of a GPU is taken
    from the GPU it names; an index past the node's GPUs is ignored), and less ``others_gpus``
    taken by work meshctl did not start (from the last GPUs free: which ones is not known)."""
    gpu_free = [1.0] * shape.gpus
    cpus, memory, nic = shape.cpus, shape.memory_gib, shape.nic_gbps
    for alloc in held:
        for i in alloc.gpu_indices:
            if i < len(gpu_free):
                gpu_free[i] = max(0.0, gpu_free[i] - alloc.gpu_share)
        cpus, memory, nic = cpus - alloc.cpus, memory - alloc.memory_gib, nic - alloc.nic_gbps
    for i in reversed(range(len(gpu_free))):
        taken = min(others_gpus, gpu_free[i])
        gpu_free[i], others_gpus = gpu_free[i] - taken, others_gpus - taken
    return Node(
        name=name,
        pool=pool,
        gpu_free=tuple(gpu_free),
        gpu_memory_gib=shape.gpu_memory_gib,
        accelerator=shape.accelerator,
        vendor=shape.vendor,
        cpus=shape.cpus,
        cpus_free=max(0.0, cpus),
        memory_gib=shape.memory_gib,
        memory_gib_free=max(0.0, memory),
        nic_gbps=shape.nic_gbps,
        nic_gbps_free=max(0.0, nic),
        labels=shape.labels,
        health=health,
        usd_per_gpu_hour=usd_per_gpu_hour,
    )


# --- cloud offers and pool facts ------------------------------------------------------------


def offers_of(pool: Pool, catalogs: Mapping[str, Catalog]) -> list[Offer]:
    """The node types a cloud pool may launch, priced as paid: the on-demand list price less
    the pool's negotiated discount (spot is a market price: no discount), capped by the type's
    and the pool's ``max_nodes``."""
    catalog = catalogs.get(pool.provider)
    if not isinstance(pool, AwsPool | GcpPool) or catalog is None:
        return []
    offers = []
    for node_type in pool.node_types:
        found = catalog.instance_type(node_type.name)
        price = found.prices.get(pool.region) if found else None
        if found is None or price is None:
            continue
        acc, discount = found.accelerator, 1 - pool.cost.discount_pct / 100
        offers.append(
            Offer(
                pool.name,
                found.name,
                acc.count,
                acc.memory_gib,
                acc.model,
                acc.vendor,
                found.vcpus,
                found.memory_gib,
                found.nic_gbps,
                price.on_demand_usd_per_hour * discount,
                price.spot_usd_per_hour,
                node_type.spot,
                min(node_type.max_nodes, pool.max_nodes),
            )
        )
    return offers


def price_paid(offer: Offer, spot: bool) -> float:
    """USD per hour one node of this offer costs: its spot price when it runs as spot (and the
    catalog has one), else the discounted on-demand price. The ledger and scoring read this."""
    if spot and offer.spot_usd_per_hour is not None:
        return offer.spot_usd_per_hour
    return offer.on_demand_usd_per_hour


def offers_left(offers: Iterable[Offer], live: Mapping[tuple[str, str], int]) -> tuple[Offer, ...]:
    """Each offer with its cap less what runs of its (pool, node type) already."""
    return tuple(
        replace(
            o,
            max_nodes=max(0, o.max_nodes - live.get((o.pool, o.node_type), 0)),
            max_nodes_configured=o.max_nodes,
        )
        for o in offers
    )


def configured_pools(
    pools: Sequence[Pool], catalogs: Mapping[str, Catalog]
) -> tuple[PoolInfo, ...]:
    """The mesh file's pools as the scheduler knows them before anything runs: cloud or not,
    what a GiB of data homed elsewhere costs to reach it, and for a cloud pool the most nodes
    it may run (its ``max_nodes``)."""
    prices = egress_prices(pools, catalogs)
    return tuple(
        PoolInfo(
            p.name,
            isinstance(p, AwsPool | GcpPool),
            max_new_nodes=p.max_nodes if isinstance(p, AwsPool | GcpPool) else None,
            egress_usd_per_gib=pool_egress(p, prices),
        )
        for p in pools
    )


def egress_prices(pools: Sequence[Pool], catalogs: Mapping[str, Catalog]) -> dict[str, float]:
    """USD a GiB leaving each data home (``meshctl.scheduler.request.HOMES``) costs: a cloud's
    catalog internet egress price (none listed: free), on-prem the highest
    ``cost.egress_usd_per_gib`` among the mesh's on-prem pools (one site's transit; default 0:
    an on-prem data set's pool is not known, so the dearest is taken)."""
    prices = {}
    for provider in ("aws", "gcp"):
        catalog = catalogs.get(provider)
        if catalog is not None and catalog.spec.egress is not None:
            prices[provider] = catalog.spec.egress.internet_usd_per_gib
    onprem = [p.cost.egress_usd_per_gib for p in pools if not isinstance(p, AwsPool | GcpPool)]
    prices["onprem"] = max(onprem, default=0.0)
    return prices


def pool_egress(pool: Pool, prices: Mapping[str, float]) -> dict[str, float]:
    """What a GiB from each other home costs to reach ``pool``'s nodes: its home's egress
    price; from its own home (its provider, or on-prem): nothing, regions not told apart."""
    own = pool.provider if isinstance(pool, AwsPool | GcpPool) else "onprem"
    return {home: usd for home, usd in prices.items() if home != own and usd > 0}


def pool_infos(
    configured: Sequence[PoolInfo],
    waits: Mapping[str, float],
    live: Mapping[str, int],
    unavailable: Mapping[str, str],
) -> tuple[PoolInfo, ...]:
    """The pools' facts for one cycle: the expected wait (``waits``), for a cloud pool the nodes
    it may still launch (its cap less its ``live`` instances), why it cannot be used now."""
    return tuple(
        replace(
            p,
            expected_wait_s=waits.get(p.name, 0.0),
            max_new_nodes=None
            if p.max_new_nodes is None
            else p.max_new_nodes - live.get(p.name, 0),
            unavailable=unavailable.get(p.name),
        )
        for p in configured
    )


# --- jobs -----------------------------------------------------------------------------------


def running_of(
    job_id: str,
    team: str,
    priority: int,
    pool: str,
    allocations: tuple[Allocation, ...],
    request: Request,
    started_at_s: float,
    runtime_s: float | None,
    last_checkpoint_at_s: float | None = None,
    checkpoints: CheckpointPlan | None = None,
    leaving: bool = False,
) -> Running:
    """A running job; it is expected to end ``runtime_s`` (declared or estimated) after it
    started, or at an unknown time when there is none. A fungible request runs as the option
    it was placed as (what it holds a node)."""
    end = None if runtime_s is None else started_at_s + runtime_s
    if request.options and allocations:
        request = request.held(allocations[0].gpus())
    return Running(
        job_id,
        team,
        priority,
        pool,
        allocations,
        request,
        started_at_s,
        last_checkpoint_at_s,
        end,
        leaving,
        checkpoints,
    )


def leaving(job: Running, stop_at_s: float) -> Running:
    """A running job on its way out (preempted, evicted, failed while it runs): never a victim
    again, and expected to end when it is stopped, if not before."""
    end = stop_at_s if job.expected_end_s is None else min(job.expected_end_s, stop_at_s)
    return replace(job, leaving=True, expected_end_s=end)


def pending_of(
    job_id: str,
    team: str,
    priority: int,
    request: Request,
    submitted_at_s: float,
    runtime_s: float | None,
    nominated: Sequence[str] = (),
    provisioning: bool = False,
) -> Pending:
    """A waiting job: ``runtime_s`` is what backfill reckons it runs (declared or estimated)."""
    return Pending(
        job_id,
        team,
        priority,
        request,
        submitted_at_s,
        runtime_s,
        provisioning=provisioning,
        nominated=tuple(nominated),
    )


def nominations(freeing: Iterable[tuple[str, Sequence[str]]]) -> dict[str, tuple[str, ...]]:
    """For each preemptor, the nodes its victims (still stopping) are freeing for it, in order
    and once each; ``freeing``: (preemptor, the victim's nodes) per victim."""
    found: dict[str, list[str]] = defaultdict(list)
    for preemptor, nodes in freeing:
        found[preemptor] += [n for n in nodes if n not in found[preemptor]]
    return {job: tuple(nodes) for job, nodes in found.items()}
