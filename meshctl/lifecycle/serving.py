"""How many replicas a service wants, from the traffic it sees: the controller reads it from
Ray Serve every cycle, the simulator from its inference model; both decide here.

Like Serve's own autoscaler, the count aims at ``target_ongoing_requests`` per replica:
``ceil(ongoing / target)``, within the service's min and max, where ``ongoing`` counts the
requests in flight at its replicas and those queued for them. It scales out once that has
stayed above the current count for ``upscale_delay``, and in once it has stayed below for
``downscale_delay`` (to the highest count wanted over that time, so a dip does not drop
replicas a burst in the same window needed).

A service's replicas (``Replicas``) are units of the scheduler's own: each holds the job's
resources on one node and is placed, preempted and explained like a one-node job
(``<job>/r<n>``) in the pool of the service's other replicas. Scaling in lets the replicas that
borrowed GPUs go first, newest first, so their lenders grow back; a replica whose node went
down goes and is wanted again.

Pure: times are seconds passed in.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from meshctl.scheduler import Allocation, Pending, Request, Running


@dataclass(frozen=True, slots=True)
class ServeSpec:
    least: int
    most: int
    target: float  # ongoing requests per replica
    upscale_delay_s: float
    downscale_delay_s: float


@dataclass(frozen=True, slots=True)
class Scaling:
    """A service's count and since when traffic has asked for more (or fewer)."""

    replicas: int
    above_since_s: float | None = None
    below_since_s: float | None = None
    most_below: int = 0  # the most replicas wanted since below_since_s


def wanted(spec: ServeSpec, ongoing: float) -> int:
    """Replicas the traffic asks for now, within the service's range."""
    need = math.ceil(ongoing / spec.target - 1e-9) if ongoing > 0 else 0
    return max(spec.least, min(spec.most, need))


def start(spec: ServeSpec) -> Scaling:
    return Scaling(spec.least)


def scale(spec: ServeSpec, now: Scaling, ongoing: float, now_s: float) -> Scaling:
    """The count after seeing ``ongoing`` requests at ``now_s``."""
    want = wanted(spec, ongoing)
    if want > now.replicas:
        since = now.above_since_s if now.above_since_s is not None else now_s
        if now_s - since >= spec.upscale_delay_s:
            return Scaling(want)
        return Scaling(now.replicas, above_since_s=since)
    if want < now.replicas:
        since = now.below_since_s if now.below_since_s is not None else now_s
        most = max(want, now.most_below) if now.below_since_s is not None else want
        if now_s - since >= spec.downscale_delay_s:
            return Scaling(most)
        return Scaling(now.replicas, below_since_s=since, most_below=most)
    return Scaling(now.replicas)


# --- a service's replicas, as units of the scheduler -------------------------------------------

SEP = "/r"  # a replica's id: "<job>/r<n>"


def replica_id(job_id: str, number: int) -> str:
    return f"{job_id}{SEP}{number}"


def service_of(unit_id: str) -> str | None:
    """The service a replica id belongs to; None for a job's own id."""
    job, sep, number = unit_id.rpartition(SEP)
    return job if sep and number.isdigit() else None


@dataclass
class Replicas:
    """A service's replicas through one cycle: where each runs (in the order placed), its
    count and scaling, the next replica's number, and what changed (``why``)."""

    pool: str | None
    placed: dict[str, Allocation]  # replica id -> where
    scaling: Scaling
    next_replica: int
    why: list[str] = field(default_factory=list)

    def rescale(self, spec: ServeSpec, ongoing: float, now_s: float) -> None:
        """The count after the traffic seen now; the replicas over it go (``scale_in``)."""
        before = self.scaling.replicas
        self.scaling = scale(spec, self.scaling, ongoing, now_s)
        after = self.scaling.replicas
        if after != before:
            way = "out" if after > before else "in"
            self.why.append(
                f"scaled {way} to {after}: {ongoing:g} requests in flight, "
                f"target {spec.target:g} a replica"
            )

    def scale_in(self, borrowers: Collection[str]) -> list[str]:
        """Down to the count wanted: the replicas that borrowed GPUs go first (their lenders
        grow back), then the newest. The ids gone."""
        extra = len(self.placed) - self.scaling.replicas
        if extra <= 0:
            return []
        order = list(self.placed)  # oldest first
        going = sorted(order, key=lambda rid: (rid not in borrowers, -order.index(rid)))[:extra]
        for rid in going:
            del self.placed[rid]
        self.why.append(f"replicas {', '.join(going)} gone")
        return going

    def lost(self, alive: Collection[str]) -> list[str]:
        """Replicas on nodes no longer up (failed, taken back): gone, wanted again."""
        going = [rid for rid, alloc in self.placed.items() if alloc.node not in alive]
        for rid in going:
            del self.placed[rid]
            self.why.append(f"replica {rid} gone: its node is down")
        return going

    def add(self, unit_id: str, pool: str, allocation: Allocation) -> None:
        """A replica the scheduler placed."""
        self.placed[unit_id] = allocation
        self.pool = self.pool or pool
        taken = self._numbers()
        while self.next_replica in taken:  # the lowest number never placed, or waiting
            self.next_replica += 1
        self.why.append(f"replica {unit_id} on {allocation.node}")

    def _numbers(self) -> set[int]:
        return {int(rid.rpartition(SEP)[2]) for rid in self.placed}

    def waiting(self, job_id: str) -> list[str]:
        """The ids of the replicas wanted besides those placed: from ``next_replica`` up,
        skipping those placed, so that a replica keeps its id from cycle to cycle until it is
        placed (a loan names its borrower by it) whichever of them is placed first."""
        taken, number = self._numbers(), self.next_replica
        out: list[str] = []
        while len(out) < self.scaling.replicas - len(self.placed):
            if number not in taken:
                out.append(replica_id(job_id, number))
            number += 1
        return out

    def remove(self, unit_id: str, why: str) -> bool:
        """A replica preempted or evicted: it goes at once (Serve drains it)."""
        if self.placed.pop(unit_id, None) is None:
            return False
        self.why.append(f"replica {unit_id} gone: {why}")
        return True

    def units(
        self, job_id: str, team: str, priority: int, request: Request, started_s: float,
        submitted_s: float,
    ) -> tuple[list[Running], list[Pending]]:  # fmt: skip
        """Its replicas as the scheduler sees them: those placed, running (no expected end,
        no checkpoints); those wanted besides, waiting in the pool of the others (the first: in
        any on-prem pool; services do not burst)."""
        running = []
        for rid, alloc in self.placed.items():
            assert self.pool is not None
            running.append(Running(rid, team, priority, self.pool, (alloc,), request, started_s))
        pending = [
            Pending(
                rid,
                team,
                priority,
                request,
                submitted_s,
                only_pool=self.pool,
                onprem_only=True,
            )
            for rid in self.waiting(job_id)
        ]
        return running, pending
