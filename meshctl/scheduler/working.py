"""The working copy of the nodes during one scheduling cycle, and an index by free GPUs.

The snapshot is immutable; a cycle copies each node's free resources into a ``NodeState`` and
changes them as it places jobs, so later decisions in the same cycle see earlier ones.
``FreeIndex`` buckets a pool's nodes by how many whole GPUs they have free, so a job asking for
``g`` GPUs looks only at nodes with at least ``g`` free, best fit first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Allocation, Node

EPS = 1e-9
# The shapes of nodes made outside a cycle (tests, tools): one table for all of them, so that
# their numbers never mix with a cycle's.
_SHAPES: dict[tuple[object, ...], int] = {}


class NodeState:
    """One node's free resources, mutable within a cycle."""

    __slots__ = (
        "_shape",
        "_shapes",
        "cpus_free",
        "gpu_free",
        "kind",
        "memory_free",
        "name",
        "nic_free",
        "node",
        "nominated",
        "reserved_until_s",
        "shape_key",
        "whole_free",
    )

    def __init__(self, node: Node, shapes: dict[tuple[object, ...], int] | None = None) -> None:
        self.node = node
        self.name = node.name
        self.gpu_free = list(node.gpu_free)
        self.whole_free = node.whole_free
        self.cpus_free = node.cpus_free
        self.memory_free = node.memory_gib_free
        self.nic_free = node.nic_gbps_free
        self.nominated: str | None = None  # freed by preemption for this job
        self.reserved_until_s: float | None = None  # held for the blocked head job
        # what the filters and scorers read of the node itself (all but its name and labels)
        self.kind = (
            node.health, node.pool, node.accelerator, node.vendor, node.gpu_memory_gib,
            node.cpus, node.memory_gib, node.nic_gbps, node.usd_per_gpu_hour, node.datasets,
        )  # fmt: skip
        self._shape: tuple[object, ...] | None = None
        self.shape_key = -1  # shape_id(), once worked out; -1 until then
        # the cycle's shapes, numbered: nodes of one table have one number per shape
        self._shapes = _SHAPES if shapes is None else shapes

    def shape(self) -> tuple[object, ...]:
        """Everything the filters and the single-node scorers read of this node now: two nodes
        of one shape are twins, whose filters pass alike and who score the same. Kept until the
        node's free resources change."""
        if self._shape is None:
            self._shape = (
                self.kind, tuple(self.gpu_free), self.cpus_free, self.memory_free, self.nic_free
            )  # fmt: skip
        return self._shape

    def shape_id(self) -> int:
        """The number of this node's shape among its table's (``States`` keeps one a cycle):
        a dictionary keyed by it hashes an int, not a tuple of twenty-odd fields."""
        if self.shape_key < 0:
            self.shape_key = self._shapes.setdefault(self.shape(), len(self._shapes))
        return self.shape_key

    def shared_gpu_for(self, share: float) -> int | None:
        """Best fit for a fraction of a GPU: the fullest GPU that still has ``share`` free."""
        best, best_free = None, 2.0
        for i, free in enumerate(self.gpu_free):
            if free + EPS >= share and free < best_free:
                best, best_free = i, free
        return best

    def allocate(self, req: Request) -> Allocation:
        """Take ``req`` from this node (the caller has checked that it fits)."""
        indices: tuple[int, ...]
        if req.fractional:
            index = self.shared_gpu_for(req.gpus)
            assert index is not None
            indices, share = (index,), req.gpus
        else:
            indices = tuple(i for i, f in enumerate(self.gpu_free) if f >= 1 - EPS)[
                : req.whole_gpus
            ]
            share = 1.0
        for i in indices:
            self.gpu_free[i] -= share
        self._recount()
        self.cpus_free -= req.cpus
        self.memory_free -= req.memory_gib
        self.nic_free -= req.nic_gbps
        return Allocation(self.name, indices, share, req.cpus, req.memory_gib, req.nic_gbps)

    def release(self, alloc: Allocation) -> None:
        for i in alloc.gpu_indices:
            self.gpu_free[i] = min(1.0, self.gpu_free[i] + alloc.gpu_share)
        self._recount()
        self.cpus_free += alloc.cpus
        self.memory_free += alloc.memory_gib
        self.nic_free += alloc.nic_gbps

    def _recount(self) -> None:
        self._shape, self.shape_key = None, -1
        self.whole_free = sum(1 for f in self.gpu_free if f >= 1 - EPS)

    def copy(self) -> NodeState:
        twin = NodeState(self.node, self._shapes)
        twin.gpu_free = list(self.gpu_free)
        twin.whole_free, twin.cpus_free = self.whole_free, self.cpus_free
        twin.memory_free, twin.nic_free = self.memory_free, self.nic_free
        return twin


class States(dict[str, NodeState]):
    """Each node's working copy, made the first time the cycle looks at the node: a cycle that
    places a few jobs on a pool of thousands of nodes touches a few dozen of them, and the
    cost of a cycle follows what it does, not the size of the mesh."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        super().__init__()
        self.nodes = nodes  # by name, in snapshot order; never changed here
        self.shapes: dict[tuple[object, ...], int] = {}  # its nodes' shapes, numbered

    def __missing__(self, name: str) -> NodeState:
        state = self[name] = NodeState(self.nodes[name], self.shapes)
        return state

    def every(self) -> list[NodeState]:
        """All of them, in snapshot order."""
        return [self[name] for name in self.nodes]


@dataclass
class FreeIndex:
    """A pool's nodes bucketed by whole free GPUs; kept current as the cycle allocates."""

    buckets: list[dict[str, None]]  # names, in snapshot order within a bucket
    states: States

    def moved(self, state: NodeState, before: int) -> None:
        """Re-bucket ``state`` after its whole free GPUs changed from ``before``."""
        if before != state.whole_free:
            del self.buckets[before][state.name]
            self.buckets[state.whole_free][state.name] = None

    def candidates(self, req: Request, spread: bool) -> Iterator[NodeState]:
        """Nodes that may have room for ``req``'s GPUs: best fit first (worst fit to spread)."""
        states = self.states
        for bucket in self.walk(req, spread):
            for name in bucket:
                yield states[name]

    def walk(self, req: Request, spread: bool) -> list[dict[str, None]]:
        """The buckets that may have room for ``req``'s GPUs, in the order to look at them:
        best fit first (worst fit to spread); each bucket's names in snapshot order.

        A fraction of a GPU may fit on a partly used GPU, so every bucket is a candidate then;
        nodes with a shared GPU come first in best-fit order (bucket 0 before whole GPUs).
        The caller changes no bucket while it walks them.
        """
        low = 0 if req.fractional else req.whole_gpus
        found = self.buckets[low:]
        return found[::-1] if spread else found

    def count_below(self, gpus: int) -> int:
        return sum(len(b) for b in self.buckets[: max(0, min(gpus, len(self.buckets)))])
