"""What the controller last saw of each pool and node, kept in the store: a ``PoolRecord`` per
pool of the mesh (observed nodes and GPUs, spend this month, whether it can be used now and
why not) and a ``NodeRecord`` per node (resources, labels, failures counted, health: unhealthy
and back), written only when something changed; and a ``policy.error`` event per job and rule
failure, once."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from meshctl.controller.burst import Burst
from meshctl.controller.deciding.step import NodeChange, RuleError
from meshctl.controller.deciding.world import World
from meshctl.model.mesh import Mesh
from meshctl.pools.observed import ObservedNode
from meshctl.state.records import Event, NodeDetail, NodeRecord, NodeState, PoolRecord
from meshctl.state.store import ConflictError, NotFoundError, Store, StoreError


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._nodes_seen: dict[str, tuple[object, ...]] = {}
        self._rule_errors: dict[str, set[tuple[str, ...]]] = {}  # job -> failures told

    def rule_error(self, failed: RuleError, now: float) -> None:
        """A ``policy.error`` event, once per job and distinct failure (also across a restart
        of the controller: what it told before is in the store)."""
        fields = ("rule", "origin", "part", "pool", "message")
        key = (failed.rule, failed.origin, failed.part, failed.pool or "", failed.message)
        told = self._rule_errors.get(failed.job_id)
        if told is None:
            told = self._rule_errors[failed.job_id] = {
                tuple(str(e.data.get(k) or "") for k in fields)
                for e in self.store.events(job_id=failed.job_id)
                if e.kind == "policy.error"
            }
        if key in told:
            return
        told.add(key)
        where = f", pool {failed.pool}" if failed.pool else ""
        message = (
            f"rule {failed.rule} ({failed.origin}, {failed.part}{where}) could not be "
            f"evaluated: {failed.message}"
        )
        data = {"rule": failed.rule, "origin": failed.origin, "part": failed.part,
                "pool": failed.pool, "message": failed.message}  # fmt: skip
        self.store.append_event(Event(now, "policy.error", failed.job_id, message, data))

    def record(
        self,
        world: World,
        mesh: Mesh,
        burst: Burst | None,
        now: float,
        refusing: Mapping[str, str] | None = None,
    ) -> None:
        """A record per pool: what was observed, spend this month, and whether it can be used
        now (``available``, and the ``reason`` it cannot). A pool that answers but could not
        take its last submission (``refusing``: its head's job agent away, a server error)
        is ``degraded``, its words the record's ``error``, until it takes one again."""
        ledger = burst.ledger(now) if burst is not None else None
        refusing = refusing or {}
        spend = ledger.by_pool if ledger is not None else {}
        names = [p.name for p in mesh.spec.pools]
        for name in names + [n for n in world.pools if n not in names]:
            pool, seen = mesh.pool(name), world.pools.get(name)
            provider = pool.provider if pool else "ray"
            why = world.pool_unavailable.get(name)
            observed: dict[str, Any] = {"nodes": 0, "gpus": 0}
            state = "not up" if provider == "local" else "idle"  # a cloud pool: none launched
            if seen is not None:
                observed = {
                    "reachable": seen.reachable,
                    "error": seen.error,
                    "nodes": len([n for n in seen.nodes if not n.head]),
                    "gpus": sum(n.gpus for n in seen.nodes if n.alive),
                }
                state = "up" if seen.reachable else "down"
                if seen.reachable and name in refusing:
                    state, observed["error"] = "degraded", refusing[name]
            if name in spend:  # cloud pools: spend whether or not they are up now
                observed["spend_usd"] = round(spend[name], 6)
                observed["spend_usd_by_team"] = _rounded(ledger.of_pool(name) if ledger else {})
            observed |= {"available": why is None, "reason": why}
            self._upsert(PoolRecord(name, provider, state, observed, now))
            for node in seen.nodes if seen is not None else ():
                if not node.head:
                    self._node(name, node, now)

    def node_health(self, change: NodeChange, now: float) -> None:
        """A node's health signal changed (``decide``): ``unhealthy`` remembers the state the
        operator had it at and counts a new failure; healthy again, it goes back to that."""
        record = self.store.get(NodeRecord, change.node)
        if record is None or record.state == change.state:
            return
        detail, state = record.detail, change.state
        if change.state == NodeState.UNHEALTHY:
            new = detail.reason != change.reason  # a new signal, not one seen again
            failures = detail.failures + 1 if new else detail.failures
            # was: what the operator had it at (cordoned, draining)
            detail = replace(detail, failures=failures, reason=change.reason, was=record.state)
        elif change.state == NodeState.READY:  # healthy again: back to what it was before
            state = detail.was if detail.was is not None else NodeState.READY
            detail = replace(detail, reason=None, was=None)
        changed = replace(record, state=state, detail=detail, updated_at_s=now)
        kind = "node.healthy" if change.state == NodeState.READY else f"node.{change.state}"
        event = Event(now, kind, None, f"{change.node}: {change.reason}", {"pool": record.pool})
        with contextlib.suppress(ConflictError, NotFoundError):
            self.store.update(changed, expected_version=record.version, events=[event])

    def _upsert(self, record: PoolRecord) -> None:
        try:
            current = self.store.get(PoolRecord, record.name)
            if current is None:
                self.store.create(record)
            elif (current.state, current.observed) != (record.state, record.observed):
                self.store.update(record, expected_version=current.version)
        except StoreError:
            pass

    def _node(self, pool: str, node: ObservedNode, now: float) -> None:
        key = f"{pool}/{node.name}"
        resources = {
            "gpus": node.gpus,
            "cpus": node.cpus,
            "memory_gib": round(node.memory_gib, 3),
            "accelerator": node.accelerator,
            "devices": dict(sorted(node.devices.items())),  # TPU, neuron_cores ...
            "alive": node.alive,
            "ray_node_id": node.ray_node_id,
        }
        labels = {k: v for k, v in node.labels.items() if not k.startswith("ray.io/")}
        seen = (tuple(sorted(resources.items())), tuple(sorted(labels.items())))
        if self._nodes_seen.get(key) == seen:
            return
        try:
            current = self.store.get(NodeRecord, key)
            if current is None:
                first = NodeDetail(first_seen_s=now)
                ready = NodeState.READY
                self.store.create(NodeRecord(key, pool, ready, labels, resources, now, first))
            else:
                detail, events = current.detail, []
                if detail.first_seen_s is None:
                    detail = replace(detail, first_seen_s=now)
                said = {"pool": pool, "node": node.name}
                if current.resources.get("alive") and not node.alive:  # a node lost
                    detail = replace(detail, failures=detail.failures + 1)
                    events.append(Event(now, "node.lost", None, f"{key}: dead", said))
                elif node.alive and current.resources.get("alive") is False:  # back again
                    events.append(Event(now, "node.back", None, f"{key}: alive again", said))
                changed = replace(
                    current, labels=labels, resources=resources, detail=detail, updated_at_s=now
                )
                self.store.update(changed, expected_version=current.version, events=events)
            self._nodes_seen[key] = seen
        except StoreError:
            pass


def _rounded(values: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in values.items()}
