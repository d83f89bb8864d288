"""Services: inference jobs with a ``serve`` section, run as Ray Serve applications whose
replicas meshctl places. Pure, like ``decide``.

A service's replicas are units of the scheduler's own: each one holds the job's resources
on one node and is placed, preempted, evicted and explained like a one-node job
(``<job>/r<n>``), in the pool of the service's other replicas. How many it wants follows its
traffic (``meshctl.lifecycle.serving``: ongoing requests per replica against its target,
after the upscale or downscale delay), read from Serve every cycle (``World.serve``). A
replica that finds no free GPU borrows from elastic training as policy allows (a loan, whose
borrower is the replica); scaling in lets the borrowed replicas go first, newest first, so
their lenders grow back.

The service's one attempt (its number 1) records its replicas (``AttemptDetail``:
allocations and ``replica_ids`` in step) and its scaling; ``ServiceChange`` rewrites them.
The job is ``admitted`` once it has a replica, ``running`` once Serve says the application
runs. The apply side (``serving_apply.py``) deploys every service of a pool to its cluster
whenever what they hold changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from meshctl.controller.deciding.dispatch import held_of
from meshctl.controller.deciding.nodes import allocation_of
from meshctl.controller.deciding.step import ServiceChange, Step, Transition
from meshctl.controller.deciding.world import JobView, ServeSeen, request_of
from meshctl.lifecycle import Launch, Leave, Start, serving
from meshctl.model.job import Serve
from meshctl.scheduler import Pending, Running
from meshctl.scheduler.plan import Decision
from meshctl.state.records import JobState

SEP, replica_id, service_of = serving.SEP, serving.replica_id, serving.service_of


def spec_of(serve: Serve) -> serving.ServeSpec:
    return serving.ServeSpec(
        serve.replicas.min,
        serve.replicas.max,
        serve.target_ongoing_requests,
        serve.upscale_delay,
        serve.downscale_delay,
    )


@dataclass
class Service(serving.Replicas):
    """One service through one cycle: its replicas (``serving.Replicas``: where they run,
    the count, what changed) and the view and Serve's word they come from."""

    view: JobView = field(kw_only=True)
    serving: dict[str, Any] = field(default_factory=dict)  # what Serve last said of it

    @property
    def job_id(self) -> str:
        return self.view.record.id

    def change(self) -> ServiceChange:
        assert self.pool is not None
        held = tuple(held_of(a) for a in self.placed.values())
        return ServiceChange(
            self.job_id,
            self.pool,
            held,
            tuple(self.placed),
            self.scaling.replicas,
            self.scaling,
            self.next_replica,
            "; ".join(self.why),
            self.serving,
        )


@dataclass
class Units:
    """The services' replicas as the scheduler sees them, and the views their ids stand for."""

    services: dict[str, Service] = field(default_factory=dict)
    running: list[Running] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    views: dict[str, JobView] = field(default_factory=dict)  # replica id -> its service

    @property
    def active(self) -> set[str]:
        """Replicas running or wanted: their loans stay open."""
        return {r.job_id for r in self.running} | {p.job_id for p in self.pending}


def units(
    views: Sequence[JobView],
    seen: Mapping[str, ServeSeen],
    lent_to: Iterable[str],
    now_s: float,
    names: Mapping[str, Mapping[str, str]] | None = None,
    taken: Mapping[str, set[str]] | None = None,
    alive: Mapping[str, set[str]] | None = None,
) -> Units:
    """Each service's count after its traffic, its replicas (less those it scales in: the
    borrowed ones first, newest first; less those on nodes no longer up in a pool ``alive``
    names) and those it still wants, as scheduler units."""
    out, borrowers = Units(), set(lent_to)
    for view in views:
        serve = view.job.spec.serve
        assert serve is not None
        service = _service(view)
        spec = spec_of(serve)
        reading = seen.get(view.record.id)
        if reading is not None:
            service.serving = _said(reading)
            where = (names or {}).get(service.pool or "", {})
            others = (taken or {}).get(service.pool or "", set())
            _follow(service, [where[i] for i in reading.nodes if i in where], others)
        if reading is not None and reading.ongoing is not None:
            service.rescale(spec, reading.ongoing, now_s)
        if service.pool is not None and alive is not None and service.pool in alive:
            service.lost(alive[service.pool])
        service.scale_in(borrowers)
        out.services[service.job_id] = service
        record = view.record
        started = view.attempt.started_at_s if view.attempt else None
        running, pending = service.units(
            record.id, record.team, record.priority, request_of(view),
            started if started is not None else now_s, record.submitted_at_s,
        )  # fmt: skip
        out.running += running
        out.pending += pending
        out.views.update({r.job_id: view for r in running})
        out.views.update({p.job_id: view for p in pending})
    return out


def _said(reading: ServeSeen) -> dict[str, Any]:
    """What ``jobs show`` gives of Serve's word, rounded so a cycle writes only news."""

    def r(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "status": reading.status,
        "message": reading.message,
        "running": reading.running,
        "in_flight": r(reading.ongoing, 1),
        "rps": r(reading.rps, 1),
        "p50_ms": r(reading.p50_ms, 0),
        "p99_ms": r(reading.p99_ms, 0),
    }


def _service(view: JobView) -> Service:
    attempt = view.attempt
    serve = view.job.spec.serve
    assert serve is not None
    if attempt is None:
        return Service(None, {}, serving.start(spec_of(serve)), 0, view=view)
    detail = attempt.detail
    replicas = {
        rid: allocation_of(held)
        for rid, held in zip(detail.replica_ids, detail.allocations, strict=False)
    }
    wanted = detail.replicas_wanted if detail.replicas_wanted is not None else serve.replicas.min
    scaling = serving.Scaling(wanted, detail.above_since_s, detail.below_since_s, detail.most_below)
    return Service(
        attempt.pool, replicas, scaling, detail.next_replica, view=view,
        serving=dict(detail.serving),
    )  # fmt: skip


def _follow(service: Service, running_on: Sequence[str], others: set[str]) -> None:
    """Replicas where Serve runs them: once as many run as meshctl placed, a replica placed
    on a node where none runs moves to one where one runs that meshctl did not place (Ray put
    it on another free GPU of the cluster, or Serve let a different one go when scaling in),
    unless that node is held by another job (``others``): then Ray's count of that node's
    GPUs is not meshctl's (emulated GPUs, a CPU-only worker) and meshctl's placement stands."""
    if not running_on or len(running_on) != len(service.placed):
        return
    left = [n for n in running_on if n not in others]
    for alloc in service.placed.values():
        if alloc.node in left:
            left.remove(alloc.node)
    for rid, alloc in list(service.placed.items()):
        if alloc.node in running_on or not left:
            continue
        node = left.pop(0)
        service.placed[rid] = replace(alloc, node=node)
        service.why.append(f"replica {rid} runs on {node}, not {alloc.node}")


def transitions(services: Iterable[Service], seen: Mapping[str, ServeSeen]) -> list[Transition]:
    """A service with replicas is admitted; running once Serve says so; back to admitted
    never (Serve's own status is what ``jobs show`` gives)."""
    out = []
    for service in services:
        state = service.view.record.state
        if state in (JobState.PENDING, JobState.REQUEUED) and service.placed:
            first = next(iter(service.placed.values())).node
            out.append(
                Transition(service.job_id, JobState.ADMITTED, f"replica on {first}", service.pool)
            )
        reading = seen.get(service.job_id)
        if state is JobState.ADMITTED and reading is not None and reading.status == "RUNNING":
            out.append(Transition(service.job_id, JobState.RUNNING, "Serve runs it"))
    return out


def changed(service: Service) -> bool:
    """Whether its record must be written: replicas, count or scaling moved."""
    attempt = service.view.attempt
    if service.pool is None:
        return False
    if attempt is None:
        return bool(service.placed)
    d = attempt.detail
    now = (
        tuple(service.placed),
        tuple(held_of(a) for a in service.placed.values()),
        service.scaling.replicas,
        service.scaling.above_since_s,
        service.scaling.below_since_s,
        service.scaling.most_below,
        service.next_replica,
        service.serving,
    )
    was = (
        d.replica_ids,
        d.allocations,
        d.replicas_wanted,
        d.above_since_s,
        d.below_since_s,
        d.most_below,
        d.next_replica,
        dict(d.serving),
    )
    return now != was


def carry(action: Start | Leave | Launch, units: Units) -> bool:
    """A plan's action for a replica, carried out on its service; False: not a replica's.
    Services do not burst: a launch for a replica is dropped (it waits on the mesh)."""
    owner = service_of(action.job_id)
    service = units.services.get(owner) if owner is not None else None
    if service is None:
        return False
    if isinstance(action, Start):
        service.add(action.job_id, action.pool, action.allocations[0])
    elif isinstance(action, Leave):
        service.remove(action.job_id, action.reason)
    return True


def settle(units: Units, seen: Mapping[str, ServeSeen], step: Step) -> None:
    """What the cycle made of the services, into the step: their records, their states."""
    for service in units.services.values():
        if changed(service):
            step.services.append(service.change())
    step.transitions += transitions(units.services.values(), seen)


def decisions(found: Iterable[Decision], units: Units) -> list[Decision]:
    """The plan's decisions, a service's under its own id: the first of its replicas that
    is not placed says why the service waits for it."""
    out, said = [], set()
    for decision in found:
        owner = service_of(decision.job_id)
        if owner is None or owner not in units.services:
            out.append(decision)
        elif decision.status != "placed" and owner not in said:
            said.add(owner)
            out.append(replace(decision, job_id=owner))
    return out
