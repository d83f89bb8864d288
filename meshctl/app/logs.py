"""A job's driver log, from its pool or from meshctl's copy.

While the job's pool has its Ray job, the log comes from the pool (the freshest text, whole);
once the pool no longer has it (the job ended and the pool was stopped, restarted, or lost),
it comes from the copy the controller kept (``controller/logs.py``: bounded, head and tail).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.model.mesh import Mesh
    from meshctl.state import AttemptRecord, JobRecord, Store


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
    from meshctl.app.jobdata import attempts_of

    tries = attempts_of(store, job_id)
    picked = [a for a in tries if number is None or a.number == number]
    if number is not None and not picked:
        raise InvalidRequestError(f"--attempt: job {job_id} has no attempt {number}")
    return picked[-1] if picked else None


def scheduler_says(store: Store, job_id: str) -> str | None:
    """The summary of the scheduler's latest decision about a job, as ``meshctl explain``
    shows it ("pending: team search over quota: ..."); None when there is none yet, or the
    latest placed it (a queued job's wait is not explained by where it was placed before)."""
    decisions = store.decisions(job_id=job_id)
    if not decisions:
        return None
    found = decisions[-1].explanation
    if found.get("status") == "placed":
        return None
    return str(found.get("summary") or found.get("status") or "") or None


def waiting_for(
    record: JobRecord, attempt: AttemptRecord | None, decision: str | None = None
) -> str:
    """What a job that has not started waits for, in words; a queued one's with the
    scheduler's latest ``decision`` (``scheduler_says``) when there is one."""
    state = record.state.value
    if state in ("pending", "requeued"):
        queued = "it is queued (pending)" if state == "pending" else "it is queued again (requeued)"
        if decision is None:
            return queued
        return f"{queued}: {decision.removeprefix('pending: ')}"
    if state == "admitted":
        return f"it is admitted to pool {record.pool}, being submitted"
    sid = f" as {attempt.submission_id}" if attempt else ""
    return f"it is dispatched to pool {record.pool}{sid}, waiting for Ray to start it"


def log_slice(data: bytes, offset: int) -> tuple[str, int]:
    """The log from byte ``offset`` to its last whole UTF-8 character, and where that ends
    (a follower asks from there next: a character cut in two by a read comes whole in the
    next). An offset past the end means another log than the one it was read from (meshctl's
    copy, once the pool has let the log go, keeps its head and tail only): from the start."""
    import codecs

    if offset > len(data):
        offset = 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data[offset:], final=False)
    cut, _ = decoder.getstate()  # the bytes of a character not whole yet
    return text, len(data) - len(cut)
