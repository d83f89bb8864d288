"""Services in the simulation: an inference job with a ``serve`` model (``SimServe``: its
replica range, target and delays, the time a request takes, its traffic) runs as replicas the
scheduler places one by one, exactly as the controller runs them (``meshctl.controller
.services``), through the lifecycle's ``serving.Replicas``.

Every cycle, before the snapshot: the count follows the requests in flight the traffic gives
now (``serving.scale``, its delays; once its first replica was placed, as Serve reports the
traffic of an application deployed), replicas whose node is down go, and scaling in lets the
borrowed replicas go first, newest first (their loans close in the same cycle, so the lenders
grow back in it). The replicas placed are running units (no expected end, no checkpoints),
started when the service's first replica was; those wanted besides wait in the pool of the
others. A replica the plan places holds its node from then on; one it preempts goes at once
(Serve drains it), as the controller removes it. A replica's launch is dropped: services do
not burst.

A service never ends: it counts as done when it arrives, so the run ends with the last other
job (on the controller's tick, not before the injected failures are repaired: a service whose
only node is down when it arrives is placed when the node is back). What it did is kept
per service (``Served``): GPU-seconds held and serving requests, and when each replica was
placed (the report's surge-to-serving).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meshctl.lifecycle import serving
from meshctl.lifecycle.actions import Action, Launch, Leave, Start
from meshctl.model.job import Job
from meshctl.scheduler import Allocation, Pending, Request, Running
from meshctl.sim.core.inference import SimServe
from meshctl.sim.core.jobs import JobResult
from meshctl.sim.core.runstate import RunState
from meshctl.sim.core.workload import SimJob


@dataclass
class Served:
    """One service in the run: its replicas through the lifecycle, and what it did."""

    job: SimJob
    serve: SimServe
    model: Job
    request: Request
    priority: int
    replicas: serving.Replicas
    started_s: float | None = None  # its first replica placed
    placed_s: list[float] = field(default_factory=list)  # every replica placed, when
    up_since: dict[str, float] = field(default_factory=dict)  # replicas up: when placed
    held_gpu_s: float = 0.0  # replicas up
    serving_gpu_s: float = 0.0  # replicas busy with requests

    def gpus(self) -> float:
        return self.request.total_gpus


class Services:
    """The run's services (``served``, by job id) and their replicas this cycle: placed
    (``replica_running``, each placed where ``replica_allocs`` says) and wanted
    (``replica_pending``)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.served: dict[str, Served] = {}
        self.replica_running: list[Running] = []
        self.replica_pending: list[Pending] = []
        self.replica_allocs: dict[str, Allocation] = {}

    def serve(self, job: SimJob, model: Job, request: Request, priority: int) -> None:
        """A service arrives: it wants its least replicas from the next cycle on."""
        assert job.serve is not None
        replicas = serving.Replicas(None, {}, serving.start(job.serve.spec), 0)
        self.served[job.id] = Served(job, job.serve, model, request, priority, replicas)
        self.state.results[job.id] = JobResult(job, priority)
        self.state.done += 1  # it never ends: the run ends with the last other job

    def cycle(self) -> set[str]:
        """Each service's count from its traffic now, less its replicas on nodes down and
        those it scales in (freed now); its waiting replicas for the snapshot. The replica ids
        running or wanted (their loans stay open)."""
        state = self.state
        borrowers = {x.borrower for x in state.loans if x.open}
        alive: dict[str, set[str]] = {}
        for node in state.cluster.nodes.values():
            if node.health != "down":
                alive.setdefault(node.base.pool, set()).add(node.name)
        self.replica_pending, self.replica_running = [], []
        active: set[str] = set()
        for job_id, served in self.served.items():
            replicas = served.replicas
            replicas.why.clear()
            if served.started_s is not None:  # deployed: Serve reports its traffic
                replicas.rescale(served.serve.spec, served.serve.ongoing(state.now), state.now)
            gone = []
            if replicas.pool is not None:
                gone += replicas.lost(alive.get(replicas.pool, set()))
            gone += replicas.scale_in(borrowers)
            for rid in gone:
                self._replica_free(rid)
            job = served.job
            started = served.started_s if served.started_s is not None else state.now
            running, pending = replicas.units(
                job_id, job.team, served.priority, served.request, started, job.arrival_s
            )
            self.replica_running += running
            self.replica_pending += pending
            for unit_id in [r.job_id for r in running] + [p.job_id for p in pending]:
                state.models[unit_id] = served.model
                active.add(unit_id)
        return active

    def replica_action(self, action: Action) -> bool:
        """A plan's action for a replica, carried out on its service; False: not a replica's."""
        state = self.state
        if not isinstance(action, Start | Leave | Launch):
            return False
        owner = serving.service_of(action.job_id)
        served = self.served.get(owner) if owner is not None else None
        if served is None:
            return False
        if isinstance(action, Launch):
            return True  # services do not burst: it waits on the mesh
        state.record(action)
        if isinstance(action, Start):
            alloc = action.allocations[0]
            served.replicas.add(action.job_id, action.pool, alloc)
            self.replica_allocs[action.job_id] = alloc
            state.cluster.hold(state.cluster.nodes[alloc.node], action.job_id, alloc, 1.0)
            state.cluster.busy[action.pool] += served.gpus()
            if served.started_s is None:
                served.started_s = state.now
                state.results[served.job.id].first_start_s = state.now
            # as every replica is seen: running since the service's first (its one attempt)
            state.backlog.run(action.job_id, action.pool, None, served.gpus(), served.started_s)
            served.placed_s.append(state.now)
            served.up_since[action.job_id] = state.now
        elif isinstance(action, Leave):
            self._replica_free(action.job_id, action.reason)
        return True

    def _replica_free(self, rid: str, why: str | None = None) -> None:
        """A replica gone (scaled in, preempted, its node down): its GPUs are free now."""
        state = self.state
        owner = serving.service_of(rid)
        assert owner is not None
        served = self.served[owner]
        alloc = self.replica_allocs.pop(rid, None)
        served.up_since.pop(rid, None)
        if why is not None:
            served.replicas.remove(rid, why)
        state.models.pop(rid, None)
        state.backlog.stop(rid)
        if alloc is None:
            return
        node = state.cluster.nodes.get(alloc.node)
        if node is not None:
            state.cluster.hold(node, rid, alloc, -1.0)
        state.cluster.busy[served.replicas.pool or ""] -= served.gpus()
        state.want_cycle()

    def advance(self, dt_s: float) -> None:
        """What the services did over the next ``dt_s``: GPU-seconds held, and serving (the
        requests in flight now, at most ``target`` a replica, on replicas past their start)."""
        for served in self.served.values():
            if not served.up_since:
                continue
            gpus, start_s = served.gpus(), served.serve.start_s
            ready = sum(1 for t in served.up_since.values() if t + start_s <= self.state.now)
            busy = min(
                float(ready), served.serve.ongoing(self.state.now) / served.serve.spec.target
            )
            served.held_gpu_s += len(served.up_since) * gpus * dt_s
            served.serving_gpu_s += busy * gpus * dt_s


def surge_to_serving(served: Served) -> list[float]:
    """Per surge: from its start to the first replica placed during it serving (placed, then
    its start-up); surges that needed no new replica are not counted."""
    out = []
    for surge in served.serve.traffic.surges:
        end = surge.start_s + surge.duration_s
        first = next((t for t in served.placed_s if surge.start_s <= t < end), None)
        if first is not None:
            out.append(first + served.serve.start_s - surge.start_s)
    return out
