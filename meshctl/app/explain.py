"""Why a stored job runs where it runs, or why it is still pending (``meshctl explain JOB``):
where it runs, its last event, the cloud offers its launches tried, and the scheduler's latest
decision about it (filters, scores, burst, quota, forecast), as ``shapes.ExplainStored``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.state import JobRecord, Store


def stored(context: AppContext, store: Store, record: JobRecord) -> dict[str, Any]:
    """A stored job as ``explain`` shows it, with the policies the controller enforces now
    (its decision may have been made under others)."""
    from meshctl.app.decisions import decision_data
    from meshctl.app.jobdata import attempts_of, nodes_of, offers_tried
    from meshctl.jsondata import event_data

    attempts = attempts_of(store, record.id)
    decisions = store.decisions(job_id=record.id)
    events = store.events(job_id=record.id)
    decision = dict(decisions[-1].explanation) if decisions else {}
    last = attempts[-1] if attempts else None
    running = context.enforced()
    return {
        "id": record.id,
        "state": record.state.value,
        "pool": last.pool if last else None,
        "nodes": nodes_of(last),
        "attempt": last.number if last else 0,
        "attempt_state": last.state if last else None,
        "last_event": event_data(events[-1]) if events else None,
        "decision": decision_data(decision) if decision else None,
        "policy_hash": (decisions[-1].policy_hash or None) if decisions else None,
        "policy_hash_enforced": str(running["policy_hash"]) if running else None,
        "offers_tried": offers_tried(events),
    }
