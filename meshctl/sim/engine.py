"""The simulator's engine: a virtual clock over an event heap, driving the one lifecycle.

Each scheduling cycle decides exactly as the controller does, through ``meshctl.lifecycle``:
the snapshot (nodes from their shapes, offers at the price paid and their caps, running jobs
with their expected ends and latest checkpoints, waiting jobs with their runtime estimates
and nominations), the policies bound to the mesh as each priority sees it (capacity, the
wait forecast, this month's spend), the scheduler's plan, and what the plan does (grace,
checkpoint or not, requeue or fail by max_restarts, deadlines, maximum runtimes, idle
teardown, budget crossings). What the engine adds is time, load and the models of the world:
how long jobs run and what they save (``jobs.py``), nodes failing and coming back
(``cluster.py``, ``failures.py``), cloud instances booting, being taken back and costing
(``fleet.py``), the fabric slowing gangs (``network.py``).

Between cycles the clock moves event by event (``events.py``). A cycle runs when something
changed, at most once per ``cycle_s`` and at least every ``recheck_s`` while jobs wait; with
``tick_s`` set it runs at every multiple of it instead, as the controller's loop does, and a
stop takes effect as the controller sees one: sent at the first cycle at or after its time,
seen (the GPUs free) one cycle later. The differential check runs the engine so. Pure: no
I/O, no wall clock; randomness from streams seeded by ``(seed, purpose)``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from meshctl.lifecycle import effects
from meshctl.lifecycle.actions import Action, Fail, Launch, Leave, Requeue, Start
from meshctl.lifecycle.estimates import Estimator
from meshctl.lifecycle.snapshot import leaving, nominations, offers_left, pending_of, pool_infos
from meshctl.lifecycle.snapshot import running_of as running
from meshctl.lifecycle.view import MeshView, Victims, budget_crossings, budgets, policy_view
from meshctl.lifecycle.waits import Backlog
from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import BoundPolicies, bind
from meshctl.policy.facts import MeshSnapshot
from meshctl.scheduler import Node, Offer, Pending, PoolInfo, Request, SchedulerConfig, Snapshot
from meshctl.scheduler import schedule as run_scheduler
from meshctl.sim.cluster import Cluster
from meshctl.sim.events import (
    Arrival,
    At,
    Clock,
    InstanceEvent,
    JobEvent,
    Kind,
    NodeEvent,
    NodeFails,
    PoolEvent,
)
from meshctl.sim.failures import Checkpoints, FailureModel, Segment
from meshctl.sim.fleet import CloudPool, Fleet, Instance
from meshctl.sim.jobs import Attempt, JobResult, checkpoint_plan
from meshctl.sim.network import Network, slowdown
from meshctl.sim.workload import SimJob, job_document

__all__ = ["CloudPool", "Engine", "JobResult", "Result", "SimConfig", "SimMesh", "simulate"]


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
    until_s: float | None = None  # stop here even if jobs remain (default: a year after the last)
    record: bool = False  # keep every action the lifecycle decided (``Result.actions``)


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
        self.clock = Clock()
        self.now = 0.0  # the clock's time, read often
        self.cluster = Cluster(mesh.nodes)
        self.fleet = Fleet(mesh.clouds, mesh.offers, config.seed, config.start_epoch_s)
        self.pending: dict[str, Pending] = {}
        self.running: dict[str, Attempt] = {}
        self.results: dict[str, JobResult] = {}
        self.models: dict[str, Job] = {}
        self.requests: dict[str, Request] = {}
        self.names: dict[str, str] = {}  # what runtime estimates know a job by
        self.freeing: dict[str, tuple[str, tuple[str, ...]]] = {}  # victim -> (for, its nodes)
        self.deadlines: dict[str, float] = {}  # waiting jobs with a deadline
        self.limits: dict[str, float] = {}  # running jobs with a maximum runtime
        self.decided: set[str] = set()  # jobs the scheduler has decided about once
        self.estimator = Estimator()
        self.waiting_by_key: dict[tuple[str, str], set[str]] = {}  # (team, name) -> waiting
        self.stale_keys: set[tuple[str, str]] = set()  # estimates changed since the last cycle
        self.backlog = Backlog()
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
        self.bound_base: BoundPolicies | None = None
        self._classes: dict[tuple[Any, ...], tuple[Job, Request, int]] = {}
        self.mtbf_s = config.failures.node_mtbf_s if config.failures else None
        self.gang_domain = (
            next(iter(mesh.networks.values())).domain_label if mesh.networks else "switch"
        )

    # --- the loop ----------------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None, every: int = 20_000) -> Result:
        """Run until every job has ended; ``progress(t)`` is called every ``every`` events."""
        clock, totals = self.clock, self.totals
        if self.jobs:
            clock.push(self.jobs[0].arrival_s, Kind.ARRIVE, Arrival(0))
        self._failures_start()
        for t, pool, n in self.config.injected_notices:
            clock.push(t, Kind.NOTICE, PoolEvent(f"{pool}#{n}"))  # resolved when it fires
        clock.push(0.0, Kind.SAMPLE, At(0.0))
        if self.config.tick_s:
            clock.push(0.0, Kind.CYCLE, At(0.0))
            self.next_cycle = 0.0
        handlers = self._handlers()
        last_arrival = self.jobs[-1].arrival_s if self.jobs else 0.0
        until = self.config.until_s
        if until is None:
            until = last_arrival + 365 * 86_400.0
        tick, last = self.config.tick_s, None
        while clock:
            if self.done >= len(self.jobs):
                if not tick:
                    break
                # on the tick, the cycle that sees the last job end runs too (the controller's)
                last = last if last is not None else math.ceil(self.now / tick - 1e-9) * tick
            t, kind, event = clock.pop()
            if t > until or (last is not None and t > last + 1e-9):
                break  # what still waits then is reported as unfinished
            if t > self.now:
                self._advance(t)
            handlers[kind](event)
            totals.events += 1
            if progress is not None and totals.events % every == 0:
                progress(self.now)
        return self._finish_run()

    def _handlers(self) -> dict[Kind, Callable[[Any], None]]:
        return {
            Kind.FINISH: self._finished,
            Kind.STOP: self._stopped,
            Kind.RELEASE: self._released,
            Kind.FAIL: self._node_fails,
            Kind.RECLAIM: self._reclaim,
            Kind.REPAIR: self._repair,
            Kind.UP: self._up,
            Kind.NOTICE: self._notice,
            Kind.ARRIVE: self._arrive,
            Kind.WAKE: lambda _: self._want_cycle(),
            Kind.SAMPLE: self._sample,
            Kind.CYCLE: self._cycle_event,
            Kind.IDLE: self._idle,
        }

    def _finish_run(self) -> Result:
        end_s = self.now
        self._sample(None, again=False)
        for instance in list(self.fleet.live.values()):  # billed until they would go
            node, until_s = instance.node, end_s
            if node is not None and not node.jobs:
                since = max(instance.launched_s, node.idle_since)
                until_s = max(until_s, since + self._idle_after(instance.pool))
            self.fleet.ledger.close(instance.charge(until_s))
        self.totals.spend_usd = dict(self.fleet.ledger.total_usd)
        self.totals.launches = self.fleet.launches
        window = self.config.window_s
        if window is not None and window > end_s:
            self._onprem(window - end_s)  # the window's idle end counts for utilisation
        return Result(
            end_s,
            list(self.results.values()),
            self.samples,
            self.totals,
            self.cluster.onprem_gpus,
            self.actions,
        )

    def _advance(self, t: float) -> None:
        """Integrate capacity over (now, t], then move the clock. On-prem utilisation counts
        only the window (the trace's span): the drain after it would dilute it."""
        now = self.now
        dt_s = t - now
        if dt_s > 0:
            up = self.cluster.up_gpus
            self.totals.cloud_gpu_s += sum(up[p] for p in self.cloud_pools if p in up) * dt_s
            window = self.config.window_s
            span = dt_s if window is None else max(0.0, min(t, window) - min(now, window))
            self._onprem(span)
        self.clock.now = self.now = t

    def _onprem(self, span: float) -> None:
        if span > 0:
            c = self.cluster
            busy = sum(b for pool, b in c.busy.items() if pool not in self.cloud_pools)
            up = sum(g for pool, g in c.up_gpus.items() if pool not in self.cloud_pools)
            self.totals.onprem_busy_gpu_s += busy * span
            self.totals.onprem_gpu_s += c.onprem_gpus * span
            self.totals.onprem_down_gpu_s += (c.onprem_gpus - up) * span

    def _want_cycle(self) -> None:
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

    def _record(self, action: Action) -> None:
        if self.config.record:
            self.actions.append((self.now, action))

    def _stop_time(self, stop_at_s: float) -> float:
        """When a stop asked for ``stop_at_s`` takes effect: then; on the tick, at the first
        cycle after this one at or after it (the controller sends stops from its cycles)."""
        tick = self.config.tick_s
        if not tick:
            return max(self.now, stop_at_s)
        return max(self.now + tick, math.ceil(stop_at_s / tick - 1e-9) * tick)

    # --- jobs arriving -------------------------------------------------------------------------

    def _class_of(self, job: SimJob) -> tuple[Job, Request, int]:
        """The job file a trace job stands for; one per (name, kind, criticality, team, shape
        and limits): jobs alike share one, and one verdict per cycle."""
        key = (
            job.name,
            job.kind,
            job.criticality,
            job.team,
            job.gpus,
            job.nodes,
            job.max_runtime_s,
            job.max_restarts,
            job.priority_class,
        )
        found = self._classes.get(key)
        if found is None:
            c = self.config
            document = job_document(job, c.cpus_per_gpu, c.memory_gib_per_gpu, self.gang_domain)
            model = Job.model_validate(document)
            priority = 0
            if self.policies is not None:
                _, priority, _ = self._bound_at_start().priority_of(model)
            found = self._classes[key] = (model, Request.of(model), priority)
        return found

    def _bound_at_start(self) -> BoundPolicies:
        if self.bound_base is None:
            assert self.policies is not None
            configured = self.mesh.configured or MeshSnapshot(())
            self.bound_base = bind(self.policies, configured, self._date())
        return self.bound_base

    def _date(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.config.start_epoch_s + self.now, dt.UTC)

    def _arrive(self, event: Arrival) -> None:
        job = self.jobs[event.index]
        if event.index + 1 < len(self.jobs):
            nxt = self.jobs[event.index + 1]
            self.clock.push(nxt.arrival_s, Kind.ARRIVE, Arrival(event.index + 1))
        model, request, priority = self._class_of(job)
        self.models[job.id] = model
        self.requests[job.id] = request
        self.names[job.id] = job.class_name
        self.results[job.id] = JobResult(job, priority)
        self._wait(job.id)
        if job.deadline_s is not None:
            self.deadlines[job.id] = job.deadline_s
            self.clock.push(job.deadline_s, Kind.WAKE, At(job.deadline_s))
        self._want_cycle()

    def _runtime(self, job_id: str) -> float | None:
        job = self.results[job_id].job
        return self.estimator.seconds(job.team, self.names[job_id], job.max_runtime_s)

    def _wait(self, job_id: str) -> None:
        """The job waits (again), with its runtime estimate for backfill and the forecast."""
        job, result = self.results[job_id].job, self.results[job_id]
        runtime = self._runtime(job_id)
        self.pending[job_id] = pending_of(
            job_id, job.team, result.priority, self.requests[job_id], job.arrival_s, runtime
        )
        self.backlog.queue(job_id, result.priority, job.total_gpus, runtime)
        self.waiting_by_key.setdefault((job.team, self.names[job_id]), set()).add(job_id)

    def _unwait(self, job_id: str) -> None:
        if self.pending.pop(job_id, None) is not None:
            job = self.results[job_id].job
            self.waiting_by_key[(job.team, self.names[job_id])].discard(job_id)
        self.deadlines.pop(job_id, None)
        self.backlog.dequeue(job_id)

    def _estimates_learnt(self) -> None:
        """Waiting jobs whose runtime estimate changed (a run of theirs ended since the last
        cycle) are estimated again, as the controller estimates every waiting job each cycle."""
        for key in sorted(self.stale_keys):
            for job_id in sorted(self.waiting_by_key.get(key, ())):
                runtime = self._runtime(job_id)
                pending = self.pending[job_id]
                if pending.max_runtime_s != runtime:
                    self.pending[job_id] = replace(pending, max_runtime_s=runtime)
                    job = self.results[job_id].job
                    self.backlog.queue(job_id, pending.priority, job.total_gpus, runtime)
        self.stale_keys.clear()

    # --- a scheduling cycle --------------------------------------------------------------------

    def _cycle_event(self, event: At) -> None:
        if event.t_s != self.next_cycle:
            return  # superseded by an earlier cycle
        tick = self.config.tick_s
        self.next_cycle = None
        if tick:
            self.next_cycle = self.now + tick
            self.clock.push(self.now + tick, Kind.CYCLE, At(self.now + tick))
        elif not self.pending:
            return
        self.last_cycle = self.now
        self.totals.cycles += 1
        self._cycle()
        if tick:
            for pool in sorted(self.mesh.clouds):
                self._teardown(pool)
        elif self.pending:  # waiting work is looked at again even if nothing happens
            t_next = self.now + max(self.config.recheck_s, self.config.cycle_s)
            if self.next_cycle is None or self.next_cycle > t_next:
                self.next_cycle = t_next
                self.clock.push(t_next, Kind.CYCLE, At(t_next))

    def _cycle(self) -> None:
        now = self.now
        if self.stale_keys:
            self._estimates_learnt()
        for job_id, deadline in sorted(self.deadlines.items()):
            failed = effects.past_deadline(job_id, deadline, now)
            if failed is not None:
                self._unwait(job_id)
                self._record(failed)
                self._finished_for_good(job_id, failed.reason)
        for job_id, limit in sorted(self.limits.items()):
            attempt = self.running.get(job_id)
            over = effects.overran(job_id, attempt.started_s if attempt else None, limit, now)
            if over is not None and attempt is not None and not attempt.leaving:
                self._record(over)
                self._leave(attempt, over, now)
        snapshot, mesh = self._snapshot()
        view = policy_view(
            self.policies, mesh, self._date(), self.models, self._priority, self._victims()
        )
        for crossed in budget_crossings(self.budget_states, budgets(self.policies, mesh)):
            self.budget_states[crossed.budget] = crossed.state
            self.totals.budget_crossings += 1
            self._record(crossed)
        plan = run_scheduler(snapshot, view, self.config.scheduler)
        for action in effects.of_plan(plan):
            self._apply(action)
        for job_id, decision in plan.decisions.items():
            first = job_id not in self.decided
            self.decided.add(job_id)
            if first and decision.status == "unschedulable" and job_id in self.pending:
                self._unwait(job_id)  # as submit rejects it: it could never run
                self.results[job_id].rejected = decision.reason or "unschedulable"
                self.done += 1

    def _priority(self, job_id: str) -> int:
        return self.results[job_id].priority

    def _victims(self) -> Victims:
        return Victims(self.running, self.models, self.now, lambda attempt: attempt.running)

    def _snapshot(self) -> tuple[Snapshot, MeshView]:
        """The scheduler's snapshot and what the policies see, as the lifecycle builds them."""
        now, fleet = self.now, self.fleet
        nodes = self.cluster.snapshot_nodes()  # first: the capacity follows the nodes
        capacity = self.cluster.capacity.of_pools(self.pool_names)
        waits = self.backlog.waits(capacity, self.cloud_pools, now)
        pools = pool_infos(self.mesh.pools, waits.lowest(), fleet.live_per_pool, {})
        nominated = nominations(self.freeing.values())
        pending = tuple(
            replace(p, nominated=nominated[p.job_id]) if p.job_id in nominated else p
            for p in self.pending.values()
        )
        snapshot = Snapshot(
            now,
            nodes,
            pools,
            tuple(a.running for a in self.running.values()),
            pending,
            offers_left(self.mesh.offers, fleet.live_type),
        )
        spend, team_spend = fleet.spend(now)
        configured = self.mesh.configured or MeshSnapshot(())
        mesh = MeshView(configured, capacity, waits, len(self.pending), spend, team_spend)
        return snapshot, mesh

    # --- what the lifecycle decided ------------------------------------------------------------

    def _apply(self, action: Action) -> None:
        self._record(action)
        if isinstance(action, Start):
            self._start(action)
        elif isinstance(action, Leave):
            attempt = self.running.get(action.job_id)
            if attempt is not None and not attempt.leaving:
                if action.for_job is not None:
                    self.totals.preemptions += 1
                    nodes = tuple(a.node for a in attempt.allocations)
                    self.freeing[action.job_id] = (action.for_job, nodes)
                self._leave(attempt, action, self.now)
        elif isinstance(action, Launch):
            self._launch(action)

    def _start(self, start: Start) -> None:
        job_id = start.job_id
        result = self.results[job_id]
        job = result.job
        self._unwait(job_id)
        labels = []
        for alloc in start.allocations:
            node = self.cluster.nodes[alloc.node]
            self.cluster.hold(node, job_id, alloc, 1.0)
            labels.append(node.base.labels)
        speed = slowdown(self.mesh.networks.get(start.pool), labels)
        c = self.config.checkpoints
        restart = c.restart_s if result.attempts > 0 else 0.0
        interval = c.interval_for(job.nodes, self.mtbf_s)
        remaining = max(0.0, job.duration_s - result.progress_s)
        seg = Segment(restart, remaining * speed, interval, c.cost_s)
        self.tokens += 1
        runtime = self._runtime(job_id)
        run = running(
            job_id,
            job.team,
            result.priority,
            start.pool,
            start.allocations,
            self.requests[job_id],
            self.now,
            runtime,
            checkpoints=checkpoint_plan(self.now, seg),
        )
        self.running[job_id] = Attempt(
            job_id, self.tokens, start.pool, start.allocations, self.now, speed, seg, run
        )
        self.backlog.run(job_id, start.pool, run.expected_end_s, job.total_gpus)
        self.cluster.busy[start.pool] += job.total_gpus
        result.attempts += 1
        result.backfilled += start.backfill
        self.totals.backfill_starts += start.backfill
        result.pools.add(start.pool)
        if result.first_start_s is None:
            result.first_start_s = self.now
        self.clock.push(self.now + seg.wall_s, Kind.FINISH, JobEvent(job_id, self.tokens))
        if job.max_runtime_s is not None:
            self.limits[job_id] = job.max_runtime_s
            end = self.now + job.max_runtime_s
            self.clock.push(end, Kind.WAKE, At(end))

    def _leave(self, attempt: Attempt, why: Leave | Fail, now: float) -> None:
        """The attempt is on its way out: asked to checkpoint now (a Leave that says so),
        stopped at its stop time; its GPUs stay held until then."""
        stop_at = why.stop_at_s if isinstance(why, Leave) else now
        attempt.running = leaving(attempt.running, stop_at)
        attempt.why = why
        if isinstance(why, Leave) and why.checkpoint:
            attempt.asked_s = now
        gpus = self.results[attempt.job_id].job.total_gpus
        self.backlog.run(attempt.job_id, attempt.pool, attempt.running.expected_end_s, gpus)
        at = self._stop_time(stop_at)
        self.clock.push(at, Kind.STOP, JobEvent(attempt.job_id, attempt.token))

    def _stopped(self, event: JobEvent) -> None:
        """The end of a grace or a notice, or a stop sent: the attempt stops working now and
        keeps what it saved; its GPUs are free once the stop is seen (on the tick: a cycle
        later, as the controller sees it)."""
        attempt = self.running.get(event.job_id)
        if attempt is None or attempt.token != event.token or attempt.stopped_s is not None:
            return
        attempt.stopped_s = self.now
        if self.config.tick_s:
            self.clock.push(self.now + self.config.tick_s, Kind.RELEASE, event)
        else:
            self._end_early(attempt)

    def _released(self, event: JobEvent) -> None:
        attempt = self.running.get(event.job_id)
        if attempt is not None and attempt.token == event.token:
            self._end_early(attempt)

    def _end_early(self, attempt: Attempt, why: Leave | Fail | None = None) -> None:
        """An attempt that stopped before its work was done keeps what it saved; then the job
        waits again, or fails for good (the lifecycle's rule)."""
        why = attempt.why or why
        assert why is not None
        result, cost = self.results[attempt.job_id], self.config.checkpoints.cost_s
        stop = attempt.stopped_s if attempt.stopped_s is not None else self.now
        work, checkpoints = attempt.saved(stop, cost)
        seg = attempt.segment
        result.account(
            self.now - attempt.started_s,
            work,
            checkpoints,
            min(stop - attempt.started_s, seg.restart_s),
            attempt.speed,
            cost,
        )
        result.progress_s += work
        self._free(attempt, stop)
        if isinstance(why, Fail):
            self._finished_for_good(attempt.job_id, why.reason)
            return
        if why.for_job is not None:
            result.preempted += 1
        else:
            result.failed += 1
        job = result.job
        after, result.failures = effects.requeue_or_fail(
            attempt.job_id, why.left, why.reason, result.failures, job.max_restarts
        )
        self._record(after)
        if isinstance(after, Requeue):
            self._wait(attempt.job_id)
            self._want_cycle()
        else:
            self._finished_for_good(attempt.job_id, after.reason)

    def _finished_for_good(self, job_id: str, reason: str) -> None:
        self.results[job_id].failed_reason = reason
        self.done += 1
        if self.pending:
            self._want_cycle()

    def _finished(self, event: JobEvent) -> None:
        attempt = self.running.get(event.job_id)
        if attempt is None or attempt.token != event.token or attempt.stopped_s is not None:
            return
        if isinstance(attempt.why, Fail):  # failed already (ran past its maximum runtime)
            attempt.stopped_s = self.now
            self._end_early(attempt)
            return
        result = self.results[event.job_id]
        seg, cost = attempt.segment, self.config.checkpoints.cost_s
        work = seg.compute_s / attempt.speed
        result.account(seg.wall_s, work, seg.checkpoints, seg.restart_s, attempt.speed, cost)
        result.progress_s += work
        result.end_s = self.now
        job = result.job
        self.estimator.observe(job.team, self.names[job.id], self.now - attempt.started_s)
        self.stale_keys.add((job.team, self.names[job.id]))
        self._free(attempt, self.now)
        self.done += 1
        if self.pending:
            self._want_cycle()

    def _free(self, attempt: Attempt, stopped_s: float) -> None:
        """The attempt's GPUs are free again; a cloud node left with nothing is idle since
        the attempt stopped working."""
        job_id = attempt.job_id
        del self.running[job_id]
        self.freeing.pop(job_id, None)  # its nodes are free: no longer held for its preemptor
        self.limits.pop(job_id, None)
        self.backlog.stop(job_id)
        for alloc in attempt.allocations:
            node = self.cluster.nodes.get(alloc.node)
            if node is None:
                continue  # gone: nothing to give back
            self.cluster.hold(node, job_id, alloc, -1.0)
            if node.cloud is not None and not node.jobs:
                node.idle_since = stopped_s
                self._idle_later(node.base.pool, stopped_s)
        self.cluster.busy[attempt.pool] -= self.results[job_id].job.total_gpus

    # --- cloud instances -----------------------------------------------------------------------

    def _launch(self, action: Launch) -> None:
        cloud = self.mesh.clouds[action.pool]
        team = self.results[action.job_id].job.team
        for instance in self.fleet.launch(action, team, self.now):
            self.clock.push(self.now + cloud.provision_s, Kind.UP, InstanceEvent(instance))
        pending = self.pending.get(action.job_id)
        if pending is not None:
            self.pending[action.job_id] = replace(pending, provisioning=True)

    def _up(self, event: InstanceEvent) -> None:
        instance = event.instance
        if instance.gone:
            return
        node = self.fleet.join(instance)
        self.cluster.add(node)
        self._idle_later(instance.pool, instance.launched_s)
        job_id = instance.for_job
        pending = self.pending.get(job_id)
        if pending is not None and self.fleet.launching[job_id] <= 0:
            self.pending[job_id] = replace(pending, provisioning=False)
        life = self.fleet.spot_life(instance)
        if life is not None:
            notice = self.mesh.clouds[instance.pool].notice_s
            self.clock.push(self.now + max(0.0, life - notice), Kind.NOTICE, event)
            self.clock.push(self.now + life, Kind.RECLAIM, event)
        if self.pending:
            self._want_cycle()

    def _idle_after(self, pool: str) -> float:
        """An idle node goes after its pool's idle time, but never before a scheduling cycle
        has seen it idle (the controller, too, judges idleness at its cycles)."""
        return max(self.mesh.clouds[pool].idle_s, self.config.cycle_s)

    def _idle_later(self, pool: str, since_s: float) -> None:
        if not self.config.tick_s:  # on the tick every cycle looks
            at = max(self.now, since_s + self._idle_after(pool))
            self.clock.push(at, Kind.IDLE, PoolEvent(pool))

    def _idle(self, event: PoolEvent) -> None:
        self._teardown(event.pool)

    def _teardown(self, pool: str) -> None:
        for down in self.fleet.idle(pool, self.now, set()):
            self._record(down)
            self._terminate(self.fleet.instances[down.instance_id])

    def _terminate(self, instance: Instance) -> None:
        self.fleet.terminate(instance, self.now)
        node = instance.node
        if node is not None and node.name in self.cluster.nodes:
            self.cluster.remove(node)

    def _instance(self, event: InstanceEvent | PoolEvent) -> Instance | None:
        """The instance an event is about; an injected notice names the n-th launched in a
        pool ("pool#n")."""
        if isinstance(event, InstanceEvent):
            return event.instance
        pool, n = event.pool.rsplit("#", 1)
        launched = [i for i in self.fleet.instances.values() if i.pool == pool]
        return launched[int(n)] if int(n) < len(launched) else None

    def _notice(self, event: InstanceEvent | PoolEvent) -> None:
        instance = self._instance(event)
        node = instance.node if instance is not None else None
        if instance is None or instance.gone or node is None:
            return
        notice = self.mesh.clouds[instance.pool].notice_s
        if isinstance(event, PoolEvent):  # injected: the provider takes it after its notice
            self.clock.push(self.now + notice, Kind.RECLAIM, InstanceEvent(instance))
        self.cluster.set_health(node, "cordoned")
        for job_id in sorted(node.jobs):
            attempt = self.running[job_id]
            if not attempt.leaving:
                leave = effects.noticed(job_id, node.name, self.now + notice, self.now)
                self._record(leave)
                self._leave(attempt, leave, self.now)

    def _reclaim(self, event: InstanceEvent) -> None:
        instance = event.instance
        if instance.gone:
            return
        node = instance.node
        self.totals.spot_reclaims += 1
        if node is not None:
            for job_id in sorted(node.jobs):
                attempt = self.running[job_id]
                why = attempt.why or effects.taken_back(job_id, node.name, self.now)
                if attempt.why is None:
                    self._record(why)
                attempt.stopped_s = attempt.stopped_s if attempt.stopped_s is not None else self.now
                self._end_early(attempt, why)
        self._terminate(instance)

    # --- on-prem failures ----------------------------------------------------------------------

    def _node_fails(self, event: NodeFails) -> None:
        """A node fails: its jobs lose what they did since their last checkpoint and wait
        again. The node stays in the snapshot, down (it will come back, so a job that only it
        could hold still waits rather than being rejected), until its repair."""
        name = event.node
        if event.chain is not None and event.chain != self.fail_chain.get(name):
            return  # the model's next failure, superseded by an injected one and its repair
        node = self.cluster.nodes.get(name)
        if node is None or node.health == "down" or node.cloud is not None:
            return
        self.totals.node_failures += 1
        for job_id in sorted(node.jobs):
            attempt = self.running[job_id]
            why = attempt.why or effects.node_died(job_id, name, self.now)
            if attempt.why is None:
                self._record(why)
            attempt.stopped_s = attempt.stopped_s if attempt.stopped_s is not None else self.now
            self._end_early(attempt, why)
        self.cluster.set_health(node, "down")
        self.clock.push(self.now + event.repair_s, Kind.REPAIR, NodeEvent(name))

    def _repair(self, event: NodeEvent) -> None:
        node = self.cluster.nodes[event.node]
        self.cluster.set_health(node, "ready")
        self._next_failure(event.node)
        if self.pending:
            self._want_cycle()

    def _failures_start(self) -> None:
        for t, name, repair in self.config.injected_failures:
            self.clock.push(t, Kind.FAIL, NodeFails(name, repair, None))
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
        self.clock.push(self.now + gap, Kind.FAIL, NodeFails(name, model.repair_s(rng), chain))

    # --- samples -------------------------------------------------------------------------------

    def _sample(self, _: At | None, again: bool = True) -> None:
        c, now = self.cluster, self.now
        onprem_busy = sum(b for p, b in c.busy.items() if p not in self.cloud_pools)
        onprem_up = sum(g for p, g in c.up_gpus.items() if p not in self.cloud_pools)
        cloud = sum(g for p, g in c.up_gpus.items() if p in self.cloud_pools)
        spend = sum(self.fleet.ledger.total_usd.values()) + sum(
            max(0.0, now - i.launched_s) / 3600.0 * i.usd_per_hour for i in self.fleet.live.values()
        )
        self.samples.append(
            Sample(now, onprem_busy, onprem_up, cloud, len(self.pending), len(self.running), spend)
        )
        if again:
            self.clock.push(now + self.config.sample_s, Kind.SAMPLE, At(now + self.config.sample_s))


def simulate(
    mesh: SimMesh,
    jobs: Sequence[SimJob],
    config: SimConfig = SimConfig(),
    policies: PolicySet | None = None,
    progress: Callable[[float], None] | None = None,
) -> Result:
    return Engine(mesh, jobs, config, policies).run(progress)
