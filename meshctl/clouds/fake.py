"""A deterministic cloud in memory, for unit tests and the simulator.

It keeps the same contract as the real providers (the contract suite runs against all three)
and can be told to fail: ``stock_out(zone)`` makes launches there fail for lack of capacity,
``over_quota(zone)`` for lack of quota, ``throttle(n)`` makes the next ``n`` calls throttled
(retried by ``with_backoff`` like the SDKs' retries), ``refuse(reason)`` refuses the
credentials (``check`` and ``launch`` answer an ``auth`` error, listing raises) until
``accept()``; ``refuse(reason, launches=True)`` only launches (allowed to read, not to
run); ``notice(id)`` gives a spot instance notice (``interrupting``) and ``interrupt(id)``
takes it back (``preempted``). Instance ids and times are deterministic: ``f-<n>``, and the
clock passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from meshctl.clouds.base import (
    CloudError,
    Instance,
    LaunchRequest,
    LaunchResult,
    labels_of,
    launch_in_zones,
    with_backoff,
)


class Throttled(Exception):
    pass


class Refused(Exception):
    """The fake's credentials were refused (as an SDK raises on an authentication error)."""


class FakeCloud:
    provider = "fake"
    notice_s = 120.0

    def __init__(self, clock: Callable[[], float] = lambda: 0.0) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._instances: dict[str, Instance] = {}
        self._next = 0
        self._stocked_out: set[str] = set()
        self._over_quota: set[str] = set()
        self._throttles = 0
        self._refused: str | None = None
        self._launches_refused: str | None = None
        self.calls = 0

    # --- faults -------------------------------------------------------------------------------

    def stock_out(self, zone: str) -> None:
        self._stocked_out.add(zone)

    def over_quota(self, zone: str) -> None:
        self._over_quota.add(zone)

    def throttle(self, calls: int) -> None:
        self._throttles = calls

    def refuse(
        self, reason: str = "AuthFailure: the credentials were refused", launches: bool = False
    ) -> None:
        if launches:
            self._launches_refused = reason
        else:
            self._refused = reason

    def accept(self) -> None:
        self._refused = self._launches_refused = None

    def notice(self, instance_id: str) -> None:
        with self._lock:
            self._instances[instance_id] = replace(
                self._instances[instance_id], state="interrupting"
            )

    def interrupt(self, instance_id: str) -> None:
        with self._lock:
            self._instances[instance_id] = replace(self._instances[instance_id], state="preempted")

    # --- the interface ------------------------------------------------------------------------

    def list_instances(self, mesh: str) -> list[Instance]:
        def read() -> list[Instance]:
            self._call()
            return [
                i
                for i in self._instances.values()
                if i.labels.get("mesh") == mesh and i.state != "terminated"
            ]

        return with_backoff(read, _is_throttled, sleep=lambda _: None)

    def check(self) -> CloudError | None:
        self.calls += 1
        return CloudError("auth", self._refused) if self._refused else None

    def launch(self, request: LaunchRequest) -> LaunchResult:
        refused = self._refused or self._launches_refused
        if refused:
            return LaunchResult((), (CloudError("auth", refused),))
        with self._lock:
            mine = [i for i in self._instances.values() if i.request_id == request.request_id]
            if mine:
                return LaunchResult(tuple(mine))
        return launch_in_zones(request, lambda zone: self._launch_in(request, zone))

    def terminate(self, ids: Sequence[str], request_id: str) -> list[CloudError]:
        if self._refused:
            return [CloudError("auth", self._refused)]

        def stop() -> None:
            self._call()
            for instance_id in ids:
                found = self._instances.get(instance_id)
                if found is not None:
                    self._instances[instance_id] = replace(found, state="terminated")

        with_backoff(stop, _is_throttled, sleep=lambda _: None)
        return []

    # --- inside -------------------------------------------------------------------------------

    def _launch_in(
        self, request: LaunchRequest, zone: str
    ) -> tuple[list[Instance], CloudError | None]:
        try:
            with_backoff(self._call, _is_throttled, sleep=lambda _: None)
        except Throttled:
            return [], CloudError("throttled", "request limit exceeded", zone)
        if zone in self._stocked_out:
            return [], CloudError("capacity", f"no {request.node_type} capacity in {zone}", zone)
        if zone in self._over_quota:
            return [], CloudError("quota", f"GPU quota exhausted in {zone}", zone)
        made = []
        with self._lock:
            for _ in range(request.count):
                self._next += 1
                instance = Instance(
                    id=f"f-{self._next}",
                    pool=request.pool,
                    node_type=request.node_type,
                    zone=zone,
                    state="running",
                    spot=request.spot,
                    request_id=request.request_id,
                    launched_at_s=self.clock(),
                    address=f"10.0.0.{self._next}",
                    labels=labels_of(request),
                )
                self._instances[instance.id] = instance
                made.append(instance)
        return made, None

    def _call(self) -> None:
        self.calls += 1
        if self._refused:
            raise Refused(self._refused)
        if self._throttles > 0:
            self._throttles -= 1
            raise Throttled()


def _is_throttled(err: Exception) -> bool:
    return isinstance(err, Throttled)
