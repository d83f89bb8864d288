"""The simulated mesh's nodes together (each a ``nodes.SimNode``: what it holds, its health,
its view), the GPUs up and held per pool, and the snapshot's view of them.

The engine keeps one scheduler ``Node`` per node and makes a new one only for nodes that
changed since the last cycle (``views``), so a cycle costs what changed, not the size of the
mesh. The lifecycle's ``Capacity`` (what the policies see as GPUs up and free per pool) is
kept the same way: a changed node's old view is taken out and its new one put in.
"""

from __future__ import annotations

from collections import defaultdict

from meshctl.lifecycle.view import Capacity
from meshctl.scheduler import Allocation, Node
from meshctl.scheduler.snapshot import NodeHealth
from meshctl.sim.core.nodes import SimNode


class Cluster:
    """Every node of the mesh, on-prem and cloud, and the GPUs up and held per pool."""

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes: dict[str, SimNode] = {}
        self.views: list[Node] = []
        self.dirty: set[SimNode] = set()
        self.capacity = Capacity()
        self.busy: dict[str, float] = defaultdict(float)  # pool -> GPUs held by jobs
        self.up_gpus: dict[str, int] = defaultdict(int)  # pool -> GPUs on nodes not down
        self.onprem_gpus = sum(n.gpus for n in nodes)
        for node in nodes:
            self.add(SimNode(node), reindex=False)
        self.reindex()

    def add(self, node: SimNode, reindex: bool = True) -> None:
        self.nodes[node.name] = node
        self.up_gpus[node.base.pool] += node.base.gpus
        self.dirty.add(node)
        if reindex:
            self.reindex()

    def remove(self, node: SimNode) -> None:
        del self.nodes[node.name]
        if node.health != "down":
            self.up_gpus[node.base.pool] -= node.base.gpus
        if node.counted is not None:
            self.capacity.remove(node.counted)
            node.counted = None
        self.dirty.discard(node)
        self.reindex()

    def reindex(self) -> None:
        order = list(self.nodes.values())
        for i, node in enumerate(order):
            node.index = i
        self.views = [n.view() for n in order]

    def set_health(self, node: SimNode, health: NodeHealth) -> None:
        was_down, is_down = node.health == "down", health == "down"
        if was_down and not is_down:
            self.up_gpus[node.base.pool] += node.base.gpus
        elif is_down and not was_down:
            self.up_gpus[node.base.pool] -= node.base.gpus
        node.health, node.snap = health, None
        self.dirty.add(node)

    def set_datasets(self, node: SimNode, datasets: frozenset[str]) -> None:
        """What ``node``'s cache now holds (the locality scorer's input)."""
        if datasets != node.datasets:
            node.datasets, node.snap = datasets, None
            self.dirty.add(node)

    def hold(self, node: SimNode, job_id: str, alloc: Allocation, sign: float) -> None:
        """``job_id`` takes (``sign`` 1) or gives back (-1) ``alloc`` on ``node``."""
        node.take(alloc, sign)
        if sign > 0:
            node.jobs.add(job_id)
        else:
            node.jobs.discard(job_id)
        self.dirty.add(node)

    def snapshot_nodes(self) -> tuple[Node, ...]:
        """The nodes as the scheduler sees them now; the views of changed nodes are made
        again, and what the policies see of capacity follows them."""
        for node in self.dirty:
            if node.name not in self.nodes:
                continue
            view = node.view()
            if node.index >= 0:
                self.views[node.index] = view
            if node.counted is not view:
                if node.counted is not None:
                    self.capacity.remove(node.counted)
                self.capacity.add(view)
                node.counted = view
        self.dirty.clear()
        return tuple(self.views)
