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

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from meshctl.lifecycle import effects, lending, serving
from meshctl.lifecycle.actions import Action, Launch, Leave, Left, Start
from meshctl.lifecycle.snapshot import nominations, offers_left, pool_infos
from meshctl.lifecycle.view import MeshView, Victims, budget_crossings, budgets, policy_view
from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import BoundPolicies, bind
from meshctl.policy.facts import MeshSnapshot
from meshctl.scheduler import Pending, Request, Snapshot
from meshctl.scheduler import schedule as run_scheduler
from meshctl.scheduler.preempt import lost_work_s
from meshctl.sim.config import Result, SimConfig, SimMesh
from meshctl.sim.events import Arrival, At, Kind, PoolEvent
from meshctl.sim.fleet import CloudPool
from meshctl.sim.jobs import JobResult
from meshctl.sim.services import Services
from meshctl.sim.workload import SimJob, job_document

__all__ = ["CloudPool", "Engine", "JobResult", "Result", "SimConfig", "SimMesh", "simulate"]


class Engine(Services):
    """One simulation run: ``Engine(mesh, jobs, config, policies).run()``."""

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
        repaired = max((t + r for t, _, r in self.config.injected_failures), default=0.0)
        while clock:
            if self.done >= len(self.jobs):
                if not tick:
                    break
                # on the tick, the cycle that sees the last job end runs too (the controller's),
                # and none ends before its injected failures are repaired (a service waiting
                # for a node that is down is placed when it is back)
                end = max(self.now, repaired)
                last = last if last is not None else math.ceil(end / tick - 1e-9) * tick
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
        last: dict[str, float] = {}  # per pool: when its last worker would go
        heads = []
        for instance in list(self.fleet.live.values()):  # billed until they would go
            node, until_s = instance.node, end_s
            if instance.offer is None:  # a pool's own head: it goes with the last worker
                heads.append(instance)
                continue
            if node is not None and not node.jobs:
                since = max(instance.launched_s, node.idle_since)
                until_s = max(until_s, since + self._idle_after(instance.pool))
            last[instance.pool] = max(last.get(instance.pool, end_s), until_s)
            self.fleet.ledger.close(instance.charge(until_s))
        for head in heads:
            since = self.fleet.head_idle_since(head)
            alone = max(end_s, since + self._idle_after(head.pool))  # no worker left
            self.fleet.ledger.close(head.charge(last.get(head.pool, alone)))
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
            self.data.stats if self.data is not None else None,
        )

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
            job.elastic_min,
            job.serve,
            job.data,
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

    def _arrive(self, event: Arrival) -> None:
        job = self.jobs[event.index]
        if event.index + 1 < len(self.jobs):
            nxt = self.jobs[event.index + 1]
            self.clock.push(nxt.arrival_s, Kind.ARRIVE, Arrival(event.index + 1))
        model, request, priority = self._class_of(job)
        if job.serve is not None:
            self._serve(job, model, request, priority)
            self._want_cycle()
            return
        self.models[job.id] = model
        self.requests[job.id] = request
        self.names[job.id] = job.class_name
        self.results[job.id] = JobResult(job, priority)
        self._wait(job.id)
        if job.deadline_s is not None:
            self.deadlines[job.id] = job.deadline_s
            self.clock.push(job.deadline_s, Kind.WAKE, At(job.deadline_s))
        self._want_cycle()

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
        elif not self.pending and not self.services and not self.lost:
            return
        self.last_cycle = self.now
        self.totals.cycles += 1
        self._cycle()
        if tick:
            for pool in sorted(self.mesh.clouds):
                self._teardown(pool)
        elif self.pending or self.services:  # waiting work is looked at again, services' traffic
            again = self.config.serve_every_s if self.services else self.config.recheck_s
            t_next = self.now + max(again, self.config.cycle_s)
            if self.next_cycle is None or self.next_cycle > t_next:
                self.next_cycle = t_next
                self.clock.push(t_next, Kind.CYCLE, At(t_next))

    def _cycle(self) -> None:
        now = self.now
        if self.stale_keys:
            self._estimates_learnt()
        self._replace_lost()
        for job_id, deadline in sorted(self.deadlines.items()):
            failed = effects.past_deadline(job_id, deadline, now)
            if failed is not None:
                self._unwait(job_id)
                self._record(failed)
                self._finished_for_good(job_id, failed.reason)
        for job_id, limit in sorted(self.limits.items()):
            attempt = self.running.get(job_id)
            over = effects.overran(job_id, attempt.began_s if attempt else None, limit, now)
            if over is not None and attempt is not None and not attempt.leaving:
                self._record(over)
                self._leave(attempt, over, now)
        active = set(self.running) | set(self.pending)
        if self.services:
            active |= self._services_cycle()
        closed = {x.id: x for x in lending.closing(self.loans, active, now)}
        if closed:
            self.loans = [closed.get(x.id, x) for x in self.loans]
        snapshot, mesh = self._snapshot()
        view = policy_view(
            self.policies, mesh, self._date(), self.models, self._priority, self._victims()
        )
        for crossed in budget_crossings(self.budget_states, budgets(self.policies, mesh)):
            self.budget_states[crossed.budget] = crossed.state
            self.totals.budget_crossings += 1
            self._record(crossed)
        plan = run_scheduler(snapshot, view, self.config.scheduler, self.layout)
        for action in effects.of_plan(plan, grow_grace_s=self.mesh.grow_grace_s):
            self._apply(action)
        for job_id, decision in plan.decisions.items():
            first = job_id not in self.decided
            self.decided.add(job_id)
            if first and decision.status == "unschedulable" and job_id in self.pending:
                self._unwait(job_id)  # as submit rejects it: it could never run
                self.results[job_id].rejected = decision.reason or "unschedulable"
                self.done += 1

    def _priority(self, job_id: str) -> int:
        return self.results[serving.service_of(job_id) or job_id].priority

    def _victims(self) -> Victims:
        if not self.replica_running:
            return Victims(self.running, self.models, self.now, lambda attempt: attempt.running)
        held: dict[str, Any] = {r.job_id: r for r in self.replica_running}
        held.update((job_id, a.running) for job_id, a in self.running.items())
        return Victims(held, self.models, self.now)

    def _snapshot(self) -> tuple[Snapshot, MeshView]:
        """The scheduler's snapshot and what the policies see, as the lifecycle builds them."""
        now, fleet = self.now, self.fleet
        nodes = self.cluster.snapshot_nodes()  # first: the capacity follows the nodes
        capacity = self.cluster.capacity.of_pools(self.pool_names)
        waits = self.backlog.waits(capacity, self.cloud_pools, now)
        pools = pool_infos(self.mesh.pools, waits.lowest(), fleet.live_per_pool, {})
        nominated = nominations(pair for pairs in self.freeing.values() for pair in pairs)
        pending = [self._pending_now(p, nominated) for p in self.pending.values()]
        for attempt in self.running.values():  # elastic jobs below their size grow back
            wanted = self._size(attempt.job_id)
            if wanted is not None and attempt.stopped_s is None:
                job = self.results[attempt.job_id].job
                grow = lending.growth(attempt.running, wanted, job.arrival_s)
                if grow is not None:
                    pending.append(grow)
        pending += [self._pending_now(p, nominated) for p in self.replica_pending]
        snapshot = Snapshot(
            now,
            nodes,
            pools,
            tuple(a.running for a in self.running.values()) + tuple(self.replica_running),
            tuple(pending),
            offers_left(self.mesh.offers, fleet.live_type),
        )
        spend, team_spend = fleet.spend(now)
        configured = self.mesh.configured or MeshSnapshot(())
        mesh = MeshView(configured, capacity, waits, len(self.pending), spend, team_spend)
        return snapshot, mesh

    def _pending_now(self, pending: Pending, nominated: dict[str, tuple[str, ...]]) -> Pending:
        """A waiting job as this cycle sees it: the nodes freed for it, its size now."""
        if pending.job_id in nominated:
            pending = replace(pending, nominated=nominated[pending.job_id])
        size = self._size(pending.job_id)
        if size is not None:
            pending = replace(pending, request=lending.sized(pending.request, size))
        return pending

    def _apply(self, action: Action) -> None:
        if self.services and self._replica_action(action):
            return
        self._record(action)
        if isinstance(action, Start):
            self._start(action)
        elif isinstance(action, Leave):
            attempt = self.running.get(action.job_id)
            if attempt is not None and not attempt.leaving:
                nodes = tuple(a.node for a in attempt.allocations)
                if action.left is Left.RESIZED:
                    self.totals.resizes += 1
                    lent = dict(action.lent)
                    pairs = [(b, (n,)) for n, b in action.lent]
                    rest = tuple(n for n in nodes if n not in lent) + action.grows_onto
                    self.freeing[action.job_id] = [*pairs, (action.job_id, rest)]
                    lost = lost_work_s(attempt.running, action.stop_at_s)
                    self.loans += lending.opened(action, attempt.running, self.now, lost)
                elif action.for_job is not None:
                    self.totals.preemptions += 1
                    self.freeing[action.job_id] = [(action.for_job, nodes)]
                self._leave(attempt, action, self.now)
        elif isinstance(action, Launch):
            self._launch(action)


def simulate(
    mesh: SimMesh,
    jobs: Sequence[SimJob],
    config: SimConfig | None = None,
    policies: PolicySet | None = None,
    progress: Callable[[float], None] | None = None,
) -> Result:
    return Engine(mesh, jobs, config, policies).run(progress)
