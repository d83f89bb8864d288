"""The nodes the controller has seen, for the CLI and the API server alike: find one
(``pool/node``, or its name alone where only one pool has it), list them as rows, show one with
its data cache as its agent last reported it (``meshctl.data.cache.NodeCache.inventory``, as the
controller keeps it in ``run/agents.json``), and set what an operator sets: cordoned,
draining, ready, the health signal."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from meshctl.state import AuditEntry, NodeDetail, NodeRecord, Store

DEAD = "dead"  # a node Ray lists dead: its raylet is gone
COUNTERS = ("source_bytes", "peer_bytes", "hits", "misses", "refetched")


def find_node(store: Store, ref: str) -> NodeRecord:
    from meshctl.state import NodeRecord

    nodes = store.list(NodeRecord)
    matches = [n for n in nodes if n.id == ref] or [
        n for n in nodes if n.id.split("/", 1)[1] == ref
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(n.id for n in nodes[:8]) or "none yet (is the mesh up?)"
        raise InvalidRequestError(f"node: expected one of {known}, got {ref!r}")
    raise InvalidRequestError(f"node: {ref!r} is in several pools; name it pool/node")


def node_rows(home: Path, store: Store) -> list[dict[str, Any]]:
    """Every live node as data (``shapes.NodeRow``): for ``nodes list`` and the API server.
    The node of a cloud instance the provider took back or meshctl terminated is not listed
    (``nodes show`` and the events keep its history)."""
    from meshctl.pools.observed import node_name
    from meshctl.state import InstanceRecord, InstanceState, NodeRecord

    ended = (InstanceState.INTERRUPTED, InstanceState.TERMINATED)
    gone = {f"{i.pool}/{node_name(i.id)}" for i in store.list(InstanceRecord, state=ended)}
    nodes = [n for n in store.list(NodeRecord) if n.id not in gone]
    used, jobs = _usage(store)
    agents = _agents(home)
    return [node_row(n, used.get(n.id, 0.0), jobs.get(n.id, []), agents.get(n.id)) for n in nodes]


def node_data(home: Path, store: Store, ref: str) -> dict[str, Any]:
    """One node as data (``shapes.NodeDetail``): for ``nodes show`` and the API server."""

    found = find_node(store, ref)
    used, jobs = _usage(store)
    agents = _agents(home)
    agent = agents.get(found.id)
    row = node_row(found, used.get(found.id, 0.0), jobs.get(found.id, []), agent)
    return row | {"cache": cache_data((agent or {}).get("cache"), agents)}


def _usage(store: Store) -> tuple[dict[str, float], dict[str, list[str]]]:
    """GPUs in use and the jobs on each node, by "pool/node", from the active attempts."""
    from meshctl.state import ACTIVE_ATTEMPT, AttemptRecord

    used: dict[str, float] = {}
    jobs: dict[str, list[str]] = {}
    for attempt in store.list(AttemptRecord):
        if attempt.state not in ACTIVE_ATTEMPT:
            continue
        for held in attempt.detail.allocations:
            key = f"{attempt.pool}/{held.node}"
            used[key] = used.get(key, 0.0) + held.gpus()
            jobs.setdefault(key, []).append(attempt.job_id)
    return used, jobs


def _agents(home: Path) -> dict[str, dict[str, Any]]:
    """What each node's agent said at the controller's last cycle, by "pool/node"."""
    import json

    from meshctl.agent import AGENTS_FILE

    try:  # the run folder, as app.context reads it: no controller modules loaded for a name
        found: dict[str, dict[str, Any]] = json.loads((home / "run" / AGENTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found


def node_row(
    node: NodeRecord, gpus_used: float, jobs: list[str], agent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A node as data (``shapes.NodeRow``)."""
    from meshctl.jsondata import timestamp

    if agent is not None:  # AgentStatus.to_json, its time as a timestamp
        agent = {"url": agent.get("url", ""), "verdict": agent.get("verdict", "unknown"),
                 "reasons": list(agent.get("reasons") or []), "error": agent.get("error"),
                 "probed_at": timestamp(agent.get("probed_at_s"))}  # fmt: skip
    gpus, alive = node.resources.get("gpus"), bool(node.resources.get("alive"))
    return {
        "node": node.id,
        "pool": node.pool,
        "state": node.state if alive else DEAD,  # whatever the operator had it at
        "reason": node.detail.reason or (None if alive else "Ray lists its node dead"),
        "deadline_at": timestamp(node.detail.deadline_s),
        "alive": alive,
        "gpus": None if gpus is None else int(gpus),
        "gpus_used": round(gpus_used, 4),
        "accelerator": node.resources.get("accelerator") or None,
        "devices": dict(node.resources.get("devices") or {}),
        "jobs": jobs,
        "labels": dict(sorted(node.labels.items())),
        "agent": agent,
    }


def _kept(node: NodeRecord, state: str, deadline_s: float | None) -> NodeDetail:
    """What a node keeps when the operator sets its state: what the controller counts, and
    its health signal unless it is put back in service; and a drain's deadline."""
    from meshctl.state import NodeDetail, NodeState

    was = node.detail
    reason = was.reason if state != NodeState.READY else None  # still unhealthy: the same signal
    return NodeDetail(
        first_seen_s=was.first_seen_s, failures=was.failures, deadline_s=deadline_s, reason=reason
    )


def set_state(
    store: Store,
    ref: str,
    state: str,
    why: str,
    deadline_s: float | None = None,
    also: Sequence[AuditEntry] = (),
) -> NodeRecord:
    """Put a node in ``state`` (cordoned, draining, ready) with an event saying ``why``, and
    ``also`` (audit entries) in the same write; the node as stored. For the CLI and the API
    server."""
    from dataclasses import replace

    from meshctl.state import ConflictError, Event

    for _ in range(10):
        node = find_node(store, ref)
        now = time.time()
        event = Event(now, f"node.{state}", None, f"{node.id}: {why}", {"node": node.id})
        detail = _kept(node, state, deadline_s)
        try:
            return store.update(
                replace(node, state=state, detail=detail, updated_at_s=now),
                expected_version=node.version,
                events=[event, *also],
            )
        except ConflictError:
            continue
    raise InvalidRequestError(f"node {ref}: kept changing; try again")


def back_in_service(
    home: Path, store: Store, ref: str, also: Sequence[AuditEntry] = ()
) -> NodeRecord:
    """Uncordon: the node's health signal cleared, what its agent says against it now
    overruled, and the node ready. For the CLI and the API server."""
    from meshctl.pools.health import set_signal
    from meshctl.state import NodeState

    pool, name = find_node(store, ref).id.split("/", 1)
    set_signal(home, pool, name, None)
    _overrule_agent(home, pool, name)
    return set_state(store, ref, NodeState.READY, "back in service", also=also)


def _overrule_agent(home: Path, pool: str, name: str) -> None:
    """The operator says the node is fine: what its agent says against it now is ignored
    until the agent says something else."""
    from meshctl.agent.watch import said
    from meshctl.pools.health import overrule

    agent = _agents(home).get(f"{pool}/{name}") or {}
    verdict = str(agent.get("verdict") or "")
    bad = verdict in ("unhealthy", "dead", "suspect")
    overrule(home, pool, name, said(verdict, agent.get("reasons") or []) if bad else None)


def set_health(home: Path, node_id: str, unhealthy: str | None) -> str:
    """Set (a reason) or clear (None) a node's health signal, as its probe would; clearing
    also overrules what its agent says against it now. For the CLI and the API server."""
    from meshctl.pools.health import overrule, set_signal

    pool, name = node_id.split("/", 1)
    set_signal(home, pool, name, unhealthy)
    if unhealthy:
        overrule(home, pool, name, None)  # the operator says unhealthy: nothing ignored
    else:
        _overrule_agent(home, pool, name)
    return node_id


def cache_data(
    report: Mapping[str, Any] | None, agents: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The cache its agent reported (None: it keeps none, or no report), keys checked and
    defaults filled in: an agent of another version may say less. ``agents``: every node's
    agent by "pool/node", to name the peer an entry came from."""
    if not report:
        return None
    capacity, used = _int(report.get("capacity_bytes")), _int(report.get("used_bytes"))
    entries = [e for e in report.get("entries") or () if isinstance(e, Mapping)]
    return {
        "root": str(report.get("root") or ""),
        "capacity_bytes": capacity,
        "used_bytes": used,
        "used_pct": round(100.0 * used / capacity, 2) if capacity else None,
        "entries": [_entry(e, agents) for e in entries],
        **{name: _int(report.get(name)) for name in COUNTERS},
        "errors": [str(x) for x in report.get("errors") or ()],
        "failed": {str(k): str(v) for k, v in dict(report.get("failed") or {}).items()},
    }


def _entry(entry: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    from meshctl.jsondata import timestamp

    complete = bool(entry.get("complete"))
    fetched = entry.get("fetched_bytes")
    source = str(entry.get("fetched_from") or "") or None
    used_s = entry.get("last_used_s") or None
    return {
        "key": str(entry.get("key") or ""),
        "location": str(entry.get("location") or ""),
        "version": str(entry.get("version") or ""),
        "size_bytes": _int(entry.get("size_bytes")),
        "fetched_bytes": None if fetched is None else _int(fetched),
        "complete": complete,
        "pinned": bool(entry.get("pinned")),
        "fetched_from": source,
        "peer": _peer(source, agents),
        "last_used_at": timestamp(float(used_s)) if complete and used_s else None,
    }


def _peer(source: str | None, agents: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The node whose agent answers at ``source`` (a peer's base URL), if known."""
    if not source or source == "source":
        return None
    where = urllib.parse.urlsplit(source).netloc
    found = [
        k for k, a in agents.items() if urllib.parse.urlsplit(str(a.get("url"))).netloc == where
    ]
    return found[0] if len(found) == 1 else None


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
