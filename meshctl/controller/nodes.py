"""The scheduler's view of the world the controller observed: the driven pools' live nodes less
what running jobs hold (cordoned, draining, unhealthy and reclaimed nodes marked), the running
jobs, and the mesh facts the policies read. Pure, like ``decide``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from meshctl.controller.world import JobView, World
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import Accelerator, LocalPool, Mesh, NodeGroup, Pool, RayPool
from meshctl.policy.facts import MeshSnapshot
from meshctl.pools.observed import NODE_TYPE_LABEL, ObservedNode, PoolObservation
from meshctl.scheduler import Allocation, Node, Request, Running, Snapshot
from meshctl.state.records import JobState


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


def mesh_facts(
    mesh: Mesh, snapshot: Snapshot, spend: Mapping[str, float], teams: Mapping[str, float]
) -> MeshSnapshot:
    from meshctl.policy.facts import mesh_snapshot, observed

    free: dict[str, float] = defaultdict(float)
    total: dict[str, int] = defaultdict(int)
    for node in snapshot.nodes:
        if node.health == "ready":
            free[node.pool] += sum(node.gpu_free)
        total[node.pool] += node.gpus
    waits = {p.name: p.expected_wait_s for p in snapshot.pools}
    return observed(
        mesh_snapshot(mesh, {}), free, total, len(snapshot.pending), waits, spend, teams
    )


def expected_wait(world: World, queued: Sequence[JobView]) -> float:
    """How long work waits now: the longest wait among the queued jobs (0 with none)."""
    return max((world.now_s - v.record.submitted_at_s for v in queued), default=0.0)


def nodes(
    world: World, mesh: Mesh, running: Sequence[Running], catalogs: Mapping[str, Catalog]
) -> list[Node]:
    """The driven pools' live nodes, less what running jobs hold; cordoned and draining nodes
    marked so. Dead nodes are left out (their jobs are evicted by ``_dead_nodes``)."""
    held: dict[str, list[Allocation]] = defaultdict(list)
    for job in running:
        for alloc in job.allocations:
            held[f"{job.pool}/{alloc.node}"].append(alloc)
    out = []
    for name, observation in world.pools.items():
        pool = mesh.pool(name)
        if pool is None or not observation.reachable:
            continue
        groups = _groups(pool, observation, catalogs)
        usd = pool.cost.usd_per_gpu_hour or 0.0
        for seen in observation.nodes:
            if seen.head or not seen.alive or (seen.gpus == 0 and seen.cpus == 0):
                continue
            record = world.nodes.get(f"{name}/{seen.name}")
            health = record.state if record else "ready"
            if health not in ("ready", "cordoned", "draining", "drained", "unhealthy"):
                health = "ready"
            if (name, seen.name) in world.reclaiming:
                health = "cordoned"  # its instance is being taken back: nothing new goes there
            if f"{name}/{seen.name}" in world.health:
                health = "unhealthy"  # its probe says so (the record follows this cycle)
            out.append(
                _node(name, seen, groups.get(seen.name), usd, health, held[f"{name}/{seen.name}"])
            )
    return out


def observed_nodes(pool: Pool, observation: PoolObservation) -> list[Node]:
    """A pool's live nodes as the scheduler sees them, all free (for checks at submit)."""
    groups, usd = _groups(pool, observation, {}), pool.cost.usd_per_gpu_hour or 0.0
    return [
        _node(pool.name, seen, groups.get(seen.name), usd, "ready", ())
        for seen in observation.nodes
        if seen.alive and not seen.head and (seen.gpus or seen.cpus)
    ]


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


def _node(
    pool: str,
    seen: ObservedNode,
    group: NodeGroup | None,
    usd: float,
    health: str,
    held: Sequence[Allocation],
) -> Node:
    gpu_free = [1.0] * seen.gpus
    cpus, memory, nic = seen.cpus, seen.memory_gib, group.nic_gbps if group else 0.0
    for alloc in held:
        for i in alloc.gpu_indices:
            if i < len(gpu_free):
                gpu_free[i] = max(0.0, gpu_free[i] - alloc.gpu_share)
        cpus, memory, nic = cpus - alloc.cpus, memory - alloc.memory_gib, nic - alloc.nic_gbps
    accelerator = group.accelerator if group else None
    labels = {k: v for k, v in seen.labels.items() if not k.startswith("ray.io/")}
    return Node(
        name=seen.name,
        pool=pool,
        gpu_free=tuple(gpu_free),
        gpu_memory_gib=accelerator.memory_gib if accelerator else 0.0,
        accelerator=seen.accelerator or (accelerator.model if accelerator else None),
        vendor=accelerator.vendor if accelerator else ("nvidia" if seen.gpus else None),
        cpus=seen.cpus,
        cpus_free=max(0.0, cpus),
        memory_gib=seen.memory_gib,
        memory_gib_free=max(0.0, memory),
        nic_gbps=group.nic_gbps if group else 0.0,
        nic_gbps_free=max(0.0, nic),
        labels=labels,
        health=health,  # type: ignore[arg-type]
        usd_per_gpu_hour=usd,
    )


def running(view: JobView, now: float) -> Running:
    attempt = view.attempt
    assert attempt is not None
    allocations = tuple(  # stored as JSON: the GPU indices come back as a list
        Allocation(**{**a, "gpu_indices": tuple(a["gpu_indices"])})
        for a in attempt.detail.get("allocations", [])
    )
    started = attempt.started_at_s or view.record.updated_at_s
    return Running(
        view.record.id,
        view.record.team,
        view.record.priority,
        attempt.pool,
        allocations,
        Request.of(view.job),
        started,
        leaving=view.record.state in (JobState.PREEMPTED, JobState.EVICTED),
    )
