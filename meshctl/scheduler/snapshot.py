"""The scheduler's input: an immutable picture of the mesh at one moment.

Nodes carry free resources per physical GPU (``gpu_free[i]`` is the free share of GPU ``i``,
1.0 when nobody uses it) so that jobs asking for a fraction of a GPU pack onto shared GPUs.
Time is ``now_s`` (seconds); nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from meshctl.scheduler.request import Request

# "down": a node known to exist that is out (failed, under repair): it takes no work and holds
# none, counts for no capacity now, but a job that only it could hold waits rather than being
# rejected (it will come back).
NodeHealth = Literal["ready", "cordoned", "draining", "drained", "unhealthy", "down"]


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    pool: str
    gpu_free: tuple[float, ...]  # per physical GPU: the free share, 0.0 .. 1.0
    gpu_memory_gib: float = 0.0
    accelerator: str | None = None  # model, e.g. "H100"
    vendor: str | None = None
    cpus: float = 0.0
    cpus_free: float = 0.0
    memory_gib: float = 0.0
    memory_gib_free: float = 0.0
    nic_gbps: float = 0.0
    nic_gbps_free: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)
    health: NodeHealth = "ready"
    datasets: frozenset[str] = frozenset()  # data sets cached on the node
    usd_per_gpu_hour: float = 0.0
    gpus: int = field(init=False, compare=False)  # len(gpu_free), read for every candidate
    whole_free: int = field(init=False, compare=False)  # GPUs with nothing on them

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", len(self.gpu_free))
        object.__setattr__(self, "whole_free", sum(1 for f in self.gpu_free if f >= 1 - 1e-9))


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one job holds on one node."""

    node: str
    gpu_indices: tuple[int, ...]
    gpu_share: float  # per GPU held: 1.0, or the fraction of a shared GPU
    cpus: float
    memory_gib: float
    nic_gbps: float

    def gpus(self) -> float:
        """The GPUs it holds (a shared GPU counts its share), as ``Held.gpus``."""
        return len(self.gpu_indices) * self.gpu_share


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """Checkpoints a running job will finish at known times: the ``count`` of them, the first
    at ``first_s`` and one every ``every_s`` after it (the simulator's model of a job; the
    controller knows only the last one recorded)."""

    first_s: float
    every_s: float
    count: int

    def latest(self, now_s: float) -> float | None:
        """When the last of them finished by ``now_s``; None before the first."""
        if self.count <= 0 or now_s < self.first_s:
            return None
        done = min(self.count - 1, int((now_s - self.first_s) // self.every_s))
        return self.first_s + done * self.every_s


@dataclass(frozen=True, slots=True)
class Running:
    job_id: str
    team: str
    priority: int
    pool: str
    allocations: tuple[Allocation, ...]
    request: Request
    started_at_s: float
    last_checkpoint_at_s: float | None = None  # the latest checkpoint recorded
    # From its runtime: declared (max_runtime_s) or estimated (meshctl.lifecycle.estimates).
    expected_end_s: float | None = None
    leaving: bool = False  # already preempted or evicted, still stopping: never a victim again
    checkpoints: CheckpointPlan | None = None  # later checkpoints at known times, if any
    # An elastic job (one worker a node): it may lend its nodes, one at a time, to jobs of
    # higher priority down to this many (``Shrink``), instead of being preempted whole.
    elastic_min: int | None = None

    @property
    def gpus(self) -> float:
        return sum(a.gpus() for a in self.allocations)

    def checkpointed_at(self, now_s: float) -> float | None:
        """When its latest checkpoint finished, as of ``now_s``; None: none yet."""
        planned = self.checkpoints.latest(now_s) if self.checkpoints is not None else None
        if planned is None:
            return self.last_checkpoint_at_s
        return max(planned, self.last_checkpoint_at_s or planned)


@dataclass(frozen=True, slots=True)
class Pending:
    job_id: str
    team: str
    priority: int
    request: Request
    submitted_at_s: float
    max_runtime_s: float | None = None  # declared, or estimated: what backfill reckons with
    provisioning: bool = False  # a cloud launch for it is already under way
    nominated: tuple[str, ...] = ()  # nodes being freed for it by preemption
    # The growth of a running elastic job back towards its size: ``request.nodes`` more nodes
    # in pool ``grows_in``, none of those it ``holds`` already (``Grow``).
    grows_in: str | None = None
    holds: tuple[str, ...] = ()
    only_pool: str | None = None  # a service's replica: where its other replicas run
    onprem_only: bool = False  # a service's replica: never on a cloud pool (no burst)


@dataclass(frozen=True, slots=True)
class Offer:
    """A cloud node type a pool may launch: its shape and what it costs per hour."""

    pool: str
    node_type: str
    gpus: int
    gpu_memory_gib: float
    accelerator: str
    vendor: str
    cpus: float
    memory_gib: float
    nic_gbps: float
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None
    spot_allowed: bool
    max_nodes: int  # of this type, given the pool's caps and what already runs
    # of this type at most, however many run now (None: max_nodes): whether a job could ever
    # fit is judged by this, so one waiting for capacity others hold is not rejected
    max_nodes_configured: int | None = None


@dataclass(frozen=True, slots=True)
class PoolInfo:
    name: str
    cloud: bool
    expected_wait_s: float = 0.0
    budget_usd_per_hour: float | None = None  # what the pool's budget still allows per hour
    max_new_nodes: int | None = None  # a cloud pool: nodes it may still launch, all types
    # Why the pool cannot be used now ("no credentials", "not up"); None: available. Nothing
    # is placed, launched or preempted there; whether a job could ever fit still counts it.
    unavailable: str | None = None
    # By a data set's home (aws, gcp, onprem; see request.py): USD a GiB moved from there to
    # this pool's nodes costs, the home side's egress price; a home not listed: free (its own).
    egress_usd_per_gib: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    now_s: float
    nodes: tuple[Node, ...]
    pools: tuple[PoolInfo, ...] = ()
    running: tuple[Running, ...] = ()
    pending: tuple[Pending, ...] = ()
    offers: tuple[Offer, ...] = ()
    # Team usage that the running jobs above do not show (e.g. from a MeshState): GPUs and
    # GPU memory (GiB) per team, added to theirs.
    team_usage: Mapping[str, tuple[float, float]] = field(default_factory=dict)
