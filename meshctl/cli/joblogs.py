"""``meshctl jobs logs``: a job's driver log, from its pool or from meshctl's copy.

While the job's pool has its Ray job, the log comes from the pool (the freshest text, whole);
once the pool no longer has it (the job ended and the pool was stopped, restarted, or lost),
it comes from the copy the controller kept (``controller/logs.py``: bounded, head and tail).
``--follow`` on a job that has not started says on stderr what it waits for (queued,
admitted, dispatched) and follows it once it runs, into its next attempts if it is requeued,
until it ends.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from meshctl.cli import render
from meshctl.cli.errors import CommandError, InvalidRequestError

if TYPE_CHECKING:
    from meshctl.cli.context import AppContext
    from meshctl.model.mesh import Mesh
    from meshctl.state import AttemptRecord, JobRecord, Store

POLL_S = 1.0
WAITING = frozenset({"pending", "requeued", "admitted", "dispatched"})  # not running yet


def fresh(context: AppContext, mesh: Mesh, attempt: AttemptRecord) -> bytes | None:
    """The whole log from the attempt's pool; None when the pool is not up, does not answer,
    or no longer has the job."""
    from meshctl.controller.runtime import client_for
    from meshctl.pools.ray import PoolError

    pool = mesh.pool(attempt.pool)
    client = client_for(pool, context.home) if pool else None
    if client is None:
        return None
    try:
        text = client.logs(attempt.submission_id)
    except (PoolError, OSError):
        return None
    return None if text is None else text.encode("utf-8")


def text_of(context: AppContext, mesh: Mesh, attempt: AttemptRecord) -> bytes | None:
    """The freshest text there is: the pool's, else meshctl's copy, else None."""
    from meshctl.controller.logs import read_copy

    found = fresh(context, mesh, attempt)
    if found is None:
        found = read_copy(context.home, attempt.job_id, attempt.number)
    return found


def chosen(store: Store, job_id: str, number: int | None) -> AttemptRecord | None:
    """The attempt asked for (``--attempt``), else the latest; None before the first."""
    from meshctl.cli.jobview import attempts_of

    tries = attempts_of(store, job_id)
    picked = [a for a in tries if number is None or a.number == number]
    if number is not None and not picked:
        raise InvalidRequestError(f"--attempt: job {job_id} has no attempt {number}")
    return picked[-1] if picked else None


def show(context: AppContext, store: Store, record: JobRecord, number: int | None) -> None:
    """Print the log once."""
    mesh = context.mesh()
    attempt = chosen(store, record.id, number)
    if attempt is None:
        render.note(f"job {record.id} has not started: {waiting_for(record, None)}")
        return
    text = text_of(context, mesh, attempt)
    if text is None:
        raise CommandError(
            f"job {record.id}, attempt {attempt.number}: no log: pool {attempt.pool} does not "
            "have it (is it up?) and meshctl kept no copy"
        )
    render.raw(text.decode("utf-8", errors="replace"))


def waiting_for(record: JobRecord, attempt: AttemptRecord | None) -> str:
    """What a job that has not started waits for, in words."""
    state = record.state.value
    if state == "pending":
        return "it is queued (pending)"
    if state == "requeued":
        return "it is queued again (requeued)"
    if state == "admitted":
        return f"it is admitted to pool {record.pool}, being submitted"
    sid = f" as {attempt.submission_id}" if attempt else ""
    return f"it is dispatched to pool {record.pool}{sid}, waiting for Ray to start it"


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
        from meshctl.controller.decide import FINISHED
        from meshctl.state import ACTIVE_ATTEMPT, JobRecord

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
            line = f"waiting for job {record.id} to start: {waiting_for(record, attempt)}"
            if line != self.said:
                render.note(line)
                self.said = line
