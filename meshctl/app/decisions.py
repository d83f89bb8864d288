"""Core objects as the data ``-o json|yaml`` prints, where several commands print the same
thing (a scheduling decision): built once here, shaped as ``shapes`` says. An event is built
in ``meshctl.jsondata`` (``event_data``): the status document outside the CLI prints it too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl.scheduler import Decision


def decision_data(decision: Decision | Mapping[str, Any]) -> dict[str, Any]:
    """A scheduling decision (``shapes.DecisionData``): live from the scheduler, or as the
    controller recorded it (``filtered`` was a map from reason to count there)."""
    found = (
        decision
        if isinstance(decision, Mapping)
        else {**decision.explanation(), "summary": decision.summary()}
    )
    filtered = found.get("filtered") or {}
    return {
        "status": found.get("status"),
        "reason": found.get("reason") or None,
        "summary": found.get("summary", ""),
        "nodes_considered": int(found.get("nodes_considered", 0)),
        "filtered": [
            {"reason": why, "nodes": int(n)}
            for why, n in sorted(filtered.items(), key=lambda item: -int(item[1]))
        ],
        "exhausted": found.get("exhausted"),
        "candidates": [_candidate(c) for c in found.get("candidates", [])],
        "notes": list(found.get("notes", [])),
        "forecast": _forecast(found.get("forecast")),
    }


def _candidate(found: Mapping[str, Any]) -> dict[str, Any]:
    local, gib = found.get("data_local_gib"), found.get("data_gib")  # absent in older records
    return {
        "nodes": list(found["nodes"]),
        "total": float(found["total"]),
        "scores": dict(found["scores"]),
        "data_local_gib": float(local) if local is not None else None,
        "data_gib": float(gib) if gib is not None else None,
    }


def data_local(local_gib: float | None, gib: float | None) -> str:
    """ "data local 1.5 of 2.0 GiB" for a job with data sets (GiB of those that give a size);
    "" for a job without."""
    if local_gib is None or gib is None:
        return ""
    if gib == 0:
        return "data local: no sizes given"
    return f"data local {_gib(local_gib)} of {_gib(gib)} GiB"


def _gib(gib: float) -> str:
    """1.5, 2,048.0; a dataset under a GiB to three figures (0.0312), not rounded to 0.0."""
    return f"{gib:,.1f}" if gib == 0 or gib >= 1 else f"{gib:.3g}"


def _forecast(found: Any) -> dict[str, Any] | None:
    from meshctl.model.policy import UNKNOWN_RUNTIME_S

    if not isinstance(found, Mapping):
        return None
    runtime = found.get("runtime_s")
    return {
        "runtime_s": float(runtime) if runtime is not None else None,
        "runtime": str(found.get("runtime", "")),
        "expected_wait_s": {
            str(k): float(v) for k, v in (found.get("expected_wait_s") or {}).items()
        },
        "assumed": {str(k): int(v) for k, v in (found.get("assumed") or {}).items()},
        "unknown_runtime_s": float(found.get("unknown_runtime_s") or UNKNOWN_RUNTIME_S),
        "blocked_by": str(found["blocked_by"]) if found.get("blocked_by") else None,
    }
