"""What a simulation run keeps as it goes, and the small moves every part of the engine makes:
recording an action, asking for a cycle, when a stop takes effect, a job waiting (with its
runtime estimate) and no longer waiting, time moving on.

``RunState`` is the one state object of a run. The engine's collaborators each hold it:
``Attempts`` (``attempts.py``: jobs starting, leaving, stopping, ending), ``WorldEvents``
(``world.py``: cloud instances, node failures, samples; it holds the attempts too) and
``Services`` (``services.py``: inference services' replicas); ``Engine`` (``engine.py``: the
loop and the cycle) holds all four.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Sequence

from meshctl.lifecycle import lending
from meshctl.lifecycle.actions import Action
from meshctl.lifecycle.estimates import Estimator
from meshctl.lifecycle.lending import Loan
from meshctl.lifecycle.snapshot import pending_of
from meshctl.lifecycle.waits import Backlog
from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import KeptAnswers
from meshctl.scheduler import Pending, Request
from meshctl.scheduler.layout import Layout
from meshctl.scheduler.usage import RunningUsage
from meshctl.sim.core.cluster import Cluster
from meshctl.sim.core.config import Sample, SimConfig, SimMesh, Totals
from meshctl.sim.core.data import NodeCaches
from meshctl.sim.core.events import At, Clock, Kind
from meshctl.sim.core.fleet import Fleet
from meshctl.sim.core.jobs import Attempt, JobResult
from meshctl.sim.core.workload import SimJob


class RunState:
    """What one run keeps as it goes (the one object the engine's collaborators share)."""

    def __init__(
        self,
        mesh: SimMesh,
        jobs: Sequence[SimJob],
        config: SimConfig | None = None,
        policies: PolicySet | None = None,
    ) -> None:
        config = config or SimConfig()
        self.mesh, self.config, self.policies = mesh, config, policies
        self.jobs = sorted(jobs, key=lambda j: (j.arrival_s, j.id))
        twice = sorted(i for i, n in Counter(j.id for j in self.jobs).items() if n > 1)
        if twice:
            raise ValueError(f"job ids must be unique: {', '.join(twice[:3])}")
        # the elastic jobs: the rest have no size of their own to work out at every cycle
        self.elastic = frozenset(j.id for j in self.jobs if j.elastic_min is not None)
        self.clock = Clock()
        self.now = 0.0  # the clock's time, read often
        self.cluster = Cluster(mesh.nodes)
        self.layout = Layout()  # the scheduler's, kept between cycles (scheduler/layout.py)
        self.usage = RunningUsage()  # the same (scheduler/usage.py)
        self.answers = KeptAnswers()  # the policies' answers kept between cycles (evaluate.py)
        self.fleet = Fleet(mesh.clouds, mesh.offers, config.seed, config.start_epoch_s)
        self.data = NodeCaches(config.data) if config.data is not None else None
        self.pending: dict[str, Pending] = {}
        self.running: dict[str, Attempt] = {}
        self.results: dict[str, JobResult] = {}
        self.models: dict[str, Job] = {}
        self.requests: dict[str, Request] = {}
        self.names: dict[str, str] = {}  # what runtime estimates know a job by
        # victim -> (for whom, nodes) pairs: a preempted job's nodes for its preemptor; a
        # resized one's for its borrowers and itself
        self.freeing: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        self.lost: set[str] = set()  # jobs whose nodes died since the last cycle (``Attempt.lost``)
        self.loans: list[Loan] = []  # the lending ledger: every loan, open or closed
        self.deadlines: dict[str, float] = {}  # waiting jobs with a deadline
        self.limits: dict[str, float] = {}  # running jobs with a maximum runtime
        self.decided: set[str] = set()  # jobs the scheduler has decided about once
        self.estimator = Estimator()
        self.waiting_by_key: dict[tuple[str, str], set[str]] = {}  # (team, name) -> waiting
        self.stale_keys: set[tuple[str, str]] = set()  # estimates changed since the last cycle
        self.backlog = Backlog.of(policies)
        self.budget_states: dict[str, str] = {}
        self.actions: list[tuple[float, Action]] = []
        self.tokens = 0
        self.next_cycle: float | None = None
        self.last_cycle = -math.inf
        self.done = 0
        self.totals = Totals()
        self.samples: list[Sample] = []
        self.cloud_pools = {p.name for p in mesh.pools if p.cloud}
        self.pool_names = tuple(p.name for p in mesh.pools)
        self.fail_rngs: dict[str, random.Random] = {}
        self.fail_chain: dict[str, int] = {}  # node -> its current failure-model event
        self.mtbf_s = config.failures.node_mtbf_s if config.failures else None
        self.gang_domain = mesh.gang_domain

    def record(self, action: Action) -> None:
        if self.config.record:
            self.actions.append((self.now, action))

    def want_cycle(self) -> None:
        if self.config.tick_s:
            return  # cycles run on the tick, whatever changed
        t = (
            self.now
            if self.config.cycle_s <= 0
            else max(self.now, self.last_cycle + self.config.cycle_s)
        )
        if self.next_cycle is not None and self.next_cycle <= t:
            return
        self.next_cycle = t
        self.clock.push(t, Kind.CYCLE, At(t))

    def stop_time(self, stop_at_s: float) -> float:
        """When a stop asked for ``stop_at_s`` takes effect: then; on the tick, at the first
        cycle after this one at or after it (the controller sends stops from its cycles)."""
        tick = self.config.tick_s
        if not tick:
            return max(self.now, stop_at_s)
        return max(self.now + tick, math.ceil(stop_at_s / tick - 1e-9) * tick)

    def date(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.config.start_epoch_s + self.now, dt.UTC)

    def runtime(self, job_id: str) -> float | None:
        job = self.results[job_id].job
        return self.estimator.seconds(job.team, self.names[job_id], job.max_runtime_s)

    def wait(self, job_id: str) -> None:
        """The job waits (again), with its runtime estimate for backfill and the forecast."""
        job, result = self.results[job_id].job, self.results[job_id]
        runtime = self.runtime(job_id)
        self.pending[job_id] = pending_of(
            job_id, job.team, result.priority, self.requests[job_id], job.arrival_s, runtime
        )
        self.backlog.queue(job_id, result.priority, job.total_gpus, runtime)
        self.waiting_by_key.setdefault((job.team, self.names[job_id]), set()).add(job_id)

    def size(self, job_id: str) -> int | None:
        """An elastic job's nodes now (its most, less what it lends); None for any other."""
        if job_id not in self.elastic:
            return None  # asked for every job at every cycle: most are not elastic
        result = self.results.get(job_id)
        least = result.job.elastic_min if result is not None else None
        if result is None or least is None:
            return None  # not elastic, or a service's replica
        lent = sum(1 for x in self.loans if x.open and x.lender == job_id)
        return lending.size(result.job.nodes, least, lent)

    def unwait(self, job_id: str) -> None:
        if self.pending.pop(job_id, None) is not None:
            job = self.results[job_id].job
            self.waiting_by_key[(job.team, self.names[job_id])].discard(job_id)
        self.deadlines.pop(job_id, None)
        self.backlog.dequeue(job_id)

    def advance(self, t: float) -> None:
        """Integrate capacity over (now, t], then move the clock. On-prem utilisation counts
        only the window (the trace's span): the drain after it would dilute it."""
        now = self.now
        dt_s = t - now
        if dt_s > 0:
            up = self.cluster.up_gpus
            self.totals.cloud_gpu_s += sum(up[p] for p in self.cloud_pools if p in up) * dt_s
            window = self.config.window_s
            span = dt_s if window is None else max(0.0, min(t, window) - min(now, window))
            self.onprem(span)
        self.clock.now = self.now = t

    def onprem(self, span: float) -> None:
        if span > 0:
            c = self.cluster
            busy = sum(b for pool, b in c.busy.items() if pool not in self.cloud_pools)
            up = sum(g for pool, g in c.up_gpus.items() if pool not in self.cloud_pools)
            self.totals.onprem_busy_gpu_s += busy * span
            self.totals.onprem_gpu_s += c.onprem_gpus * span
            self.totals.onprem_down_gpu_s += (c.onprem_gpus - up) * span

    def idle_after(self, pool: str) -> float:
        """An idle node goes after its pool's idle time, but never before a scheduling cycle
        has seen it idle (the controller, too, judges idleness at its cycles)."""
        return max(self.mesh.clouds[pool].idle_s, self.config.cycle_s)
