"""The simulator's clock: a virtual time and a heap of typed events.

An event on the heap is ``(time, kind, sequence, payload)``. Ties at one instant go by kind,
in the order of ``Kind``: what ends work first (completions, stops, releases, failures,
reclaims), then what brings capacity (repairs, cloud nodes joining), notices, arrivals,
wake-ups, samples, the scheduling cycle (so it sees everything that happened at that
instant), and idle checks last (so a node the cycle could use at that instant is not torn
down first); then by the order events were made. Payloads are small frozen values, one type
per kind.

Why a hand-written loop and not SimPy: SimPy wraps every event in objects, callbacks and
generator resumptions; ``benchmarks/sim_speed.py`` runs the same events through both.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meshctl.sim.core.nodes import Instance


class Kind(IntEnum):
    FINISH = 0  # a job's attempt has done its work
    STOP = 1  # a leaving job stops working (the end of a grace or notice; a stop sent)
    RELEASE = 2  # a stopped job's GPUs are free again (the stop has been seen)
    FAIL = 3  # a node fails
    RECLAIM = 4  # a spot instance is taken back
    REPAIR = 5  # a failed node is back
    UP = 6  # a launched cloud instance has joined its pool
    NOTICE = 7  # a spot instance is given notice
    ARRIVE = 8  # a job arrives
    WAKE = 9  # a cycle is due (a deadline, a maximum runtime)
    SAMPLE = 10  # a sample for the charts
    CYCLE = 11  # a scheduling cycle
    IDLE = 12  # a cloud pool's idle instances are looked at


@dataclass(frozen=True, slots=True)
class JobEvent:
    """FINISH, STOP and RELEASE: about one attempt of a job (``token`` tells attempts
    apart: an event for an attempt that has ended is ignored)."""

    job_id: str
    token: int


@dataclass(frozen=True, slots=True)
class NodeFails:
    """FAIL: ``node`` fails and is repaired ``repair_s`` later. ``chain``: the failure
    model's event it is (a later failure supersedes it), None for an injected one."""

    node: str
    repair_s: float
    chain: int | None


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """REPAIR: about one on-prem node."""

    node: str


@dataclass(frozen=True, slots=True)
class InstanceEvent:
    """UP, NOTICE, RECLAIM: about one cloud instance."""

    instance: Instance


@dataclass(frozen=True, slots=True)
class Arrival:
    """ARRIVE: the ``index``-th job in arrival order."""

    index: int


@dataclass(frozen=True, slots=True)
class At:
    """CYCLE, WAKE, SAMPLE: at a moment (a superseded cycle is ignored)."""

    t_s: float


@dataclass(frozen=True, slots=True)
class PoolEvent:
    """IDLE: about one cloud pool."""

    pool: str


Event = JobEvent | NodeFails | NodeEvent | InstanceEvent | Arrival | At | PoolEvent


class Clock:
    """Virtual time and the events ahead of it."""

    __slots__ = ("heap", "now", "on_push", "seq")

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[tuple[float, Kind, int, Event]] = []
        self.seq = 0
        self.on_push: Callable[[float, Kind], None] | None = None  # for the benchmark's replay

    def push(self, t: float, kind: Kind, event: Event) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, event))
        if self.on_push is not None:
            self.on_push(t, kind)

    def pop(self) -> tuple[float, Kind, Event]:
        t, kind, _, event = heapq.heappop(self.heap)
        return t, kind, event

    def __bool__(self) -> bool:
        return bool(self.heap)
