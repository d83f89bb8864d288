"""The simulator's engine: a virtual clock over an event heap, driving the one lifecycle.

Each scheduling cycle is the controller's own: the lifecycle's one cycle
(``meshctl.lifecycle.cycle``), driven through the run's side of it (``side.py``), which builds
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

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from meshctl.lifecycle.cycle import cycle
from meshctl.model.job import Job
from meshctl.policy.compiled import PolicySet
from meshctl.policy.evaluate import BoundPolicies, bind
from meshctl.policy.facts import MeshSnapshot
from meshctl.scheduler import Request
from meshctl.sim.core.attempts import Attempts
from meshctl.sim.core.config import Result, SimConfig, SimMesh
from meshctl.sim.core.events import Arrival, At, Kind, PoolEvent
from meshctl.sim.core.fleet import CloudPool
from meshctl.sim.core.jobs import JobResult
from meshctl.sim.core.runstate import RunState
from meshctl.sim.core.services import Services
from meshctl.sim.core.side import EngineSide
from meshctl.sim.core.workload import SimJob, job_document
from meshctl.sim.core.world import WorldEvents

# what a run reports as it goes: the simulated time (s) and the jobs ended so far
Progress = Callable[[float, int], None]

__all__ = [
    "CloudPool",
    "Engine",
    "JobResult",
    "Progress",
    "Result",
    "SimConfig",
    "SimMesh",
    "simulate",
]


class Engine:
    """One simulation run: ``Engine(mesh, jobs, config, policies).run()``.

    The run's state (``state.RunState``) is one object that each collaborator holds: the
    job attempts (``attempts``), the world's events (``world``, which acts on jobs through
    the attempts), the services (``services``) and the run's side of the one cycle
    (``side``, which hands each decision to the one it is about). The engine holds them,
    runs the loop, drives the cycle and hands each event to the collaborator it is about."""

    def __init__(
        self,
        mesh: SimMesh,
        jobs: Sequence[SimJob],
        config: SimConfig | None = None,
        policies: PolicySet | None = None,
    ) -> None:
        self.state = RunState(mesh, jobs, config, policies)
        self.attempts = Attempts(self.state)
        self.world = WorldEvents(self.state, self.attempts)
        self.services = Services(self.state)
        self.side = EngineSide(self.state, self.attempts, self.world, self.services)
        self.bound_base: BoundPolicies | None = None  # the policies bound as at the start
        # one job file per class of trace job (``_class_of``)
        self._classes: dict[tuple[Any, ...], tuple[Job, Request, int]] = {}
        self._class_names: dict[int, str] = {}  # a class's job file (by id) -> its priority class

    # --- the loop ----------------------------------------------------------------------------

    def run(self, progress: Progress | None = None, every: int = 1_000) -> Result:
        """Run until every job has ended, or until ``config.until_s`` (what waits or runs then
        is unfinished); ``progress(t, ended)`` is called every ``every`` events with the
        simulated time and the jobs ended so far (finished, rejected or failed)."""
        state = self.state
        clock, totals, config, jobs = state.clock, state.totals, state.config, state.jobs
        if jobs:
            clock.push(jobs[0].arrival_s, Kind.ARRIVE, Arrival(0))
        self.world.failures_start()
        for t, pool, n in config.injected_notices:
            clock.push(t, Kind.NOTICE, PoolEvent(f"{pool}#{n}"))  # resolved when it fires
        clock.push(0.0, Kind.SAMPLE, At(0.0))
        if config.tick_s:
            clock.push(0.0, Kind.CYCLE, At(0.0))
            state.next_cycle = 0.0
        handlers = self._handlers()
        last_arrival = jobs[-1].arrival_s if jobs else 0.0
        until = config.until_s
        if until is None:
            until = last_arrival + 365 * 86_400.0
        tick, last = config.tick_s, None
        repaired = max((t + r for t, _, r in config.injected_failures), default=0.0)
        while clock:
            if state.done >= len(jobs):
                if not tick:
                    break
                # on the tick, the cycle that sees the last job end runs too (the controller's),
                # and none ends before its injected failures are repaired (a service waiting
                # for a node that is down is placed when it is back)
                end = max(state.now, repaired)
                last = last if last is not None else math.ceil(end / tick - 1e-9) * tick
            t, kind, event = clock.pop()
            if t > until:  # what still waits or runs then is reported as unfinished
                self._advance(until)  # the jobs still running held their GPUs until then
                break
            if last is not None and t > last + 1e-9:
                break
            if t > state.now:
                self._advance(t)
            handlers[kind](event)
            totals.events += 1
            if progress is not None and totals.events % every == 0:
                progress(state.now, state.done)
        return self._finish_run()

    def _advance(self, t: float) -> None:
        """Time moves on to ``t``: what the services did meanwhile, then the state's clock."""
        if self.services.served:
            self.services.advance(t - self.state.now)
        self.state.advance(t)

    def _handlers(self) -> dict[Kind, Callable[[Any], None]]:
        return {
            Kind.FINISH: self.attempts.finished,
            Kind.STOP: self.attempts.stopped,
            Kind.RELEASE: self.attempts.released,
            Kind.FAIL: self.world.node_fails,
            Kind.RECLAIM: self.world.reclaim,
            Kind.REPAIR: self.world.repair,
            Kind.UP: self.world.up,
            Kind.NOTICE: self.world.notice,
            Kind.ARRIVE: self._arrive,
            Kind.WAKE: lambda _: self.state.want_cycle(),
            Kind.SAMPLE: self.world.sample,
            Kind.CYCLE: self._cycle_event,
            Kind.IDLE: self.world.idle,
        }

    def _finish_run(self) -> Result:
        state = self.state
        end_s = state.now
        self.attempts.account_unended()  # the window's end: jobs still on their nodes
        self.world.sample(None, again=False)
        last: dict[str, float] = {}  # per pool: when its last worker would go
        heads = []
        for instance in list(state.fleet.live.values()):  # billed until they would go
            node, until_s = instance.node, end_s
            if instance.offer is None:  # a pool's own head: it goes with the last worker
                heads.append(instance)
                continue
            if node is not None and not node.jobs:
                since = max(instance.launched_s, node.idle_since)
                until_s = max(until_s, since + state.idle_after(instance.pool))
            last[instance.pool] = max(last.get(instance.pool, end_s), until_s)
            state.fleet.ledger.close(instance.charge(until_s))
        for head in heads:
            since = state.fleet.head_idle_since(head)
            alone = max(end_s, since + state.idle_after(head.pool))  # no worker left
            state.fleet.ledger.close(head.charge(last.get(head.pool, alone)))
        state.totals.spend_usd = dict(state.fleet.ledger.total_usd)
        state.totals.launches = state.fleet.launches
        window = state.config.window_s
        if window is not None and window > end_s:
            state.onprem(window - end_s)  # the window's idle end counts for utilisation
        return Result(
            end_s,
            list(state.results.values()),
            state.samples,
            state.totals,
            state.cluster.onprem_gpus,
            state.actions,
            state.data.stats if state.data is not None else None,
        )

    # --- jobs arriving -------------------------------------------------------------------------

    def _class_of(self, job: SimJob) -> tuple[Job, Request, int]:
        """The job file a trace job stands for; one per (name, kind, criticality, team, shape
        and limits): jobs alike share one, and one verdict per cycle."""
        state = self.state
        key: tuple[Any, ...] = (
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
        if job.document is not None:  # replayed: its own file, shared by the same file only
            key = (_canonical(job.document, self._reads_name()),)
        found = self._classes.get(key)
        if found is None:
            c = state.config
            document = job.document or job_document(
                job, c.cpus_per_gpu, c.memory_gib_per_gpu, state.gang_domain
            )
            model = Job.model_validate(document)
            priority = 0
            if state.policies is not None:
                name, priority, _ = self._bound_at_start().priority_of(model)
                if name is not None:
                    self._class_names[id(model)] = name
            found = self._classes[key] = (model, Request.of(model), priority)
        return found

    def _reads_name(self) -> bool:
        policies = self.state.policies
        return policies is not None and (
            policies.job_fields is None or "name" in policies.job_fields
        )

    def _bound_at_start(self) -> BoundPolicies:
        state = self.state
        if self.bound_base is None:
            assert state.policies is not None
            configured = state.mesh.configured or MeshSnapshot(())
            self.bound_base = bind(state.policies, configured, state.date())
        return self.bound_base

    def _arrive(self, event: Arrival) -> None:
        state = self.state
        job = state.jobs[event.index]
        if event.index + 1 < len(state.jobs):
            nxt = state.jobs[event.index + 1]
            state.clock.push(nxt.arrival_s, Kind.ARRIVE, Arrival(event.index + 1))
        model, request, priority = self._class_of(job)
        if job.serve is not None:
            self.services.serve(job, model, request, priority)
            state.want_cycle()
            return
        state.models[job.id] = model
        state.requests[job.id] = request
        state.names[job.id] = job.class_name
        state.results[job.id] = JobResult(job, priority)
        state.results[job.id].priority_class = self._class_names.get(id(model))
        state.wait(job.id)
        if job.deadline_s is not None:
            state.deadlines[job.id] = job.deadline_s
            state.clock.push(job.deadline_s, Kind.WAKE, At(job.deadline_s))
        state.want_cycle()

    # --- a scheduling cycle --------------------------------------------------------------------

    def _cycle_event(self, event: At) -> None:
        state = self.state
        if event.t_s != state.next_cycle:
            return  # superseded by an earlier cycle
        tick = state.config.tick_s
        state.next_cycle = None
        if tick:
            state.next_cycle = state.now + tick
            state.clock.push(state.now + tick, Kind.CYCLE, At(state.now + tick))
        elif not state.pending and not self.services.served and not state.lost:
            return
        state.last_cycle = state.now
        state.totals.cycles += 1
        cycle(self.side, state.policies, state.config.scheduler)  # the one cycle
        if not tick and (state.pending or self.services.served):
            # waiting work is looked at again, services' traffic
            again = state.config.serve_every_s if self.services.served else state.config.recheck_s
            t_next = state.now + max(again, state.config.cycle_s)
            if state.next_cycle is None or state.next_cycle > t_next:
                state.next_cycle = t_next
                state.clock.push(t_next, Kind.CYCLE, At(t_next))


def simulate(
    mesh: SimMesh,
    jobs: Sequence[SimJob],
    config: SimConfig | None = None,
    policies: PolicySet | None = None,
    progress: Progress | None = None,
) -> Result:
    return Engine(mesh, jobs, config, policies).run(progress)


def _canonical(document: Mapping[str, Any], with_name: bool) -> str:
    """A job file as one string: files alike are one class (one verdict per cycle). Its
    name only where the policies read it (``job.name``): jobs that differ by name alone
    are decided alike (their runtime estimates go by ``SimJob.name``, kept apart)."""
    if not with_name:
        metadata = {k: v for k, v in document.get("metadata", {}).items() if k != "name"}
        document = {**document, "metadata": metadata}
    return json.dumps(document, sort_keys=True, default=str)
