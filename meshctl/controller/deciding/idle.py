"""Idle cloud instances go: the lifecycle's idle teardown fed what the controller observed,
and whether a cloud instance has joined its pool's cluster. Pure, like ``decide``."""

from __future__ import annotations

from collections.abc import Sequence

from meshctl.controller.deciding.dispatch import placement_nodes
from meshctl.controller.deciding.step import Rules, Step, Teardown, own_head
from meshctl.controller.deciding.world import JobView, World
from meshctl.lifecycle.teardown import CloudNode, idle
from meshctl.model.mesh import AwsPool, GcpPool
from meshctl.pools.observed import node_name
from meshctl.state.records import InstanceRecord, InstanceState

JOIN_TIMEOUT_S = 600.0  # an instance whose node has not joined by then is idle, not joining


def joined(world: World, instance: InstanceRecord) -> bool:
    """Whether the instance has joined its pool's cluster: it is no longer joining, and its
    node is in the cluster as observed (a pool not driven yet cannot say), or it has had
    ``JOIN_TIMEOUT_S``: one that never shows up is idle, not joining forever."""
    if instance.state == InstanceState.JOINING:
        return False
    seen = world.pools.get(instance.pool)
    if seen is None or world.now_s - (instance.launched_at_s or 0.0) >= JOIN_TIMEOUT_S:
        return True
    return node_name(instance.id) in world.live_nodes(instance.pool)


def idle_pools(world: World, rules: Rules, holding: Sequence[JobView], step: Step) -> None:
    """Idle cloud instances go (the lifecycle's rule): each idle for its pool's
    ``idle_minutes`` since its launch or the end of the last job on it; the head of a
    pool's cluster (its own, else its first instance) last, and not while workers are on
    their way to join it: launched this cycle (as in the simulator, where a launch comes
    first) or in flight on the launch thread."""
    clouds = [p for p in rules.mesh.spec.pools if isinstance(p, AwsPool | GcpPool)]
    if not clouds:
        return  # no cloud instance to tear down
    busy = {
        f"{v.attempt.pool}/{n}" for v in holding if v.attempt for n in placement_nodes(v.attempt)
    }
    busy |= {f"{d.attempt.pool}/{n}" for d in step.dispatches for n in placement_nodes(d.attempt)}
    for pool in clouds:
        mine = sorted(  # the head first: the pool's own (if any), else the first launched
            (i for i in world.instances if i.pool == pool.name),
            key=lambda i: (not own_head(i.request_id), i.launched_at_s or 0.0, i.id),
        )
        held = max(  # when a job last held a node of the pool (now, while one does)
            (t for k, t in world.node_busy_s.items() if k.startswith(f"{pool.name}/")),
            default=0.0,
        )
        nodes = []
        for i in mine:
            key = f"{pool.name}/{node_name(i.id)}"
            if own_head(i.request_id):  # takes no work: idle since it is up and no job held
                up = i.state != InstanceState.JOINING  # a node of its cluster
                since = max(i.launched_at_s or 0.0, held) if up else None
                nodes.append(CloudNode(pool.name, i.id, since))
            elif key in busy or not joined(world, i):
                nodes.append(CloudNode(pool.name, i.id, None))
            else:
                since = max(i.launched_at_s or 0.0, world.node_busy_s.get(key, 0.0))
                nodes.append(CloudNode(pool.name, i.id, since))
        launching = pool.name in world.launching  # in flight on the launch thread
        if nodes and (launching or any(launch.pool == pool.name for launch in step.launches)):
            nodes[0] = CloudNode(pool.name, nodes[0].instance_id, None)  # they join its head
        going = idle(nodes, pool.idle_minutes * 60, world.now_s)
        if going:
            step.teardowns.append(
                Teardown(pool.name, tuple(t.instance_id for t in going), going[0].reason)
            )
