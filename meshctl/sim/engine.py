"""The simulator's engine: a virtual clock over an event heap, driving the scheduler core.

Each scheduling cycle builds a ``Snapshot`` and calls ``meshctl.scheduler.schedule`` with the
policies bound by ``meshctl.policy`` exactly as the controller does, then applies the plan
(place, preempt with grace, provision cloud nodes, evict). Between cycles the engine moves
time forward event by event: arrivals, completions, node failures and repairs, cloud nodes
joining, spot notices and reclaims, idle teardowns, samples for the charts.

Why a hand-written loop and not SimPy: an event here is a tuple on a ``heapq`` (time, kind,
sequence, ...), dispatched by one ``if`` chain; SimPy wraps every event in objects, callbacks
and generator resumptions. ``benchmarks/sim_speed.py`` runs the same events through both and
prints the ratio. Ties at one instant are broken by kind (completions and failures before
arrivals, the cycle last, so it sees everything that happened at that instant), then by the
order events were made. The clock is virtual (``now``); randomness comes from streams seeded
by ``(seed, purpose)``, so a failure schedule does not change with the policy under test.
Pure: no I/O, no wall clock.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import BoundPolicies, bind
from meshctl.policy.facts import MeshSnapshot, VictimFacts, observed
from meshctl.scheduler import (
    Allocation,
    Evict,
    FromPolicyEngine,
    Node,
    Offer,
    Pending,
    Permissive,
    Place,
    Plan,
    PolicyView,
    PoolInfo,
    Preempt,
    Provision,
    Request,
    Running,
    SchedulerConfig,
    Snapshot,
    schedule,
)
from meshctl.sim.failures import Checkpoints, FailureModel, Segment
from meshctl.sim.network import Network, slowdown
from meshctl.sim.workload import SimJob

# Event kinds, in the order they run at one instant: an idle check after the cycle, so that a
# node the cycle could use at that instant is not torn down first.
FINISH, STOP, FAIL, RECLAIM, REPAIR, UP, NOTICE, ARRIVE, SAMPLE, CYCLE, IDLE = range(11)
EPS = 1e-9


@dataclass(frozen=True, slots=True)
class CloudPool:
    """How a cloud pool behaves in the simulation (its shapes and prices are its offers)."""

    name: str
    provision_s: float = 120.0  # launch -> the node has joined the pool
    spot_lifetime_s: float | None = 24 * 3600.0  # mean life of a spot node; None: never taken
    notice_s: float = 120.0  # warning before a spot node is taken back
    idle_s: float = 600.0  # an idle node is torn down after this long
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SimMesh:
    nodes: tuple[Node, ...]  # on-prem nodes, empty
    pools: tuple[PoolInfo, ...]
    offers: tuple[Offer, ...] = ()
    clouds: Mapping[str, CloudPool] = field(default_factory=dict)
    networks: Mapping[str, Network] = field(default_factory=dict)
    configured: MeshSnapshot | None = None  # the pools as policies see them, from the file


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int = 0
    cycle_s: float = 0.0  # 0: a cycle at every instant something changed; else at most this often
    recheck_s: float = 300.0  # a cycle at least this often while jobs wait
    failures: FailureModel | None = None
    injected_failures: tuple[tuple[float, str, float], ...] = ()  # (time, node, repair s)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    sample_s: float = 3600.0
    start_epoch_s: float = 1_767_225_600.0  # 2026-01-01: what the policies see as the date
    cpus_per_gpu: float = 4.0
    memory_gib_per_gpu: float = 32.0
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    window_s: float | None = None  # on-prem utilisation is measured over [0, window]
    until_s: float | None = None  # stop here even if jobs remain (default: a year after the last)


@dataclass(slots=True)
class JobResult:
    job: SimJob
    priority: int = 0
    first_start_s: float | None = None
    end_s: float | None = None
    rejected: str | None = None
    pools: set[str] = field(default_factory=set)
    attempts: int = 0
    preempted: int = 0
    failed: int = 0  # attempts ended by a node failure or a spot reclaim
    held_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    checkpoint_gpu_s: float = 0.0
    restart_gpu_s: float = 0.0
    slowdown_gpu_s: float = 0.0
    progress_s: float = 0.0  # work done and saved, in seconds at full speed


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
    launches: int = 0
    onprem_gpu_s: float = 0.0  # installed on-prem capacity over the run
    onprem_down_gpu_s: float = 0.0  # of which nodes were down for repair
    onprem_busy_gpu_s: float = 0.0
    cloud_gpu_s: float = 0.0
    spend_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))


@dataclass
class Result:
    end_s: float
    jobs: list[JobResult]
    samples: list[Sample]
    totals: Totals
    onprem_gpus: int


# --- mutable state --------------------------------------------------------------------------


class _Node:
    __slots__ = (
        "base",
        "cloud",
        "cpus",
        "gpu_free",
        "health",
        "idle_since",
        "index",
        "jobs",
        "memory",
        "nic",
        "snap",
    )

    def __init__(self, base: Node, cloud: _Instance | None = None) -> None:
        self.base, self.cloud = base, cloud
        self.gpu_free = list(base.gpu_free)
        self.cpus, self.memory, self.nic = base.cpus_free, base.memory_gib_free, base.nic_gbps_free
        self.health = base.health
        self.jobs: set[str] = set()
        self.snap: Node | None = base
        self.index = -1
        self.idle_since = 0.0

    def view(self) -> Node:
        if self.snap is None:
            self.snap = replace(
                self.base,
                gpu_free=tuple(self.gpu_free),
                cpus_free=self.cpus,
                memory_gib_free=self.memory,
                nic_gbps_free=self.nic,
                health=self.health,
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
class _Instance:
    id: str
    pool: str
    offer: Offer
    spot: bool
    usd_per_hour: float
    launched_s: float
    for_job: str
    node: _Node | None = None
    gone: bool = False


@dataclass(slots=True)
class _Attempt:
    job_id: str
    token: int
    pool: str
    allocations: tuple[Allocation, ...]
    started_s: float
    speed: float  # slowdown: wall seconds per work second
    segment: Segment
    running: Running
    leaving: bool = False


class _Victims(Mapping[str, VictimFacts]):
    """Victim facts built only for the running jobs a preemption rule asks about."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __getitem__(self, job_id: str) -> VictimFacts:
        e = self.engine
        attempt = e.running[job_id]
        runtime, seg = e.now - attempt.started_s, attempt.segment
        _, done = seg.saved_at(runtime)
        last = seg.restart_s + done * (seg.interval_s + seg.cost_s) if done else 0.0
        since = runtime - last
        return VictimFacts(
            e.models[job_id], e.results[job_id].priority, attempt.pool, runtime, since
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.engine.running)

    def __len__(self) -> int:
        return len(self.engine.running)


class _Models(Mapping[str, Job]):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __getitem__(self, job_id: str) -> Job:
        return self.engine.models[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.engine.models)

    def __len__(self) -> int:
        return len(self.engine.models)


# --- the engine -----------------------------------------------------------------------------


class Engine:
    def __init__(
        self,
        mesh: SimMesh,
        jobs: Sequence[SimJob],
        config: SimConfig = SimConfig(),
        policies: PolicySet | None = None,
    ) -> None:
        self.mesh, self.config, self.policies = mesh, config, policies
        self.jobs = sorted(jobs, key=lambda j: (j.arrival_s, j.id))
        twice = sorted(i for i, n in Counter(j.id for j in self.jobs).items() if n > 1)
        if twice:
            raise ValueError(f"job ids must be unique: {', '.join(twice[:3])}")
        self.now = 0.0
        self.heap: list[tuple[float, int, int, Any, Any]] = []
        self.seq = 0
        self.nodes: dict[str, _Node] = {}
        self.dirty_nodes: set[_Node] = set()
        self.pending: dict[str, Pending] = {}
        self.running: dict[str, _Attempt] = {}
        self.results: dict[str, JobResult] = {}
        self.models: dict[str, Job] = {}
        self.requests: dict[str, Request] = {}
        self.nominated: dict[str, tuple[str, ...]] = {}
        self.instances: dict[str, _Instance] = {}
        self.live_instances: dict[str, _Instance] = {}
        # spend billed so far per (year, month), by pool and by team: what budgets read
        self.month_pool: dict[tuple[int, int, str], float] = defaultdict(float)
        self.month_team: dict[tuple[int, int, str], float] = defaultdict(float)
        self.launching: dict[str, int] = defaultdict(int)  # job -> its instances not yet up
        self.live: dict[str, int] = defaultdict(int)  # cloud pool -> instances not gone
        self.live_type: dict[tuple[str, str], int] = defaultdict(int)
        self.wait_s = 0.0  # the longest wait in the queue, as of the cycle
        self.tokens = 0
        self.next_cycle: float | None = None
        self.last_cycle = -math.inf
        self.done = 0
        self.totals = Totals()
        self.samples: list[Sample] = []
        self.busy: dict[str, float] = defaultdict(float)  # pool -> GPUs held
        self.up_gpus: dict[str, int] = defaultdict(int)  # pool -> GPUs on live nodes
        self.cloud_pools = {p.name for p in mesh.pools if p.cloud}
        self.onprem_gpus = sum(n.gpus for n in mesh.nodes)
        self.rng_spot = random.Random(f"{config.seed}:spot")
        self.fail_rngs: dict[str, random.Random] = {}
        self.fail_chain: dict[str, int] = {}  # node -> its current failure-model event
        self.bound_base: BoundPolicies | None = None
        self._classes: dict[tuple[Any, ...], tuple[Job, Request, int]] = {}
        self.mtbf_s = config.failures.node_mtbf_s if config.failures else None
        for node in mesh.nodes:
            self._add_node(_Node(node))
        self._reindex()

    # --- set-up ------------------------------------------------------------------------------

    def _add_node(self, node: _Node) -> None:
        self.nodes[node.base.name] = node
        self.up_gpus[node.base.pool] += node.base.gpus

    def _reindex(self) -> None:
        order = list(self.nodes.values())
        for i, node in enumerate(order):
            node.index = i
        self.node_views = [n.view() for n in order]
        self.dirty_nodes.clear()

    def _class_of(self, job: SimJob) -> tuple[Job, Request, int]:
        """The job file a trace job stands for; one per (kind, criticality, team, shape)."""
        key = (job.kind, job.criticality, job.team, job.gpus, job.nodes)
        found = self._classes.get(key)
        if found is None:
            found = self._classes[key] = self._make_class(job)
        return found

    def _make_class(self, job: SimJob) -> tuple[Job, Request, int]:
        c = self.config
        gpus = job.gpus if job.gpus < 1 else int(job.gpus)
        resources: dict[str, Any] = {
            "gpus": gpus,
            "cpus": max(0.5, c.cpus_per_gpu * job.gpus),
            "memory_gib": max(1.0, c.memory_gib_per_gpu * job.gpus),
            "nodes": job.nodes,
        }
        if job.nodes > 1:
            resources["topology"] = {"domain": self._gang_domain(), "mode": "preferred"}
        model = Job.model_validate(
            {
                "apiVersion": "meshctl/v1",
                "kind": "Job",
                "metadata": {"name": f"{job.kind}-{job.criticality}-{job.team}"},
                "spec": {
                    "kind": job.kind,
                    "entrypoint": "trace",
                    "criticality": job.criticality,
                    "team": job.team,
                    "resources": resources,
                    "reserve": "workers" if job.nodes > 1 else None,
                },
            }
        )
        priority = 0
        if self.policies is not None:
            _, priority, _ = self._bound_at_start().priority_of(model)
        return model, Request.of(model), priority

    def _gang_domain(self) -> str:
        networks = list(self.mesh.networks.values())
        return networks[0].domain_label if networks else "switch"

    def _bound_at_start(self) -> BoundPolicies:
        if self.bound_base is None:
            assert self.policies is not None
            configured = self.mesh.configured or MeshSnapshot(())
            self.bound_base = bind(self.policies, configured, self._date())
        return self.bound_base

    def _date(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.config.start_epoch_s + self.now, dt.UTC)

    # --- the loop ----------------------------------------------------------------------------

    def push(self, t: float, kind: int, a: Any = None, b: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, a, b))

    def run(self, progress: Callable[[float], None] | None = None, every: int = 20_000) -> Result:
        """Run until every job has ended; ``progress(t)`` is called every ``every`` events."""
        if self.jobs:
            self.push(self.jobs[0].arrival_s, ARRIVE, 0)
        self._failures_start()
        self.push(0.0, SAMPLE)
        handlers: dict[int, Callable[[Any, Any], None]] = {
            FINISH: self._finish,
            STOP: self._stop_event,
            FAIL: self._fail,
            RECLAIM: self._reclaim,
            REPAIR: self._repair,
            UP: self._up,
            NOTICE: self._notice,
            IDLE: self._idle,
            ARRIVE: self._arrive,
            SAMPLE: self._sample,
            CYCLE: self._cycle_event,
        }
        heap, totals = self.heap, self.totals
        last_arrival = self.jobs[-1].arrival_s if self.jobs else 0.0
        until = self.config.until_s
        if until is None:
            until = last_arrival + 365 * 86_400.0
        while heap and self.done < len(self.jobs):
            t, kind, _, a, b = heapq.heappop(heap)
            if t > until:
                break  # what still waits then is reported as unfinished
            if t > self.now:
                self._advance(t)
            handlers[kind](a, b)
            totals.events += 1
            if progress is not None and totals.events % every == 0:
                progress(self.now)
        end_s = self.now
        self._sample(None, None, again=False)
        for instance in list(self.live_instances.values()):  # billed until they would go
            node, until_s = instance.node, end_s
            if node is not None and not node.jobs:
                until_s = max(until_s, node.idle_since + self._idle_after(node))
            self._bill(instance, until_s)
        window = self.config.window_s
        if window is not None and window > end_s:
            self._onprem(window - end_s)  # the window's idle end counts for utilisation
        return Result(end_s, list(self.results.values()), self.samples, totals, self.onprem_gpus)

    def _advance(self, t: float) -> None:
        """Integrate capacity over (now, t], then move the clock. On-prem utilisation counts
        only the window (the trace's span): the drain after it would dilute it."""
        dt_s = t - self.now
        if dt_s > 0:
            self.totals.cloud_gpu_s += (
                sum(g for pool, g in self.up_gpus.items() if pool in self.cloud_pools) * dt_s
            )
            window = self.config.window_s
            span = dt_s if window is None else max(0.0, min(t, window) - min(self.now, window))
            self._onprem(span)
        self.now = t

    def _onprem(self, span: float) -> None:
        if span > 0:
            busy = sum(b for pool, b in self.busy.items() if pool not in self.cloud_pools)
            up = sum(g for pool, g in self.up_gpus.items() if pool not in self.cloud_pools)
            self.totals.onprem_busy_gpu_s += busy * span
            self.totals.onprem_gpu_s += self.onprem_gpus * span
            self.totals.onprem_down_gpu_s += (self.onprem_gpus - up) * span

    def _want_cycle(self) -> None:
        t = (
            self.now
            if self.config.cycle_s <= 0
            else max(self.now, self.last_cycle + self.config.cycle_s)
        )
        if self.next_cycle is not None and self.next_cycle <= t:
            return
        self.next_cycle = t
        self.push(t, CYCLE, t)

    # --- events --------------------------------------------------------------------------------

    def _arrive(self, index: int, _: Any) -> None:
        job = self.jobs[index]
        if index + 1 < len(self.jobs):
            self.push(self.jobs[index + 1].arrival_s, ARRIVE, index + 1)
        model, request, priority = self._class_of(job)
        self.models[job.id] = model
        self.requests[job.id] = request
        self.results[job.id] = JobResult(job, priority)
        self.pending[job.id] = Pending(job.id, job.team, priority, request, job.arrival_s)
        self._want_cycle()

    def _cycle_event(self, t: float, _: Any) -> None:
        if t != self.next_cycle:
            return  # superseded by an earlier cycle
        self.next_cycle = None
        if not self.pending:
            return
        self.last_cycle = self.now
        self.totals.cycles += 1
        snapshot = self._snapshot()
        self._apply(schedule(snapshot, self._view(), self.config.scheduler))
        if self.pending:  # waiting work is looked at again even if nothing happens
            t_next = self.now + max(self.config.recheck_s, self.config.cycle_s)
            if self.next_cycle is None or self.next_cycle > t_next:
                self.next_cycle = t_next
                self.push(t_next, CYCLE, t_next)

    def _finish(self, job_id: str, token: int) -> None:
        attempt = self.running.get(job_id)
        if attempt is None or attempt.token != token:
            return
        result = self.results[job_id]
        seg = attempt.segment
        work = seg.compute_s / attempt.speed
        self._account(result, seg.wall_s, work, seg.checkpoints, seg.restart_s, attempt.speed)
        result.progress_s += work
        result.end_s = self.now
        self._release(attempt)
        self.done += 1
        if self.pending:
            self._want_cycle()

    def _stop_event(self, job_id: str, why: tuple[int, str]) -> None:
        """The end of a preemption's grace, or of a spot notice (just before the reclaim)."""
        token, reason = why
        attempt = self.running.get(job_id)
        if attempt is None or attempt.token != token:
            return
        self._interrupt(attempt, graceful=True)
        if reason == "preempted":
            self.results[job_id].preempted += 1
        else:
            self.results[job_id].failed += 1

    def _fail(self, name: str, what: tuple[float, int | None]) -> None:
        """A node fails: its jobs lose what they did since their last checkpoint and wait
        again. The node stays in the snapshot, cordoned (it will come back, so a job that
        only it could hold still waits rather than being rejected) until its repair."""
        repair_s, chain = what
        if chain is not None and chain != self.fail_chain.get(name):
            return  # the model's next failure, superseded by an injected one and its repair
        node = self.nodes.get(name)
        if node is None or node.health == "cordoned" or node.cloud is not None:
            return
        self.totals.node_failures += 1
        for job_id in sorted(node.jobs):
            self._interrupt(self.running[job_id], graceful=False)
            self.results[job_id].failed += 1
        node.health, node.snap = "cordoned", None
        self.dirty_nodes.add(node)
        self.up_gpus[node.base.pool] -= node.base.gpus
        self.push(self.now + repair_s, REPAIR, node, None)

    def _repair(self, node: _Node, _: Any) -> None:
        node.health, node.snap = "ready", None
        self.dirty_nodes.add(node)
        self.up_gpus[node.base.pool] += node.base.gpus
        self._next_failure(node.base.name)
        if self.pending:
            self._want_cycle()

    def _remove_node(self, node: _Node) -> None:
        del self.nodes[node.base.name]
        self.up_gpus[node.base.pool] -= node.base.gpus
        self._reindex()

    # --- failures ----------------------------------------------------------------------------

    def _failures_start(self) -> None:
        for t, name, repair in self.config.injected_failures:
            self.push(t, FAIL, name, (repair, None))
        if self.config.failures is None:
            return
        for node in self.mesh.nodes:
            self._next_failure(node.name)

    def _next_failure(self, name: str) -> None:
        model = self.config.failures
        if model is None:
            return
        rng = self.fail_rngs.get(name)
        if rng is None:
            rng = self.fail_rngs[name] = random.Random(f"{self.config.seed}:fail:{name}")
        gap = rng.expovariate(1.0 / model.node_mtbf_s)
        chain = self.fail_chain[name] = self.fail_chain.get(name, 0) + 1
        self.push(self.now + gap, FAIL, name, (model.repair_s(rng), chain))

    # --- jobs starting and stopping ------------------------------------------------------------

    def _start(self, place: Place) -> None:
        job_id = place.job_id
        result = self.results[job_id]
        job = result.job
        del self.pending[job_id]
        self.nominated.pop(job_id, None)
        labels = []
        for alloc in place.allocations:
            node = self.nodes[alloc.node]
            node.take(alloc, 1.0)
            node.jobs.add(job_id)
            self.dirty_nodes.add(node)
            labels.append(node.base.labels)
        speed = slowdown(self.mesh.networks.get(place.pool), labels)
        c = self.config.checkpoints
        restart = c.restart_s if result.attempts > 0 else 0.0
        interval = c.interval_for(job.nodes, self.mtbf_s)
        remaining = max(0.0, job.duration_s - result.progress_s)
        seg = Segment(restart, remaining * speed, interval, c.cost_s)
        self.tokens += 1
        running = Running(
            job_id,
            job.team,
            result.priority,
            place.pool,
            place.allocations,
            self.requests[job_id],
            self.now,
        )
        self.running[job_id] = _Attempt(
            job_id, self.tokens, place.pool, place.allocations, self.now, speed, seg, running
        )
        self.busy[place.pool] += job.total_gpus
        result.attempts += 1
        result.pools.add(place.pool)
        if result.first_start_s is None:
            result.first_start_s = self.now
        self.push(self.now + seg.wall_s, FINISH, job_id, self.tokens)

    def _interrupt(self, attempt: _Attempt, graceful: bool) -> None:
        """End an attempt early; the job keeps what its last checkpoint saved and waits again.
        ``graceful``: it was told in time (preemption grace, spot notice) and checkpoints as it
        stops, if the time it had covers a checkpoint's cost."""
        result = self.results[attempt.job_id]
        seg, elapsed = attempt.segment, self.now - attempt.started_s
        cost = seg.cost_s
        if graceful and elapsed - seg.restart_s >= cost:
            computed, rounds = seg.computed_at(elapsed - cost)
            saved, checkpoints = computed, rounds + 1
        else:
            saved, checkpoints = seg.saved_at(elapsed)
        work = saved / attempt.speed
        self._account(
            result, elapsed, work, checkpoints, min(elapsed, seg.restart_s), attempt.speed
        )
        result.progress_s += work
        self._release(attempt)
        job = result.job
        self.pending[job.id] = Pending(
            job.id, job.team, result.priority, self.requests[job.id], job.arrival_s
        )
        self._want_cycle()

    def _account(
        self,
        result: JobResult,
        wall_s: float,
        work_s: float,
        checkpoints: int,
        restart_s: float,
        speed: float,
    ) -> None:
        g = result.job.total_gpus
        held = wall_s * g
        useful = work_s * g
        slow = work_s * (speed - 1.0) * g
        ckpt = min(checkpoints * self.config.checkpoints.cost_s, wall_s) * g
        restart = restart_s * g
        result.held_gpu_s += held
        result.useful_gpu_s += useful
        result.slowdown_gpu_s += slow
        result.checkpoint_gpu_s += ckpt
        result.restart_gpu_s += restart
        result.lost_gpu_s += max(0.0, held - useful - slow - ckpt - restart)

    def _release(self, attempt: _Attempt) -> None:
        del self.running[attempt.job_id]
        for alloc in attempt.allocations:
            node = self.nodes.get(alloc.node)
            if node is None:
                continue  # failed or gone: nothing to give back
            node.take(alloc, -1.0)
            node.jobs.discard(attempt.job_id)
            self.dirty_nodes.add(node)
            if node.cloud is not None and not node.jobs:
                node.idle_since = self.now
                self.push(self.now + self._idle_after(node), IDLE, node, self.now)
        self.busy[attempt.pool] -= self.results[attempt.job_id].job.total_gpus

    # --- cloud nodes ---------------------------------------------------------------------------

    def _launch(self, action: Provision) -> None:
        offer = next(
            o for o in self.mesh.offers if o.pool == action.pool and o.node_type == action.node_type
        )
        cloud = self.mesh.clouds[action.pool]
        for _ in range(action.count):
            n = len(self.instances)
            instance = _Instance(
                f"{action.pool}-{n:05d}",
                action.pool,
                offer,
                action.spot,
                action.usd_per_hour / action.count,
                self.now,
                action.job_id,
            )
            self.instances[instance.id] = instance
            self.live_instances[instance.id] = instance
            self.live[action.pool] += 1
            self.live_type[(action.pool, action.node_type)] += 1
            self.launching[action.job_id] += 1
            self.totals.launches += 1
            self.push(self.now + cloud.provision_s, UP, instance, None)
        pending = self.pending.get(action.job_id)
        if pending is not None:
            self.pending[action.job_id] = replace(pending, provisioning=True)

    def _up(self, instance: _Instance, _: Any) -> None:
        o, cloud = instance.offer, self.mesh.clouds[instance.pool]
        base = Node(
            name=instance.id,
            pool=instance.pool,
            gpu_free=(1.0,) * o.gpus,
            gpu_memory_gib=o.gpu_memory_gib,
            accelerator=o.accelerator,
            vendor=o.vendor,
            cpus=o.cpus,
            cpus_free=o.cpus,
            memory_gib=o.memory_gib,
            memory_gib_free=o.memory_gib,
            nic_gbps=o.nic_gbps,
            nic_gbps_free=o.nic_gbps,
            labels=dict(cloud.labels),
            usd_per_gpu_hour=instance.usd_per_hour / max(o.gpus, 1),
        )
        node = instance.node = _Node(base, instance)
        node.idle_since = self.now
        self._add_node(node)
        self._reindex()
        self.push(self.now + self._idle_after(node), IDLE, node, self.now)
        self.launching[instance.for_job] -= 1
        pending = self.pending.get(instance.for_job)
        if pending is not None and self.launching[instance.for_job] <= 0:
            self.pending[instance.for_job] = replace(pending, provisioning=False)
        if instance.spot and cloud.spot_lifetime_s:
            life = self.rng_spot.expovariate(1.0 / cloud.spot_lifetime_s)
            self.push(self.now + max(0.0, life - cloud.notice_s), NOTICE, instance, None)
            self.push(self.now + life, RECLAIM, instance, None)
        if self.pending:
            self._want_cycle()

    def _idle_after(self, node: _Node) -> float:
        """An idle node goes after its pool's idle time, but never before a scheduling cycle
        has seen it idle (the controller, too, judges idleness at its cycles)."""
        return max(self.mesh.clouds[node.base.pool].idle_s, self.config.cycle_s)

    def _notice(self, instance: _Instance, _: Any) -> None:
        node = instance.node
        if instance.gone or node is None:
            return
        node.health, node.snap = "cordoned", None
        self.dirty_nodes.add(node)
        stop_at = self.now + max(0.0, self.mesh.clouds[instance.pool].notice_s - 15.0)
        for job_id in sorted(node.jobs):
            attempt = self.running[job_id]
            if not attempt.leaving:
                attempt.leaving = True
                attempt.running = replace(attempt.running, leaving=True)
                self.push(stop_at, STOP, job_id, (attempt.token, "reclaimed"))

    def _reclaim(self, instance: _Instance, _: Any) -> None:
        if instance.gone:
            return
        node = instance.node
        self.totals.spot_reclaims += 1
        if node is not None:
            for job_id in sorted(node.jobs):
                self._interrupt(self.running[job_id], graceful=False)
                self.results[job_id].failed += 1
        self._terminate(instance)

    def _idle(self, node: _Node, since: float) -> None:
        instance = node.cloud
        if instance is None or instance.gone or node.jobs or node.idle_since != since:
            return
        self._terminate(instance)

    def _terminate(self, instance: _Instance) -> None:
        instance.gone = True
        self.live_instances.pop(instance.id, None)
        self.live[instance.pool] -= 1
        self.live_type[(instance.pool, instance.offer.node_type)] -= 1
        self._bill(instance, self.now)
        node = instance.node
        if node is not None and node.base.name in self.nodes:
            self._remove_node(node)

    def _bill(self, instance: _Instance, end_s: float) -> None:
        hours = max(0.0, end_s - instance.launched_s) / 3600.0
        self.totals.spend_usd[instance.pool] += hours * instance.usd_per_hour
        start = max(instance.launched_s, self._month_start_s(end_s))
        usd = max(0.0, end_s - start) / 3600.0 * instance.usd_per_hour
        month = self._month(end_s)
        self.month_pool[(*month, instance.pool)] += usd
        self.month_team[(*month, self.results[instance.for_job].job.team)] += usd

    def _month(self, t_s: float) -> tuple[int, int]:
        moment = dt.datetime.fromtimestamp(self.config.start_epoch_s + t_s, dt.UTC)
        return moment.year, moment.month

    def _month_start_s(self, t_s: float) -> float:
        year, month = self._month(t_s)
        first = dt.datetime(year, month, 1, tzinfo=dt.UTC).timestamp()
        return first - self.config.start_epoch_s

    def _spend_this_month(self) -> tuple[dict[str, float], dict[str, float]]:
        """(by pool, by team): billed this calendar month, plus what live instances have
        cost since it began. The controller's ledger gives budgets the same."""
        year, month = self._month(self.now)
        pools = {p: usd for (y, m, p), usd in self.month_pool.items() if (y, m) == (year, month)}
        teams = {t: usd for (y, m, t), usd in self.month_team.items() if (y, m) == (year, month)}
        start_s = self._month_start_s(self.now)
        for instance in self.live_instances.values():
            usd = (self.now - max(instance.launched_s, start_s)) / 3600.0 * instance.usd_per_hour
            pools[instance.pool] = pools.get(instance.pool, 0.0) + usd
            team = self.results[instance.for_job].job.team
            teams[team] = teams.get(team, 0.0) + usd
        return pools, teams

    # --- a scheduling cycle --------------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        for node in self.dirty_nodes:
            if node.index >= 0 and node.base.name in self.nodes:
                self.node_views[node.index] = node.view()
        self.dirty_nodes.clear()
        wait = self.wait_s = max(
            (self.now - p.submitted_at_s for p in self.pending.values()), default=0.0
        )
        live, of_type = self.live, self.live_type
        pools = tuple(
            replace(
                p,
                expected_wait_s=wait if self.up_gpus.get(p.name) else 0.0,
                max_new_nodes=None if p.max_new_nodes is None else p.max_new_nodes - live[p.name],
            )
            for p in self.mesh.pools
        )
        offers = tuple(
            replace(
                o,
                max_nodes=max(0, o.max_nodes - of_type[(o.pool, o.node_type)]),
                max_nodes_configured=o.max_nodes,
            )
            for o in self.mesh.offers
        )
        pending = tuple(
            replace(p, nominated=self.nominated[p.job_id]) if p.job_id in self.nominated else p
            for p in self.pending.values()
        )
        running = tuple(a.running for a in self.running.values())
        return Snapshot(self.now, tuple(self.node_views), pools, running, pending, offers)

    def _view(self) -> PolicyView:
        if self.policies is None:
            return Permissive()
        configured = self.mesh.configured or MeshSnapshot(())
        free: dict[str, float] = defaultdict(float)
        for pool, gpus in self.up_gpus.items():
            free[pool] = gpus - self.busy.get(pool, 0.0)
        wait = self.wait_s
        waits = {pool: wait for pool, gpus in self.up_gpus.items() if gpus}
        spend, team_spend = self._spend_this_month()
        facts = observed(
            configured,
            free,
            {pool: gpus for pool, gpus in self.up_gpus.items() if gpus},
            len(self.pending),
            waits,
            spend,
            team_spend,
        )
        bound = bind(self.policies, facts, self._date())
        return FromPolicyEngine(bound, _Models(self), _Victims(self))

    def _apply(self, plan: Plan) -> None:
        for action in plan.actions:
            if isinstance(action, Place):
                self._start(action)
            elif isinstance(action, Preempt):
                self._preempt(action)
            elif isinstance(action, Provision):
                self._launch(action)
            elif isinstance(action, Evict):
                attempt = self.running.get(action.job_id)
                if attempt is not None:
                    self._interrupt(attempt, graceful=False)
        for job_id, decision in plan.decisions.items():
            if decision.status == "unschedulable" and job_id in self.pending:
                del self.pending[job_id]
                self.results[job_id].rejected = decision.reason or "unschedulable"
                self.done += 1

    def _preempt(self, action: Preempt) -> None:
        attempt = self.running.get(action.victim_job_id)
        if attempt is None or attempt.leaving:
            return
        self.totals.preemptions += 1
        attempt.leaving = True
        attempt.running = replace(attempt.running, leaving=True)
        nodes = tuple(a.node for a in attempt.allocations)
        self.nominated[action.for_job_id] = tuple(
            dict.fromkeys(self.nominated.get(action.for_job_id, ()) + nodes)
        )
        self.push(self.now + action.grace_s, STOP, attempt.job_id, (attempt.token, "preempted"))

    # --- samples -------------------------------------------------------------------------------

    def _sample(self, _: Any, __: Any, again: bool = True) -> None:
        onprem_busy = sum(b for p, b in self.busy.items() if p not in self.cloud_pools)
        onprem_up = sum(g for p, g in self.up_gpus.items() if p not in self.cloud_pools)
        cloud = sum(g for p, g in self.up_gpus.items() if p in self.cloud_pools)
        spend = sum(self.totals.spend_usd.values()) + sum(
            max(0.0, self.now - i.launched_s) / 3600.0 * i.usd_per_hour
            for i in self.live_instances.values()
        )
        self.samples.append(
            Sample(
                self.now, onprem_busy, onprem_up, cloud, len(self.pending), len(self.running), spend
            )
        )
        if again:
            self.push(self.now + self.config.sample_s, SAMPLE)


def simulate(
    mesh: SimMesh,
    jobs: Sequence[SimJob],
    config: SimConfig = SimConfig(),
    policies: PolicySet | None = None,
    progress: Callable[[float], None] | None = None,
) -> Result:
    return Engine(mesh, jobs, config, policies).run(progress)
