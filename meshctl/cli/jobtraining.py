"""A train job in ``meshctl jobs show``: its recoveries (per attempt: where it resumed,
restarts inside, steps lost, time to detect and to resume) and its model's export, from what
the run recorded beside its checkpoints (``meshctl.train.progress``,
``meshctl.train.export``); as data (``shapes.TrainingData``, ``shapes.ExportData``) and as
lines."""

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


def show_training(training: dict[str, Any] | None) -> None:
    from meshctl.cli import render

    for t in (training or {}).get("attempts", []):
        start = "scratch" if t["resumed_from_step"] is None else f"step {t['resumed_from_step']}"
        render.say(
            f"  training, attempt {t['attempt']}: resumed from {start}, "
            f"{t['restarts']} restarts inside, last step {t['last_step']}"
        )
    for r in (training or {}).get("recoveries", []):
        render.say(
            f"  recovery in attempt {r['attempt']}: {render.esc(r['cause'])}; "
            f"steps lost {_or_dash(r['steps_lost'])}, detected in {_secs(r['detect_s'])}, "
            f"resumed in {_secs(r['resume_s'])}"
        )


def show_export(exported: dict[str, Any] | None) -> None:
    from meshctl.cli import render

    if exported is None:
        return
    if exported["error"]:
        said = f"{exported['format']} failed: {exported['error']}"
        render.say(f"  export, attempt {exported['attempt']}: {render.esc(said)}")
        return
    checked = exported["checked"] or {}
    render.say(
        f"  artifact: {render.esc(str(exported['path']))} ({exported['format']},"
        f" {exported['bytes']} bytes); {checked.get('runtime')} agrees with PyTorch on"
        f" {checked.get('samples')} samples: max |diff| {checked.get('max_abs_diff', 0):.3g}"
        f" (rtol {checked.get('rtol')}, atol {checked.get('atol')})"
    )


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
