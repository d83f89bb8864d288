"""What a user does with jobs, for the CLI and the API server alike: find one by a reference
(its id, its name when one job has it, or a prefix of its id that only one job has; an exact
id or name wins over a prefix), list them as rows, show one as a document, cancel one.

The documents are the ``-o json`` shapes (``meshctl.app.shapes``): the CLI prints them, the
API server answers with them, so a command prints the same in local and server mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import CommandError, InvalidRequestError, NotAllowedError, NotFoundError

if TYPE_CHECKING:
    from meshctl.state import AttemptRecord, AuditEntry, JobRecord, Store

PREFIX_SHOWN = 5  # ids an ambiguous prefix names in its error
PREFIX_PAGE = 100  # keys read at a time while looking for ids that start with a prefix


def find(
    store: Store,
    ref: str,
    reaches: Callable[[JobRecord], bool] | None = None,
    who: str = "",
) -> JobRecord:
    """The job with this id; else the one with this name; else the only one whose id starts
    with it. An exact id or name always wins over a prefix of another job's id. ``reaches``:
    the jobs the caller may touch (None: every job): a job out of reach named by its id is
    refused (``who`` may not see it), and names and prefixes are looked up among the jobs in
    reach only. Each is an indexed read: the key, the name's index, and the keys just after
    ``ref`` page by page while they start with it (the ids that start with it come first
    there); none lists every job."""
    from meshctl.state import JobRecord

    exact = store.get(JobRecord, ref)
    if exact is not None:
        if reaches is not None and not reaches(exact):
            raise NotAllowedError(f"job {ref}: {who} may not see it (not theirs)")
        return exact
    named = [j for j in store.list(JobRecord, name=ref) if reaches is None or reaches(j)]
    if len(named) > 1:
        newest = sorted(named, key=lambda j: -j.submitted_at_s)[:PREFIX_SHOWN]
        ids = ", ".join(j.id for j in newest)
        raise InvalidRequestError(f"job: {len(named)} jobs are named {ref!r} ({ids}); give an id")
    matches = named or _by_prefix(store, ref, reaches)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFoundError(f"job: no job with id or name {ref!r} (meshctl jobs list)")
    ids = ", ".join(j.id for j in matches[:PREFIX_SHOWN])
    many = f"more than {PREFIX_SHOWN}" if len(matches) > PREFIX_SHOWN else str(len(matches))
    raise InvalidRequestError(f"job: {ref!r} names {many} jobs ({ids}); give more of it")


def _by_prefix(
    store: Store, ref: str, reaches: Callable[[JobRecord], bool] | None
) -> list[JobRecord]:
    """Up to ``PREFIX_SHOWN + 1`` of the jobs in reach whose ids start with ``ref``: the keys
    just after ``ref``, a page at a time while they start with it; never every job."""
    from meshctl.state import JobRecord

    most, after = PREFIX_SHOWN + 1, ref
    found: list[JobRecord] = []
    while ref and len(found) < most:
        page = store.list(JobRecord, after=after, limit=PREFIX_PAGE)
        starting = [j for j in page if j.id.startswith(ref)]
        found += [j for j in starting if reaches is None or reaches(j)]
        if len(starting) < len(page) or len(page) < PREFIX_PAGE:
            break  # past the prefix, or past the last job
        after = page[-1].id
    return found[:most]


def row(job: JobRecord, attempt: AttemptRecord | None, now: float) -> dict[str, Any]:
    """A job as data (``shapes.JobRow``); ``now`` is for people's tables (``age_s``)."""
    from meshctl.app.jobdata import nodes_of
    from meshctl.jsondata import timestamp

    return {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "state": job.state.value,
        "priority": job.priority,
        "pool": job.pool or None,
        "nodes": nodes_of(attempt),
        "attempt": attempt.number if attempt else 0,
        "submitted_at": timestamp(job.submitted_at_s),
        "updated_at": timestamp(job.updated_at_s),
        "age_s": round(now - job.submitted_at_s, 1),
    }


def rows(store: Store, jobs: Sequence[JobRecord]) -> list[dict[str, Any]]:
    """``jobs`` as ``jobs list`` rows, each with its latest attempt."""
    from meshctl.state.records import AttemptRecord, latest_attempts

    latest = latest_attempts(store.list(AttemptRecord, job_id=[j.id for j in jobs]))
    now = time.time()
    return [row(job, latest.get(job.id), now) for job in jobs]


def checked_state(state: str | None, field: str) -> str | None:
    """``state`` when it names a job state (or is None); else ``InvalidRequestError`` naming
    ``field`` (the CLI's ``--state``, the API's ``state``) and the states there are."""
    from meshctl.state import JobState

    states = [s.value for s in JobState]
    if state is not None and state not in states:
        raise InvalidRequestError(f"{field}: expected one of {', '.join(states)}, got {state!r}")
    return state


def listed(
    store: Store, state: str | None, team: str | None, limit: int = 0
) -> list[dict[str, Any]]:
    """Every job (in ``state``, of ``team``), newest first, as rows; only the newest
    ``limit`` when it is not 0 (the rest are never turned into rows)."""
    from meshctl.state import JobRecord

    jobs = sorted(store.list(JobRecord, **_filters(state, team)), key=lambda j: -j.submitted_at_s)
    return rows(store, jobs[:limit] if limit else jobs)


def counted(store: Store, state: str | None, team: str | None) -> int:
    """How many jobs ``listed`` would give without a limit (no job is read whole)."""
    from meshctl.state import JobRecord

    return len(store.versions(JobRecord, **_filters(state, team)))


def _filters(state: str | None, team: str | None) -> dict[str, Any]:
    checked_state(state, "--state")
    filters = {"state": state, "team": team}
    return {k: v for k, v in filters.items() if v is not None}


def show(home: Path, store: Store, record: JobRecord) -> dict[str, Any]:
    """One job as data (``shapes.JobDetail``): ``jobs show`` and the API server alike."""
    from meshctl.app import jobdata, training
    from meshctl.controller.deciding.services import service_of
    from meshctl.controller.serving_apply import serve_ports
    from meshctl.state import LoanRecord

    attempts = jobdata.attempts_of(store, record.id)
    events = store.events(job_id=record.id)
    decisions = store.decisions(job_id=record.id)
    loans = [
        x
        for x in store.list(LoanRecord)
        if record.id in (x.lender, x.borrower, service_of(x.borrower))
    ]
    decision = jobdata.decision_now(decisions[-1] if decisions else None, events)
    data = {
        **row(record, attempts[-1] if attempts else None, time.time()),
        **jobdata.data(record.spec, attempts, events, decision),
        "policy_hash": decisions[-1].policy_hash or None if decisions else None,
    }
    said = [{"at_s": e.at_s, "kind": e.kind, "message": e.message} for e in events]
    recorded = training.recorded(record, attempts)
    if recorded is not None:  # a train job: what it recorded beside its checkpoints
        data["training"] = training.training_data(recorded, said)
        exported = training.export_data(recorded)
        if exported is not None:
            data["export"] = exported
    pool = attempts[-1].pool if attempts else None
    port = serve_ports(home).get(pool) if pool else None
    service = jobdata.service_data(record.spec, attempts, port)
    if service is not None:
        data["service"] = service
    if loans:
        now = time.time()
        data["loans"] = [
            jobdata.loan_data(x, now) for x in sorted(loans, key=lambda x: x.opened_at_s)
        ]
    return data


def cancel_one(
    store: Store, job_id: str, by: str = "user", also: Sequence[AuditEntry] = ()
) -> dict[str, Any]:
    """Cancel one job (``shapes.CancelRow``); the controller may update it meanwhile: read
    again and retry. ``by``: who, as its event says; ``also``: audit entries written with
    the cancellation (none when there is nothing to cancel)."""
    from dataclasses import replace

    from meshctl.state import ConflictError, Event, JobRecord, JobState
    from meshctl.state.records import FINISHED

    for _ in range(10):
        record = store.get(JobRecord, job_id)
        if record is None:
            raise CommandError(f"job {job_id}: gone from the store while cancelling")
        was = record.state.value
        if record.state in FINISHED:
            return {"id": job_id, "state": was, "previous_state": was, "cancelled": False}
        now = time.time()
        event = Event(
            now, "job.cancelled", job_id, f"cancelled by {by}", {"from": was, "to": "cancelled"}
        )
        try:
            store.update(
                replace(record, state=JobState.CANCELLED, updated_at_s=now),
                expected_version=record.version,
                events=[event, *also],
            )
        except ConflictError:
            continue
        return {"id": job_id, "state": "cancelled", "previous_state": was, "cancelled": True}
    raise CommandError(f"job {job_id}: kept changing while cancelling; try again")
