"""The simulator's inputs and outputs: the mesh and settings a run takes, and what it reports.

``SimMesh``: the on-prem nodes, the pools, the cloud offers and how each cloud pool behaves,
the fabric, and the pools as the policies see them from the mesh file. ``SimConfig``: the
seed, how often cycles run (``tick_s``: as the controller's loop does), failures injected or
drawn, checkpoints, the calendar, the scheduler's settings. ``Result``: every job's
outcome, the samples for the charts, the totals, and (``record``) every lifecycle action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from meshctl.lifecycle.actions import Action
from meshctl.policy.facts import MeshSnapshot
from meshctl.scheduler import Node, Offer, PoolInfo, SchedulerConfig
from meshctl.sim.core.data import DataModel, DataStats
from meshctl.sim.core.failures import Checkpoints, FailureModel
from meshctl.sim.core.fleet import CloudPool
from meshctl.sim.core.jobs import JobResult
from meshctl.sim.core.network import Network


@dataclass(frozen=True, slots=True)
class SimMesh:
    nodes: tuple[Node, ...]  # on-prem nodes, empty
    pools: tuple[PoolInfo, ...]
    offers: tuple[Offer, ...] = ()
    clouds: Mapping[str, CloudPool] = field(default_factory=dict)
    networks: Mapping[str, Network] = field(default_factory=dict)
    configured: MeshSnapshot | None = None  # the pools as policies see them, from the file
    # pools where a train job's dead node is replaced inside its attempt: drivers kept apart,
    # checkpoint storage (``lifecycle.replacing.replaceable_pool``)
    replacing: frozenset[str] = frozenset()
    grow_grace_s: Mapping[str, float] = field(default_factory=dict)  # per pool (mesh.yaml)

    @property
    def gang_domain(self) -> str:
        """The fabric's domain a gang prefers to keep to: the first network's, else a switch."""
        return next(iter(self.networks.values())).domain_label if self.networks else "switch"


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int = 0
    cycle_s: float = 0.0  # 0: a cycle at every instant something changed; else at most this often
    recheck_s: float = 300.0  # a cycle at least this often while jobs wait
    serve_every_s: float = 10.0  # and this often while services run (their traffic is read)
    tick_s: float | None = None  # a cycle at every multiple of this, as the controller's loop
    failures: FailureModel | None = None
    injected_failures: tuple[tuple[float, str, float], ...] = ()  # (time, node, repair s)
    injected_notices: tuple[tuple[float, str, int], ...] = ()  # (time, pool, n-th launched)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    sample_s: float = 3600.0
    start_epoch_s: float = 1_767_225_600.0  # 2026-01-01: what the policies see as the date
    cpus_per_gpu: float = 4.0
    memory_gib_per_gpu: float = 32.0
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    window_s: float | None = None  # on-prem utilisation is measured over [0, window]
    # stop here even if jobs remain: what waits or runs then is unfinished (``sim run``: the
    # window's end); None: a year after the last arrival
    until_s: float | None = None
    record: bool = False  # keep every action the lifecycle decided (``Result.actions``)
    data: DataModel | None = None  # datasets through the nodes' caches (jobs with ``data``)


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float
    onprem_busy_gpus: float
    onprem_up_gpus: int
    cloud_gpus: int
    queued: int
    running: int
    spend_usd: float


@dataclass(slots=True)
class Totals:
    events: int = 0
    cycles: int = 0
    node_failures: int = 0
    spot_reclaims: int = 0
    preemptions: int = 0
    resizes: int = 0  # elastic jobs resized: lending nodes, or growing back
    launches: int = 0
    backfill_starts: int = 0
    budget_crossings: int = 0
    onprem_gpu_s: float = 0.0  # installed on-prem capacity over the run
    onprem_down_gpu_s: float = 0.0  # of which nodes were down for repair
    onprem_busy_gpu_s: float = 0.0
    cloud_gpu_s: float = 0.0
    spend_usd: dict[str, float] = field(default_factory=dict)


@dataclass
class Result:
    end_s: float
    jobs: list[JobResult]
    samples: list[Sample]
    totals: Totals
    onprem_gpus: int
    actions: list[tuple[float, Action]] = field(default_factory=list)  # with ``record``
    data: DataStats | None = None  # with a data model
