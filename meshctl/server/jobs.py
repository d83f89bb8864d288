"""The API server's verbs on jobs: submit, list, show, cancel, each for one principal.

The documents are the application layer's (``meshctl.app``, the ``-o json`` shapes), so a
remote ``meshctl jobs list`` prints what a local one does. A job a principal does not reach is
a 403; a job reference (id, name or unique id prefix) is looked up among the jobs they reach
only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from meshctl.errors import InvalidInput, InvalidRequestError, NotAllowedError
from meshctl.server.access import Verb, administrative, charged_team, reaches
from meshctl.server.errors import ApiError, forbidden, invalid, not_found
from meshctl.server.identity import Principal
from meshctl.server.planning import Planner
from meshctl.server.uploads import discard, unpack
from meshctl.state import AuditEntry, JobRecord, Role, Store

if TYPE_CHECKING:
    from meshctl.app.submitting import Answer


class FileBody(BaseModel):
    """A job file as its user named it, and its text."""

    model_config = ConfigDict(extra="forbid")

    path: str
    text: str


class SubmitBody(BaseModel):
    """``POST /v1/jobs``: one of the job document (``job``), a job file (``file``: its path and
    text, so that a problem names the file, the line and the field) or a command and the job
    flags given with it (``command``, ``flags``, as ``meshctl submit -- COMMAND``); the job's
    working directory (base64 of a gzipped tar); and how to submit it
    (``meshctl.app.submitting.SubmitRequest``)."""

    model_config = ConfigDict(extra="forbid")

    job: dict[str, Any] | None = None
    file: FileBody | None = None
    command: list[str] | None = None
    flags: dict[str, Any] = {}
    working_dir: str | None = None
    dry_run: bool = False
    explain: bool = False
    data_check: bool = True


def audit_entry(
    principal: Principal, action: str, target: str, outcome: str, **detail: Any
) -> AuditEntry:
    return AuditEntry(
        time.time(), principal.name, principal.role.value, action, target, outcome, detail
    )


def refuse(store: Store, principal: Principal, action: str, target: str, why: str) -> ApiError:
    """A 403, with the refusal written to the audit log."""
    store.append_audit(audit_entry(principal, action, target, "denied", reason=why))
    return forbidden(why)


def visible(store: Store, principal: Principal, **filters: Any) -> list[JobRecord]:
    """The jobs a principal reaches (their own; their teams' for a team-admin; all for a
    platform-admin), newest first."""
    if principal.role is Role.PLATFORM_ADMIN:
        found = store.list(JobRecord, **filters)
    else:
        found = store.list(JobRecord, owner=principal.name, **filters)
        if principal.role is Role.TEAM_ADMIN:
            teams = list(principal.teams)
            if "team" in filters:
                teams = [t for t in teams if t == filters["team"]]
            rest = {k: v for k, v in filters.items() if k != "team"}
            seen = {j.id for j in found}
            found += [j for j in store.list(JobRecord, team=teams, **rest) if j.id not in seen]
    return sorted(found, key=lambda j: -j.submitted_at_s)


def find(store: Store, principal: Principal, ref: str) -> JobRecord:
    """The job a reference names (``app.jobs.find``) among the jobs the principal reaches;
    one out of reach named by its id: 403 (``NotAllowedError``), none: 404."""
    from meshctl.app.jobs import find as found

    return found(store, ref, lambda job: reaches(principal, job), principal.name)


def parse_submission(raw: bytes) -> SubmitBody:
    try:
        return SubmitBody.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise invalid(f"{where}: {first['msg']}") from None


def light(body: SubmitBody) -> bool:
    """Whether checking the submission is a matter of a millisecond or two: a command, or a
    job document with no train loop or Serve app to import (that runs a subprocess), and no
    files to unpack (a job file's datasets may be listed at their sources)."""
    spec = body.job.get("spec") if body.job is not None else None
    code = isinstance(spec, dict) and (spec.get("train") or spec.get("serve"))
    return body.working_dir is None and body.file is None and not code


def submit(
    planner: Planner, store: Store, principal: Principal, body: SubmitBody, cap_bytes: int
) -> Answer:
    """Check and queue a job for the principal, charged to one of their teams
    (``meshctl.app.submitting.submit_job``). ``planner``: the server's mesh, catalogs and
    policies."""
    from contextlib import nullcontext

    from meshctl.app.submitting import JobFile, SubmitRequest, submit_job

    context = planner.context
    work = unpack(body.working_dir, context.home, cap_bytes) if body.working_dir else None
    request = SubmitRequest(
        job=body.job,
        file=JobFile(body.file.path, body.file.text) if body.file else None,
        command=tuple(body.command or ()),
        flags=body.flags,
        working_dir=work,
        dry_run=body.dry_run,
        explain=body.explain,
        data_check=body.data_check,
    )
    try:
        planning = planner.planning()
        return submit_job(
            context, request, planning, lambda: nullcontext(store),
            charge=lambda asked: _charged(principal, asked), owner=principal.name,
            bound=lambda now: planner.bound(planning, now),
        )  # fmt: skip
    except PermissionError as err:
        raise forbidden(str(err)) from None
    finally:
        discard(work)


def _charged(principal: Principal, asked: str | None) -> str | None:
    try:
        return charged_team(principal, asked)
    except ValueError as err:
        raise InvalidRequestError(str(err)) from None


def rows(store: Store, principal: Principal, state: str | None, team: str | None) -> list[Any]:
    """``GET /v1/jobs``: the jobs the principal reaches, as ``jobs list -o json`` rows."""
    from meshctl.app.jobs import checked_state
    from meshctl.app.jobs import rows as rows_of

    checked_state(state, "state")  # a 422, as every InvalidInput
    filters = {k: v for k, v in {"state": state, "team": team}.items() if v is not None}
    return rows_of(store, visible(store, principal, **filters))


def show(home: Path, store: Store, principal: Principal, ref: str) -> dict[str, Any]:
    from meshctl.app.jobs import show as shown

    return shown(home, store, find(store, principal, ref))


def cancel(context: Any, store: Store, principal: Principal, ref: str) -> dict[str, Any]:
    """``POST /v1/jobs/{ref}/cancel``: one's own job; a team's (team-admin); any
    (platform-admin). Cancelling another's job is audited with the cancellation."""
    from meshctl.app.jobs import cancel_one

    try:
        job = find(store, principal, ref)
    except NotAllowedError as err:
        raise refuse(store, principal, Verb.JOBS_CANCEL, ref, str(err)) from None
    audited = administrative(principal, Verb.JOBS_CANCEL, job)
    entry = audit_entry(principal, Verb.JOBS_CANCEL, job.id, "allowed", owner=job.owner)
    row = cancel_one(store, job.id, by=principal.name, also=[entry] if audited else [])
    if audited and not row["cancelled"]:
        note = f"already {row['state']}"
        store.append_audit(
            audit_entry(principal, Verb.JOBS_CANCEL, job.id, "allowed", owner=job.owner, note=note)
        )
    if row["cancelled"]:
        context.nudge()
    return row


def logs(
    planner: Planner,
    store: Store,
    principal: Principal,
    ref: str,
    number: int | None,
    offset: int = 0,
) -> Any:
    """``GET /v1/jobs/{ref}/logs``: the log of the attempt asked for (else the latest), from its
    pool or meshctl's copy, from byte ``offset`` on (``log_slice``); ``text`` null (and why)
    before the job started. ``offset`` in the answer: where the next read goes on."""
    from meshctl.app.logs import chosen, log_slice, scheduler_says, text_of, waiting_for

    record = find(store, principal, ref)
    try:
        attempt = chosen(store, record.id, number)
    except InvalidInput as err:
        raise not_found(str(err)) from None
    if attempt is None:
        why = waiting_for(record, None, scheduler_says(store, record.id))
        return {"id": record.id, "attempt": 0, "text": None, "offset": 0, "waiting_for": why}
    text = text_of(planner.context, planner.planning()[0], attempt)
    if text is None:
        raise not_found(
            f"job {record.id}, attempt {attempt.number}: no log: pool {attempt.pool} does not "
            "have it (is it up?) and meshctl kept no copy"
        )
    said, end = log_slice(text, offset)
    return {"id": record.id, "attempt": attempt.number, "text": said, "offset": end,
            "waiting_for": None}  # fmt: skip


def explain(context: Any, store: Store, principal: Principal, ref: str) -> Any:
    """``GET /v1/jobs/{ref}/explain``: ``meshctl explain JOB -o json``."""
    from meshctl.app.explain import stored

    return stored(context, store, find(store, principal, ref))
