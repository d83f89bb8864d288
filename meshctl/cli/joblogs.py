"""``meshctl jobs logs``: a job's driver log, from its pool or from meshctl's copy
(``meshctl.app.logs``). ``--follow`` on a job that has not started says on stderr what it
waits for (queued, and for what: the scheduler's latest decision, as ``meshctl explain``
gives it; admitted; dispatched), again whenever that changes, and follows it once it runs,
into its next attempts if it is requeued, until it ends.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from meshctl.app.logs import chosen, scheduler_says, text_of, waiting_for
from meshctl.cli import render
from meshctl.errors import CommandError

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.state import AttemptRecord, JobRecord, Store

POLL_S = 1.0
WAITING = frozenset({"pending", "requeued", "admitted", "dispatched"})  # not running yet


def show(context: AppContext, store: Store, record: JobRecord, number: int | None) -> None:
    """Print the log once."""
    mesh = context.mesh()
    attempt = chosen(store, record.id, number)
    if attempt is None:
        why = waiting_for(record, None, scheduler_says(store, record.id))
        render.note(f"job {record.id} has not started: {why}")
        return
    text = text_of(context, mesh, attempt)
    if text is None:
        raise CommandError(
            f"job {record.id}, attempt {attempt.number}: no log: pool {attempt.pool} does not "
            "have it (is it up?) and meshctl kept no copy"
        )
    render.raw(text.decode("utf-8", errors="replace"))


@dataclass
class Follower:
    """``jobs logs --follow``: prints what is new each poll, attempt after attempt."""

    context: AppContext
    store: Store
    job_id: str
    number: int | None
    mesh: Any = None
    showing: str | None = None  # the attempt being shown
    shown: int = 0  # bytes of its log printed
    said: str = ""  # the last waiting note
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def run(self) -> None:
        from meshctl.state import ACTIVE_ATTEMPT, JobRecord
        from meshctl.state.records import FINISHED

        self.mesh = self.context.mesh()
        while True:
            record = self.store.get(JobRecord, self.job_id)
            if record is None:
                raise CommandError(f"job {self.job_id}: gone from the store")
            attempt = chosen(self.store, self.job_id, self.number)
            self.step(record, attempt)  # after the state was read: a job seen ended is whole
            if self.number is not None and attempt is not None:
                if attempt.state not in ACTIVE_ATTEMPT:
                    return
            elif record.state in FINISHED:
                return
            time.sleep(POLL_S)

    def step(self, record: JobRecord, attempt: AttemptRecord | None) -> None:
        """Print what is new of the attempt's log; say what a job not yet running waits for."""
        if attempt is not None:
            if attempt.id != self.showing:
                if self.showing is not None:
                    render.note(f"--- job {record.id}, attempt {attempt.number} ---")
                self.showing, self.shown = attempt.id, 0
                self.decoder.reset()
            text = text_of(self.context, self.mesh, attempt) or b""
            if len(text) > self.shown:
                render.raw(self.decoder.decode(text[self.shown :]))
                self.shown = len(text)
        if record.state.value in WAITING:
            why = waiting_for(record, attempt, scheduler_says(self.store, record.id))
            line = f"waiting for job {record.id} to start: {why}"
            if line != self.said:
                render.note(line)
                self.said = line
