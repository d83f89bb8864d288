"""A scheduler snapshot from the files: the mesh's nodes and cloud offers, at a mesh moment,
built with the lifecycle's own node builder and offers (``snapshot.py``).

Used where no controller observes real pools yet (``meshctl explain`` on a job file). A
``MeshState`` gives each pool's free GPUs; the busy ones are taken from the pool's nodes in
order, whole GPUs first, since which jobs hold them is not known here. Where a controller
runs, ``held`` takes from each node what the running jobs recorded they hold there, and sets
each node's health as the controller last recorded it: the live mesh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from meshctl.lifecycle.snapshot import NodeShape, configured_pools, node_of, offers_of
from meshctl.model.catalog import Catalog
from meshctl.model.mesh import AwsPool, GcpPool, Mesh, Pool
from meshctl.model.meshstate import MeshState
from meshctl.scheduler.snapshot import Allocation, Node, NodeHealth, Offer, Pending, Snapshot


def _nodes(pool: Pool) -> list[Node]:
    if isinstance(pool, AwsPool | GcpPool):
        return []  # cloud nodes exist only once launched
    usd = pool.cost.usd_per_gpu_hour or 0.0
    return [
        node_of(pool.name, name, NodeShape.of_group(group), usd)
        for group in pool.nodes
        for name in group.node_names()
    ]


def _busy(nodes: list[Node], used_gpus: float) -> list[Node]:
    """``used_gpus`` of the pool's GPUs taken, node by node."""
    out = []
    for node in nodes:
        take = int(min(node.gpus, max(0.0, used_gpus)))
        used_gpus -= take
        free = (0.0,) * take + node.gpu_free[take:]
        out.append(replace(node, gpu_free=free))
    return out


def snapshot_from_mesh(
    mesh: Mesh,
    catalogs: Mapping[str, Catalog],
    state: MeshState | None,
    pending: Sequence[Pending],
    now_s: float,
    budget_usd_per_hour: Mapping[str, float | None] | None = None,
) -> Snapshot:
    """``budget_usd_per_hour``: per pool, what its budgets still allow per hour (see
    ``meshctl.policy.tenancy.hourly_headroom``)."""
    moments = state.spec.pools if state else {}
    nodes: list[Node] = []
    offers: list[Offer] = []
    pools = []
    for pool, info in zip(
        mesh.spec.pools, configured_pools(mesh.spec.pools, catalogs), strict=True
    ):
        own = _nodes(pool)
        moment = moments.get(pool.name)
        if moment is not None and moment.free_gpus is not None:
            own = _busy(own, sum(n.gpus for n in own) - moment.free_gpus)
        nodes += own
        offers += offers_of(pool, catalogs)
        budget = (budget_usd_per_hour or {}).get(pool.name)
        wait = moment.expected_wait_s if moment else 0.0
        pools.append(replace(info, expected_wait_s=wait, budget_usd_per_hour=budget))
    teams = {
        name: (t.gpus_in_use, t.gpu_memory_gib_in_use)
        for name, t in (state.spec.teams.items() if state else ())
    }
    return Snapshot(now_s, tuple(nodes), tuple(pools), (), tuple(pending), tuple(offers), teams)


def held(
    snapshot: Snapshot,
    allocations: Sequence[tuple[str, Allocation]],
    health: Mapping[tuple[str, str], NodeHealth],
) -> Snapshot:
    """``snapshot`` with what running jobs hold taken from its nodes (``allocations``: each
    with its pool) and each node's health (by pool and node; a node not named keeps its
    own): the mesh as the controller last recorded it."""
    by_node: dict[tuple[str, str], list[Allocation]] = {}
    for pool, allocation in allocations:
        by_node.setdefault((pool, allocation.node), []).append(allocation)
    return replace(snapshot, nodes=tuple(_taken(n, by_node.get((n.pool, n.name), []),
                                               health.get((n.pool, n.name), n.health))
                                        for n in snapshot.nodes))  # fmt: skip


def _taken(node: Node, holds: Sequence[Allocation], health: NodeHealth) -> Node:
    free = list(node.gpu_free)
    for hold in holds:
        for index in hold.gpu_indices:
            if index < len(free):
                free[index] = max(0.0, round(free[index] - hold.gpu_share, 9))
    return replace(
        node,
        gpu_free=tuple(free),
        cpus_free=max(0.0, node.cpus_free - sum(h.cpus for h in holds)),
        memory_gib_free=max(0.0, node.memory_gib_free - sum(h.memory_gib for h in holds)),
        nic_gbps_free=max(0.0, node.nic_gbps_free - sum(h.nic_gbps for h in holds)),
        health=health,
    )
