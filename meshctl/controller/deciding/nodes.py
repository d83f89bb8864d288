"""The scheduler's view of the world the controller observed: the driven pools' live nodes less
what running jobs hold (cordoned, draining, unhealthy and reclaimed nodes marked), built with
the lifecycle's node builder, and the running jobs. Pure, like ``decide``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

from meshctl.controller.deciding.world import JobView, World, request_of
from meshctl.lifecycle import Estimator
from meshctl.lifecycle.snapshot import (
    NodeShape,
    leaving,
    node_of,
    offers_of,
    price_paid,
    running_of,
)
from meshctl.model.accelerators import GPU, AcceleratorsSpec
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import (
    Accelerator,
    AwsPool,
    GcpPool,
    LocalPool,
    Mesh,
    NodeGroup,
    Pool,
    RayPool,
)
from meshctl.pools.observed import NODE_TYPE_LABEL, ObservedNode, PoolObservation, node_name
from meshctl.scheduler import Allocation, Node, Running
from meshctl.scheduler.snapshot import NodeHealth
from meshctl.state.records import (
    UNRECORDED,
    AttemptRecord,
    Held,
    InstanceState,
    JobState,
    NodeState,
)

JOINING = InstanceState.JOINING
FINISHED_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
OUT_OF_SERVICE: Mapping[str, NodeHealth] = {  # a node record's state as the scheduler sees it
    NodeState.CORDONED: "cordoned",
    NodeState.DRAINING: "draining",
    NodeState.DRAINED: "drained",
    NodeState.UNHEALTHY: "unhealthy",
}


def pools_down(
    mesh: Mesh, observations: Mapping[str, PoolObservation], unreachable: Mapping[str, str]
) -> dict[str, str]:
    """Local and Ray pools that cannot be used now, and why: a local pool that is not up, a
    Ray pool with no client (``unreachable``: why, e.g. its token file cannot be read) or one
    that does not answer (cloud pools: their credentials, ``access.py``)."""
    down: dict[str, str] = {}
    for pool in mesh.spec.pools:
        seen = observations.get(pool.name)
        if isinstance(pool, LocalPool) and seen is None:
            down[pool.name] = "not up"
        elif isinstance(pool, RayPool) and seen is None:
            down[pool.name] = unreachable.get(pool.name, "not driven: no client for it")
        elif isinstance(pool, LocalPool | RayPool) and seen and not seen.reachable:
            down[pool.name] = seen.error or "does not answer"
    return down


def nodes(
    world: World,
    mesh: Mesh,
    running: Sequence[Running],
    catalogs: Mapping[str, Catalog],
    registry: AcceleratorsSpec | None = None,
) -> list[Node]:
    """The driven pools' nodes, less what running jobs hold; cordoned and draining nodes
    marked so. An on-prem node Ray reports dead is down (it takes no work and counts for no
    capacity, but a job that only it could hold waits for it to come back); a dead cloud
    node is gone (its jobs are evicted by ``dead_nodes``). A cloud node is priced at what
    its instance costs (``cloud_prices``), an on-prem one at its pool's amortised price. A
    cloud node whose instance is still joining is not there yet: Ray may list it before the
    join is done (its agent not answering yet, or a start-up tried again), and work placed on
    it then can lose its node at once. A node's devices are counted in its vendor's Ray
    resource (the ``registry``'s): a TPU host's chips are its TPU, never GPUs."""
    joining = {(i.pool, node_name(i.id)) for i in world.instances if i.state == JOINING}
    held: dict[str, list[Allocation]] = defaultdict(list)
    for job in running:
        for alloc in job.allocations:
            held[f"{job.pool}/{alloc.node}"].append(alloc)
    prices = cloud_prices(world, mesh, catalogs)
    out = []
    for name, observation in world.pools.items():
        pool = mesh.pool(name)
        if pool is None or not observation.reachable:
            continue
        groups = _groups(pool, observation, catalogs)
        usd = pool.cost.usd_per_gpu_hour or 0.0
        cloud = isinstance(pool, AwsPool | GcpPool)
        for seen in _latest(observation.nodes):
            if seen.head or (seen.gpus == 0 and seen.cpus == 0) or (cloud and not seen.alive):
                continue
            if cloud and (name, seen.name) in joining:
                continue
            key = f"{name}/{seen.name}"
            shape = _shape(seen, groups.get(seen.name), pool, registry)
            price = prices.get((name, seen.name), usd)
            health = _health(world, key) if seen.alive else "down"
            mine = held[key] if seen.alive else ()
            others = _others_gpus(seen, mine)
            node = node_of(name, seen.name, shape, price, health, mine, others)
            cache = world.caches.get(key)
            if cache is not None:  # whole, or on its way (the simulator's nodes: the same)
                node = replace(node, datasets=cache.complete | cache.fetching)
            out.append(node)
    return out


def _others_gpus(seen: ObservedNode, mine: Sequence[Allocation]) -> float:
    """GPUs Ray counts as taken on the node beyond what meshctl's own jobs hold there: work
    submitted to the cluster another way, never given to a meshctl job. meshctl records a
    job's hold before Ray hears of it, so its own jobs never count here."""
    if seen.gpus_in_use is None:
        return 0.0
    return max(0.0, round(seen.gpus_in_use - sum(a.gpus() for a in mine), 6))


def _latest(seen: Sequence[ObservedNode]) -> list[ObservedNode]:
    """One entry per node name: the live one when Ray lists a dead one too (a node that came
    back joins with a new Ray id)."""
    alive = {n.name for n in seen if n.alive}
    out, named = [], set()
    for node in seen:
        if (node.alive or node.name not in alive) and node.name not in named:
            out.append(node)
            named.add(node.name)
    return out


def _health(world: World, key: str) -> NodeHealth:
    pool, node = key.split("/", 1)
    record = world.nodes.get(key)
    health: NodeHealth = "ready"
    if record is not None and record.state in OUT_OF_SERVICE:
        health = OUT_OF_SERVICE[record.state]
    if (pool, node) in world.reclaiming or key in world.suspect:
        health = "cordoned"  # being taken back, or its agent is late: nothing new goes there
    if (pool, node) in world.interrupted:
        health = "down"  # its instance is gone, though Ray may list its node a moment longer
    if key in world.health:
        health = "unhealthy"  # its probe says so (the record follows this cycle)
    return health


def cloud_prices(
    world: World, mesh: Mesh, catalogs: Mapping[str, Catalog]
) -> dict[tuple[str, str], float]:
    """USD per GPU-hour of each live cloud instance's node, at the price paid for it (the
    pool's discount off the list price, or spot), as the ledger charges it."""
    offers = {(o.pool, o.node_type): o for p in mesh.spec.pools for o in offers_of(p, catalogs)}
    prices = {}
    for instance in world.instances:
        offer = offers.get((instance.pool, instance.instance_type))
        if offer is not None:
            usd = price_paid(offer, instance.spot) / max(offer.gpus, 1)
            prices[(instance.pool, node_name(instance.id))] = usd
    return prices


def observed_nodes(
    pool: Pool, observation: PoolObservation, registry: AcceleratorsSpec | None = None
) -> list[Node]:
    """A pool's nodes as the scheduler sees them (for checks at submit): the live ones all
    free; one it lists dead (or that the store knows and it no longer lists) ``down``, so a
    job that only such a node could hold waits for it, rather than being refused as one that
    can never run (a node restarting for maintenance, one still joining)."""
    groups, usd = _groups(pool, observation, {}), pool.cost.usd_per_gpu_hour or 0.0
    alive = {seen.name for seen in observation.nodes if seen.alive}
    found = []
    for seen in observation.nodes:
        if seen.head or not (seen.gpus or seen.cpus) or (not seen.alive and seen.name in alive):
            continue  # a head, a node without devices, a dead copy of a node back (new id)
        shape = _shape(seen, groups.get(seen.name), pool, registry)
        node = node_of(pool.name, seen.name, shape, usd)
        found.append(node if seen.alive else replace(node, health="down"))
    return found


def _groups(
    pool: Pool, observation: PoolObservation, catalogs: Mapping[str, Catalog]
) -> dict[str, NodeGroup]:
    """What mesh.yaml says of each node (on-prem), or the catalog of its instance type (a
    cloud node, labelled meshctl.io/node-type): GPU memory, vendor, NIC."""
    groups = getattr(pool, "nodes", None) or []
    found = {name: g for g in groups for name in g.node_names()}
    catalog = catalogs.get(pool.provider)
    for seen in observation.nodes if catalog else ():
        kind = catalog.instance_type(seen.labels.get(NODE_TYPE_LABEL, "")) if catalog else None
        if kind is not None and seen.name not in found:
            acc = kind.accelerator
            found[seen.name] = NodeGroup(
                name=seen.name,
                gpus=acc.count,
                accelerator=Accelerator(
                    vendor=acc.vendor, model=acc.model, memory_gib=acc.memory_gib
                ),
                cpus=seen.cpus or 1,
                memory_gib=seen.memory_gib or 1,
                nic_gbps=kind.nic_gbps,
            )
    return found


def _shape(
    seen: ObservedNode, group: NodeGroup | None, pool: Pool, registry: AcceleratorsSpec | None
) -> NodeShape:
    """A node as Ray reports it (devices, CPUs, memory, labels) with what its group or type
    says of the rest (GPU memory and model, vendor, NIC)."""
    accelerator = group.accelerator if group else None
    labels = dict(group.labels) if group else {}  # what mesh.yaml says of it, then Ray
    labels |= {k: v for k, v in seen.labels.items() if not k.startswith("ray.io/")}
    for ours, theirs in (pool.node_labels if isinstance(pool, RayPool) else {}).items():
        if theirs in seen.labels:  # e.g. rack from the operator's own topology label
            labels[ours] = seen.labels[theirs]
    return NodeShape(
        gpus=devices(seen, accelerator, registry),
        gpu_memory_gib=accelerator.memory_gib if accelerator else 0.0,
        accelerator=seen.accelerator or (accelerator.model if accelerator else None),
        vendor=accelerator.vendor if accelerator else ("nvidia" if seen.gpus else None),
        cpus=seen.cpus,
        memory_gib=seen.memory_gib,
        nic_gbps=group.nic_gbps if group else 0.0,
        labels=labels,
    )


def devices(
    seen: ObservedNode, accelerator: Accelerator | None, registry: AcceleratorsSpec | None
) -> int:
    """The node's devices: its GPUs, or for a vendor counted in another Ray resource (the
    registry's) what it declares of that resource over the units one device counts as."""
    if accelerator is None or registry is None:
        return seen.gpus
    resource, units = registry.counted_in(accelerator.vendor, accelerator.model)
    if resource == GPU:
        return seen.gpus
    return int(seen.devices.get(resource, 0.0) // units)


def allocation_of(held: Held) -> Allocation:
    """The scheduler's allocation of what an attempt recorded it holds (the same fields,
    named one by one: ``asdict`` copies deeply, and a cycle makes one per running job)."""
    return Allocation(
        held.node, held.gpu_indices, held.gpu_share, held.cpus, held.memory_gib,
        held.nic_gbps,
    )  # fmt: skip


def running(view: JobView, world: World, estimator: Estimator) -> Running:
    """A running (or leaving) job as the scheduler sees it: its expected end from the runtime
    estimated when it was placed (recorded with its attempt), its latest checkpoint from
    what it recorded. Kept between cycles (``world.derived``) unless its runtime is
    estimated now (the estimates move as jobs end)."""
    attempt = view.attempt
    assert attempt is not None
    record, spec = view.record, view.job.spec
    seen = world.progress.get(record.id)
    checkpointed = (
        seen.checkpoint_at_s if seen is not None and seen.attempt == attempt.number else None
    )
    runtime = attempt.detail.runtime_s
    if runtime is UNRECORDED:  # placed by a controller that did not record it
        runtime = estimator.seconds(record.team, record.name, spec.limits.max_runtime_s)
        found = _running(view, attempt, runtime, checkpointed)
    else:
        make = partial(_running, view, attempt, runtime, checkpointed)
        found = world.derived.running(view, checkpointed, make)
    stop_at = attempt.detail.stop_at_s
    if record.state in (JobState.PREEMPTED, JobState.EVICTED) or record.state in FINISHED_STATES:
        return leaving(found, stop_at if stop_at is not None else world.now_s)
    return found


def _running(
    view: JobView, attempt: AttemptRecord, runtime_s: float | None, checkpointed: float | None
) -> Running:
    record = view.record
    return running_of(
        record.id,
        record.team,
        record.priority,
        attempt.pool,
        tuple(allocation_of(held) for held in attempt.detail.allocations),
        request_of(view),
        attempt.started_at_s or record.updated_at_s,
        runtime_s,
        checkpointed,
    )
