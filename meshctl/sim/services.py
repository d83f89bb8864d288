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
from meshctl.scheduler import Request
from meshctl.sim.inference import SimServe
from meshctl.sim.jobs import JobResult
from meshctl.sim.workload import SimJob
from meshctl.sim.world import WorldEvents


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


class Services(WorldEvents):
    def _serve(self, job: SimJob, model: Job, request: Request, priority: int) -> None:
        """A service arrives: it wants its least replicas from the next cycle on."""
        assert job.serve is not None
        replicas = serving.Replicas(None, {}, serving.start(job.serve.spec), 0)
        self.services[job.id] = Served(job, job.serve, model, request, priority, replicas)
        self.results[job.id] = JobResult(job, priority)
        self.done += 1  # it never ends: the run ends with the last other job

    def _services_cycle(self) -> set[str]:
        """Each service's count from its traffic now, less its replicas on nodes down and
        those it scales in (freed now); its waiting replicas for the snapshot. The replica ids
        running or wanted (their loans stay open)."""
        borrowers = {x.borrower for x in self.loans if x.open}
        alive: dict[str, set[str]] = {}
        for node in self.cluster.nodes.values():
            if node.health != "down":
                alive.setdefault(node.base.pool, set()).add(node.name)
        self.replica_pending, self.replica_running = [], []
        active: set[str] = set()
        for job_id, served in self.services.items():
            replicas = served.replicas
            replicas.why.clear()
            if served.started_s is not None:  # deployed: Serve reports its traffic
                replicas.rescale(served.serve.spec, served.serve.ongoing(self.now), self.now)
            gone = []
            if replicas.pool is not None:
                gone += replicas.lost(alive.get(replicas.pool, set()))
            gone += replicas.scale_in(borrowers)
            for rid in gone:
                self._replica_free(rid)
            job = served.job
            started = served.started_s if served.started_s is not None else self.now
            running, pending = replicas.units(
                job_id, job.team, served.priority, served.request, started, job.arrival_s
            )
            self.replica_running += running
            self.replica_pending += pending
            for unit_id in [r.job_id for r in running] + [p.job_id for p in pending]:
                self.models[unit_id] = served.model
                active.add(unit_id)
        return active

    def _replica_action(self, action: Action) -> bool:
        """A plan's action for a replica, carried out on its service; False: not a replica's."""
        if not isinstance(action, Start | Leave | Launch):
            return False
        owner = serving.service_of(action.job_id)
        served = self.services.get(owner) if owner is not None else None
        if served is None:
            return False
        if isinstance(action, Launch):
            return True  # services do not burst: it waits on the mesh
        self._record(action)
        if isinstance(action, Start):
            alloc = action.allocations[0]
            served.replicas.add(action.job_id, action.pool, alloc)
            self.replica_allocs[action.job_id] = alloc
            self.cluster.hold(self.cluster.nodes[alloc.node], action.job_id, alloc, 1.0)
            self.cluster.busy[action.pool] += served.gpus()
            if served.started_s is None:
                served.started_s = self.now
                self.results[served.job.id].first_start_s = self.now
            # as every replica is seen: running since the service's first (its one attempt)
            self.backlog.run(action.job_id, action.pool, None, served.gpus(), served.started_s)
            served.placed_s.append(self.now)
            served.up_since[action.job_id] = self.now
        elif isinstance(action, Leave):
            self._replica_free(action.job_id, action.reason)
        return True

    def _replica_free(self, rid: str, why: str | None = None) -> None:
        """A replica gone (scaled in, preempted, its node down): its GPUs are free now."""
        owner = serving.service_of(rid)
        assert owner is not None
        served = self.services[owner]
        alloc = self.replica_allocs.pop(rid, None)
        served.up_since.pop(rid, None)
        if why is not None:
            served.replicas.remove(rid, why)
        self.models.pop(rid, None)
        self.backlog.stop(rid)
        if alloc is None:
            return
        node = self.cluster.nodes.get(alloc.node)
        if node is not None:
            self.cluster.hold(node, rid, alloc, -1.0)
        self.cluster.busy[served.replicas.pool or ""] -= served.gpus()
        self._want_cycle()

    def _advance(self, t: float) -> None:
        if self.services and t > self.now:
            self._services_advance(t - self.now)
        super()._advance(t)

    def _services_advance(self, dt_s: float) -> None:
        """What the services did over the next ``dt_s``: GPU-seconds held, and serving (the
        requests in flight now, at most ``target`` a replica, on replicas past their start)."""
        for served in self.services.values():
            if not served.up_since:
                continue
            gpus, start_s = served.gpus(), served.serve.start_s
            ready = sum(1 for t in served.up_since.values() if t + start_s <= self.now)
            busy = min(float(ready), served.serve.ongoing(self.now) / served.serve.spec.target)
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
