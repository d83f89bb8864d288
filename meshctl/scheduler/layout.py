"""What a cycle's set-up derives from the snapshot's nodes, kept from one cycle to the next.

Every cycle starts from a snapshot of every node. On a mesh of 12,500 nodes, grouping them by
pool, bucketing them by free GPUs and summing their capacity costs more than deciding a quiet
cycle. A caller that runs cycle after cycle (the simulator, the controller) keeps one
``Layout`` and hands it to ``schedule`` each time: it finds the nodes that changed since the
last snapshot by identity (an unchanged node is the same ``Node`` object, as the simulator's
cluster keeps them) and redoes only what they touch. What it gives is exactly what a fresh
layout gives, the same lists in the same order, so no decision depends on whether one was kept
(``tests/unit/scheduler/test_layout.py`` holds it to that). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import is_not

from meshctl.scheduler.queue import Totals
from meshctl.scheduler.snapshot import Node

REBUILD_SHARE = 4  # more than 1 node in 4 changed: build afresh, it is as quick


class Layout:
    """The nodes by name and by pool, each pool's nodes bucketed by whole free GPUs (names in
    snapshot order), and the mesh's totals; ``update`` brings it to a new snapshot's nodes."""

    def __init__(self) -> None:
        self.nodes: tuple[Node, ...] = ()
        self.by_name: dict[str, Node] = {}  # in snapshot order
        self.by_pool: dict[str, list[Node]] = {}
        self.buckets: dict[str, list[dict[str, None]]] = {}  # read-only: a cycle copies them
        self.totals = Totals(0, 0.0, 0.0)
        self.max_usd = 0.0
        self.any_unhealthy = False
        self._where: dict[str, int] = {}  # node -> its place in its pool's list
        self._names: dict[str, list[str]] = {}  # pool -> its nodes' names, as by_pool
        self._free: dict[str, list[int]] = {}  # pool -> its nodes' whole free GPUs, as by_pool

    def update(self, nodes: Sequence[Node]) -> Layout:
        """Bring the layout to ``nodes``; returns itself."""
        nodes = tuple(nodes)
        old = self.nodes
        if nodes is old:
            return self
        if len(nodes) != len(old):
            return self._build(nodes)
        changed = list(compress(range(len(nodes)), map(is_not, old, nodes)))  # in C
        if len(changed) * REBUILD_SHARE > len(nodes):
            return self._build(nodes)
        capacity = False
        gained: dict[str, set[int]] = {}  # pool -> the buckets some node moved into
        left: list[tuple[str, int, str]] = []  # (pool, bucket, node): moved out of it
        for i in changed:
            a, b = old[i], nodes[i]
            if a.name != b.name or a.pool != b.pool or a.gpus != b.gpus:
                return self._build(nodes)  # another node, or another shape of buckets
            if (a.cpus, a.memory_gib, a.usd_per_gpu_hour, a.health) != (
                b.cpus,
                b.memory_gib,
                b.usd_per_gpu_hour,
                b.health,
            ):
                capacity = True
            at = self._where[b.name]
            self.by_pool[b.pool][at] = b
            self.by_name[b.name] = b
            if a.whole_free != b.whole_free:
                self._free[b.pool][at] = b.whole_free
                gained.setdefault(b.pool, set()).add(b.whole_free)
                left.append((b.pool, a.whole_free, b.name))
        self.nodes = nodes
        if capacity:
            self._sum()
        for pool, c, name in left:  # the rest of a bucket keeps its order: taken out in place
            if c not in gained.get(pool, ()):
                del self.buckets[pool][c][name]
        for pool, counts in gained.items():
            names, free, buckets = self._names[pool], self._free[pool], self.buckets[pool]
            for c in counts:  # the bucket afresh, in snapshot order (in C: no Python loop)
                buckets[c] = dict.fromkeys(compress(names, map(c.__eq__, free)))
        return self

    def _build(self, nodes: tuple[Node, ...]) -> Layout:
        self.nodes = nodes
        self.by_name = {node.name: node for node in nodes}
        self.by_pool, self._where, self._names, self._free = {}, {}, {}, {}
        for node in nodes:
            members = self.by_pool.setdefault(node.pool, [])
            self._where[node.name] = len(members)
            members.append(node)
        self.buckets = {}
        for pool, members in self.by_pool.items():
            self._names[pool] = [n.name for n in members]
            self._free[pool] = [n.whole_free for n in members]
            buckets: list[dict[str, None]] = [{} for _ in range(max(n.gpus for n in members) + 1)]
            for node in members:
                buckets[node.whole_free][node.name] = None
            self.buckets[pool] = buckets
        self._sum()
        return self

    def _sum(self) -> None:
        gpus, cpus, memory = 0, 0.0, 0.0
        self.max_usd, self.any_unhealthy = 0.0, False
        for node in self.nodes:
            gpus, cpus, memory = gpus + node.gpus, cpus + node.cpus, memory + node.memory_gib
            self.max_usd = max(self.max_usd, node.usd_per_gpu_hour)
            self.any_unhealthy = self.any_unhealthy or node.health == "unhealthy"
        self.totals = Totals(gpus, cpus, memory)
