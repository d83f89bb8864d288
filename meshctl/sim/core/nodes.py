"""A node of the simulated mesh (``SimNode``: what it holds, its health, its scheduler view)
and, for a cloud node, the instance it runs on (``Instance``: its pool, offer, price and life).

Each refers to the other: a joined instance knows its node, a cloud node its instance. They
live together here so that the nodes (``cluster.py``) and the clouds (``fleet.py``) both build
on them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshctl.lifecycle.ledger import Charge
from meshctl.scheduler import Allocation, Node, Offer
from meshctl.scheduler.snapshot import NodeHealth


class SimNode:
    __slots__ = (
        "base",
        "cloud",
        "counted",
        "cpus",
        "datasets",
        "gpu_free",
        "health",
        "idle_since",
        "index",
        "jobs",
        "memory",
        "nic",
        "snap",
    )

    def __init__(self, base: Node, cloud: Instance | None = None) -> None:
        self.base, self.cloud = base, cloud
        self.gpu_free = list(base.gpu_free)
        self.cpus, self.memory, self.nic = base.cpus_free, base.memory_gib_free, base.nic_gbps_free
        self.health: NodeHealth = base.health
        self.jobs: set[str] = set()
        self.snap: Node | None = base
        self.counted: Node | None = None  # the view Capacity holds for it
        self.index = -1
        self.idle_since = 0.0  # a cloud node: when it last held a job, or was launched
        self.datasets: frozenset[str] = base.datasets  # in its cache, whole or on their way

    @property
    def name(self) -> str:
        return self.base.name

    def view(self) -> Node:
        if self.snap is None:
            self.snap = replace(
                self.base,
                gpu_free=tuple(self.gpu_free),
                cpus_free=self.cpus,
                memory_gib_free=self.memory,
                nic_gbps_free=self.nic,
                health=self.health,
                datasets=self.datasets,
            )
        return self.snap

    def take(self, alloc: Allocation, sign: float) -> None:
        for i in alloc.gpu_indices:
            self.gpu_free[i] = min(1.0, max(0.0, self.gpu_free[i] - sign * alloc.gpu_share))
        self.cpus -= sign * alloc.cpus
        self.memory -= sign * alloc.memory_gib
        self.nic -= sign * alloc.nic_gbps
        self.snap = None


@dataclass(slots=True)
class Instance:
    id: str
    pool: str
    offer: Offer | None  # None: the pool's own head (no GPUs, no work)
    spot: bool
    usd_per_hour: float
    launched_s: float
    for_job: str
    team: str
    node: SimNode | None = None
    gone: bool = False

    def charge(self, end_s: float | None = None) -> Charge:
        return Charge(self.pool, self.team, self.usd_per_hour, self.launched_s, end_s)
