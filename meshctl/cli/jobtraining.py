"""A train job's recoveries and export in ``meshctl jobs show``, as lines, from their data
(``meshctl.app.training``)."""

from __future__ import annotations

from typing import Any


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
