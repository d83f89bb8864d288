"""What running train jobs report, read from where they keep their checkpoints
(``meshctl.workload.train.progress``, through ``meshctl.pools.checkpoints``): the progress
``decide`` judges hangs by, and a ``train.restarted`` event per worker failure Ray Train recovered
from inside an attempt. Reads are bounded (``read_progress``) and at most every
``PROGRESS_READ_S`` per job; a failed read keeps what was known."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from meshctl.controller.deciding.world import JobView, TrainProgress
from meshctl.pools.checkpoints import read_progress
from meshctl.state.records import Event
from meshctl.state.store import Store

log = logging.getLogger("meshctl.controller")
PROGRESS_READ_S = 2.0  # how often a running train job's progress is read from its storage


class ProgressReader:
    def __init__(self, store: Store, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.clock = store, clock
        self._progress: dict[str, tuple[float, TrainProgress | None]] = {}  # job -> (read at)
        self._told: dict[tuple[str, int], int] = {}  # (job, attempt) -> restarts told

    def read(self, views: Sequence[JobView]) -> dict[str, TrainProgress]:
        """What running train jobs last reported, read from their checkpoint storage (at
        most every PROGRESS_READ_S per job)."""
        found: dict[str, TrainProgress] = {}
        now = self.clock()
        for view in views:
            attempt = view.attempt
            uri = attempt.detail.checkpoint_uri if attempt else None
            if attempt is None or view.job.spec.train is None or not uri:
                continue
            read_at, seen = self._progress.get(view.record.id, (-PROGRESS_READ_S, None))
            if now - read_at >= PROGRESS_READ_S:
                endpoint = attempt.detail.checkpoint_endpoint
                doc = read_progress(uri, attempt.number, endpoint)
                try:
                    if doc:  # a failed read keeps what was known: never a false hang
                        seen = _train_progress(doc)
                        self.restarts(view.record.id, attempt.number, doc)
                except (TypeError, ValueError, AttributeError, KeyError) as err:
                    log.warning("job %s: unreadable progress: %s", view.record.id, err)
                self._progress[view.record.id] = (now, seen)
            if seen is not None:
                found[view.record.id] = seen
        return found

    def restarts(self, job_id: str, attempt: int, doc: Mapping[str, Any]) -> None:
        """One event per worker failure Ray Train recovered from (resumed) in the attempt."""
        resumed = [f for f in doc.get("failures", []) if f.get("resumed_s")]
        key = (job_id, attempt)
        if key not in self._told:  # after a restart of the controller: what it said before
            said = self.store.events(job_id=job_id)
            self._told[key] = sum(
                1 for e in said if e.kind == "train.restarted" and e.data.get("attempt") == attempt
            )
        for event in _restart_events(job_id, attempt, resumed, self._told[key]):
            self.store.append_event(replace(event, data={**event.data, "attempt": attempt}))
            self._told[key] += 1


def _restart_events(
    job_id: str, attempt: int, failures: list[Mapping[str, Any]], told: int
) -> list[Event]:
    """Events for the worker failures Ray Train recovered from inside an attempt (one each,
    once resumed), past the first ``told``."""
    events = []
    for n, failure in enumerate(failures[told:], start=told + 1):
        at_s, back_s = float(failure.get("at_s") or 0), float(failure.get("resumed_s") or 0)
        message = (
            f"attempt {attempt}: Ray Train restarted the workers after a failure at step "
            f"{failure.get('step')} ({_first_line(str(failure.get('error', '')))[:200]}); "
            f"training again {back_s - at_s:.1f} s later"
        )
        events.append(Event(back_s, "train.restarted", job_id, message, {"n": n}))
    return events


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _train_progress(doc: Mapping[str, Any]) -> TrainProgress:
    """What the controller needs of an attempt's progress; raises on a malformed document."""
    checkpoints = doc.get("checkpoints") or []
    step, last = doc.get("step"), doc.get("last_report_s")
    checkpointed = checkpoints[-1].get("at_s") if checkpoints else None
    ended = doc.get("loop_ended_s")
    failing = [f for f in doc.get("failures") or [] if f.get("resumed_s") is None]
    return TrainProgress(
        attempt=int(doc.get("attempt", 0)),
        reports=int(doc.get("reports", 0)),
        step=int(step) if step is not None else None,
        last_report_s=float(last) if last is not None else None,
        checkpoint_step=checkpoints[-1].get("step") if checkpoints else None,
        restarting_since=float(failing[0]["at_s"]) if failing else None,
        checkpoint_at_s=float(checkpointed) if checkpointed is not None else None,
        loop_ended_s=float(ended) if ended is not None else None,
    )
