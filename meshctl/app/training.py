"""A train job's record in ``meshctl jobs show``: its recoveries (per attempt: where it
resumed, restarts inside, steps lost, time to detect and to resume) and its model's export,
from what the run recorded beside its checkpoints (``meshctl.workload.train.progress``,
``meshctl.workload.train.export``), as data (``shapes.TrainingData``, ``shapes.ExportData``)."""

from __future__ import annotations

from typing import Any

CHECKED = ("runtime", "samples", "max_abs_diff", "rtol", "atol")  # an export's check


def recorded(record: Any, attempts: list[Any]) -> dict[str, Any] | None:
    """What a train job's run recorded (``pools.checkpoints.read_history``); None for a job
    that is no train job, has not run, or keeps no checkpoints."""
    from meshctl.pools.checkpoints import read_history

    if not record.spec.get("spec", {}).get("train") or not attempts:
        return None
    detail = attempts[-1].detail
    if not detail.checkpoint_uri:
        return None
    return read_history(detail.checkpoint_uri, detail.checkpoint_endpoint)


def training_data(recorded: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """Its recoveries (``controller.recovery.history``)."""
    from dataclasses import asdict

    from meshctl.controller.recovery import history

    per_attempt, recoveries = history(recorded, events)
    return {
        "attempts": [asdict(a) for a in per_attempt],
        "recoveries": [asdict(r) for r in recoveries],
    }


def export_data(recorded: dict[str, Any]) -> dict[str, Any] | None:
    """Its latest attempt's export, when it made one."""
    from meshctl.jsondata import timestamp

    exports = recorded["exports"]
    if not exports:
        return None
    doc = exports[max(exports)]
    checked = doc.get("checked")
    return {
        "attempt": int(doc.get("attempt", 0)),
        "format": str(doc.get("format", "")),
        "path": doc.get("path"),
        "bytes": doc.get("bytes"),
        "checked": {k: checked.get(k) for k in CHECKED} if isinstance(checked, dict) else None,
        "error": doc.get("error"),
        "exported_at": timestamp(doc.get("at_s")),
    }
