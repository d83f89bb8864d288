"""How a train job recovered: pure, from what it recorded (``meshctl.workload.train.progress``) and
the controller's events. What ``meshctl jobs show`` and ``benchmarks/recovery.py`` print.

Two layers of recovery:

- inside an attempt, Ray Train restarts the workers after a worker or node failure (the
  failure is in the attempt's progress, ``resumed_s`` is its first report afterwards);
- across attempts, the controller evicts, preempts or requeues the job and submits it again
  (the cause is the job's ``job.evicted`` / ``job.preempted`` event; the next attempt's first
  report is when it resumed).

Steps lost: the last step reported before the failure less the step of the checkpoint the
run resumed from (all of them when it started from scratch; unknown when the checkpoint's step
was not recorded). A checkpoint's step is found in the latest checkpoints an attempt records,
or in a failure's, which names the checkpoint that was latest when it happened: a run that
checkpoints every step has rolled the one it resumed from off the list long before it ends.

Time to detect: from the last report before the failure to the failure being seen (none for a
job that reported on while given a grace to checkpoint). Time to resume: from when it stopped
(seen, or its last report when later) to the first report after it. The cause of a recovery
across attempts is the last eviction or preemption between the two attempts' first reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CAUSES = ("job.evicted", "job.preempted")


@dataclass(frozen=True, slots=True)
class AttemptTraining:
    attempt: int
    resumed_from_step: int | None  # None: from scratch
    restarts: int  # worker-group restarts inside the attempt
    last_step: int | None
    checkpoints: int


@dataclass(frozen=True, slots=True)
class Recovery:
    attempt: int  # the attempt in which the run resumed
    cause: str
    last_step: int | None
    resumed_from_step: int | None
    steps_lost: int | None
    detect_s: float | None
    resume_s: float | None


def history(
    recorded: Mapping[str, Any], events: Sequence[Mapping[str, Any]]
) -> tuple[list[AttemptTraining], list[Recovery]]:
    """Per attempt, and per recovery, from ``read_history`` output and the job's events
    (``at_s``, ``kind``, ``message``)."""
    progress: Mapping[int, Mapping[str, Any]] = recorded.get("progress", {})
    starts: Sequence[Mapping[str, Any]] = recorded.get("starts", [])
    known = [c for doc in progress.values() for c in doc.get("checkpoints", [])] + [
        f["checkpoint"]
        for doc in progress.values()
        for f in doc.get("failures", [])
        if isinstance(f.get("checkpoint"), Mapping)
    ]
    step_of = {str(c["path"]): c.get("step") for c in known if c.get("path")}

    def resumed(start: Mapping[str, Any] | None) -> int | None:
        path = start.get("checkpoint") if start else None
        return step_of.get(str(path)) if path else None

    def lost(last_step: int | None, start: Mapping[str, Any] | None) -> int | None:
        """Steps done again: all of them from scratch; unknown from a checkpoint whose step
        was not recorded."""
        if last_step is None:
            return None
        if not (start and start.get("checkpoint")):
            return last_step + 1
        step = resumed(start)
        return last_step - step if step is not None else None

    attempts, recoveries = [], []
    numbers = sorted({int(n) for n in progress} | {int(s.get("attempt", 0)) for s in starts})
    for number in numbers:
        doc = progress.get(number, {})
        mine = [s for s in starts if int(s.get("attempt", 0)) == number]
        attempts.append(
            AttemptTraining(
                number,
                resumed(mine[0] if mine else None),
                max(0, len(mine) - 1),
                doc.get("step"),
                len(doc.get("checkpoints", [])),
            )
        )
        before = progress.get(number - 1)
        if before is not None:  # resumed across attempts
            last_s = before.get("last_report_s") or 0.0
            first_s = doc.get("first_report_s")
            cause = _cause(events, before.get("first_report_s") or 0.0, first_s)
            seen_s = float(cause["at_s"]) if cause else None
            unresumed = [f for f in before.get("failures", []) if f.get("resumed_s") is None]
            if unresumed:  # Ray Train saw it first (its workers' health check)
                seen_s = min(float(unresumed[0]["at_s"]), seen_s or float("inf"))
            # A job given a grace to checkpoint (an unhealthy node, a preemption) reports on
            # after the decision: seen at once, and stopped at its last report.
            stopped_s = max(seen_s, last_s) if seen_s is not None else None
            recoveries.append(
                Recovery(
                    number,
                    str(cause["message"]) if cause else "requeued",
                    before.get("step"),
                    resumed(mine[0] if mine else None),
                    lost(before.get("step"), mine[0] if mine else None),
                    max(0.0, seen_s - last_s) if seen_s is not None and last_s else None,
                    first_s - stopped_s if first_s and stopped_s is not None else None,
                )
            )
        for failure in doc.get("failures", []):  # resumed inside the attempt
            if failure.get("resumed_s") is None:
                continue  # not resumed there: the next attempt's recovery covers it
            after = next((s for s in mine if float(s["at_s"]) >= float(failure["at_s"])), None)
            at_s, last_s, back_s = (
                failure["at_s"],
                failure.get("last_report_s"),
                failure.get("resumed_s"),
            )
            moved = _replacement(events, last_s or at_s, back_s)
            said = f"{moved['message']}; " if moved else ""
            recoveries.append(
                Recovery(
                    number,
                    f"{said}Ray Train restarted the workers: {failure.get('error', '')}"[:300],
                    failure.get("step"),
                    resumed(after),
                    lost(failure.get("step"), after) if after else None,
                    at_s - last_s if last_s else None,
                    back_s - at_s if back_s else None,
                )
            )
    return attempts, recoveries


def _cause(
    events: Sequence[Mapping[str, Any]], since_s: float, until_s: float | None
) -> Mapping[str, Any] | None:
    """What ended the attempt that reported first at ``since_s``: the last eviction or
    preemption before the next attempt's first report (``until_s``)."""
    found = [
        e for e in events
        if e.get("kind") in CAUSES and since_s <= float(e["at_s"]) <= (until_s or float("inf"))
    ]  # fmt: skip
    return found[-1] if found else None


def _replacement(
    events: Sequence[Mapping[str, Any]], since_s: float, until_s: float | None
) -> Mapping[str, Any] | None:
    """The node replacement a restart inside the attempt waited for, if it did."""
    found = [
        e for e in events
        if e.get("kind") == "job.node-replaced"
        and since_s <= float(e["at_s"]) <= (until_s or float("inf"))
    ]  # fmt: skip
    return found[-1] if found else None
