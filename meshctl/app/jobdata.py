"""A job as data (``jobs show -o json``, the API server's answer, ``shapes.JobDetail``):
its attempts, events, the scheduler's decision, a service's replicas, its loans and the cloud
offers its launches tried. Functions over the stored records: they read the store at most
(``attempts_of``), never write it; times ISO-8601 under ``_at`` keys, numbers as numbers,
nothing unknown filled in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from meshctl.jsondata import event_data, timestamp

if TYPE_CHECKING:
    from meshctl.state import AttemptRecord, Decision, Event, LoanRecord, Store


def attempts_of(store: Store, job_id: str) -> list[AttemptRecord]:
    """A job's attempts, first to latest."""
    from meshctl.state import AttemptRecord

    return sorted(store.list(AttemptRecord, job_id=job_id), key=lambda a: a.number)


def nodes_of(attempt: AttemptRecord | None) -> list[str]:
    """The nodes an attempt was placed on (none without an attempt)."""
    if attempt is None:
        return []
    return [held.node for held in attempt.detail.allocations]


def decision_now(decision: Decision | None, events: Sequence[Event]) -> str | None:
    """The scheduler's latest decision, and each node replaced inside the attempt since: the
    decision names the nodes the job was placed on, which it may have left."""
    summary = decision.explanation.get("summary") if decision is not None else None
    if decision is None or not summary:
        return summary
    moved = [e.message for e in events if e.kind == "job.node-replaced" and e.at_s >= decision.at_s]
    return str(summary) + "".join(f"; then {m}" for m in moved)


def attempt_data(attempt: AttemptRecord) -> dict[str, Any]:
    detail = attempt.detail
    return {
        "number": attempt.number,
        "pool": attempt.pool,
        "submission_id": attempt.submission_id,
        "state": attempt.state,
        "nodes": nodes_of(attempt),
        "started_at": timestamp(attempt.started_at_s),
        "ended_at": timestamp(attempt.ended_at_s),
        "reason": attempt.reason or None,
        "allocations": [held.to_json() for held in detail.allocations],
        "checkpoint_uri": detail.checkpoint_uri,
        "stop_at": timestamp(detail.stop_at_s),
        "preempted_for": detail.for_job,
    }


def data(
    spec: Mapping[str, Any],
    attempts: Sequence[AttemptRecord],
    events: Sequence[Event],
    decision: str | None,
) -> dict[str, Any]:
    """What ``jobs show -o json`` adds to the job's row (see ``jobs_cmd._row``)."""
    body = spec.get("spec", {})
    resources = dict(body.get("resources", {}))
    train = body.get("train")
    nodes = int(resources.get("nodes") or 1)
    return {
        "kind": body.get("kind"),
        "priority_class": body.get("priority_class"),
        "entrypoint": body.get("entrypoint"),
        "resources": resources,
        "train": None if train is None else _train_data(train, nodes),
        "attempts": [attempt_data(a) for a in attempts],
        "events": [event_data(e) for e in events],
        "decision": decision,
    }


def _train_data(train: Mapping[str, Any], nodes: int) -> dict[str, Any]:
    per_node = int(train.get("workers_per_node", 1))
    return {
        "loop": train["loop"],
        "workers": per_node * nodes,
        "workers_per_node": per_node,
        "min_workers": train.get("min_workers"),
        "max_failures": train.get("max_failures", 3),
        "hang_timeout_s": train.get("hang_timeout"),
        "config": dict(train.get("config") or {}),
    }


OUTCOMES = {  # a launch's outcome, as an operator says it (``CloudError.kind``)
    "launched": "launched",
    "capacity": "stock-out",
    "quota": "quota",
    "auth": "permission",
    "invalid": "invalid request",
    "throttled": "throttled",
    "other": "other",
}


def offers_tried(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Every cloud offer a job's launches tried, in order: where (pool, zone, node type,
    spot) and what came of it (launched, stock-out, quota, permission, invalid request,
    throttled), from the burst side's ``instance.refused`` and ``instance.launched`` events."""
    tried = []
    for event in events:
        said = event.data
        if event.kind not in ("instance.refused", "instance.launched") or "pool" not in said:
            continue
        tried.append(
            {
                "tried_at": timestamp(event.at_s),
                "pool": said["pool"],
                "zone": said.get("zone"),
                "node_type": said["node_type"],
                "spot": bool(said.get("spot")),
                "outcome": OUTCOMES.get(str(said.get("outcome")), "other"),
                "message": said.get("message") or event.message,
            }
        )
    return tried


def service_data(
    spec: Mapping[str, Any], attempts: Sequence[AttemptRecord], port: int | None
) -> dict[str, Any] | None:
    """A service's replicas as meshctl placed them and Serve runs them (``jobs show``)."""
    serve = spec.get("spec", {}).get("serve")
    if serve is None:
        return None
    detail = attempts[-1].detail if attempts else None
    said = dict(detail.serving) if detail is not None else {}
    prefix = serve.get("route_prefix", "/")
    return {
        "app": serve["app"],
        "deployment": serve.get("deployment"),
        "url": f"http://127.0.0.1:{port}{prefix}" if port else None,
        "replicas_min": int(serve["replicas"].get("min", 1)),
        "replicas_max": int(serve["replicas"]["max"]),
        "replicas_wanted": detail.replicas_wanted if detail is not None else None,
        "replicas_placed": len(detail.replica_ids) if detail is not None else 0,
        "replicas_running": said.get("running"),
        "status": said.get("status"),
        "message": said.get("message") or None,
        "in_flight": said.get("in_flight"),
        "rps": said.get("rps"),
        "p50_ms": said.get("p50_ms"),
        "p99_ms": said.get("p99_ms"),
    }


def loan_data(loan: LoanRecord, now_s: float) -> dict[str, Any]:
    end = loan.closed_at_s if loan.closed_at_s is not None else now_s
    return {
        "lender": loan.lender,
        "borrower": loan.borrower,
        "pool": loan.pool,
        "node": loan.node,
        "gpus": loan.gpus,
        "opened_at": timestamp(loan.opened_at_s),
        "closed_at": timestamp(loan.closed_at_s),
        "gpu_hours": round(max(0.0, end - loan.opened_at_s) * loan.gpus / 3600, 4),
        "lost_gpu_hours": round(loan.lost_gpu_s / 3600, 4),
    }
