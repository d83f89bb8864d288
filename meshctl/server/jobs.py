"""The API server's verbs on jobs: submit, list, show, cancel, each for one principal.

The documents are the application layer's (``meshctl.app``, the ``-o json`` shapes), so a
remote ``meshctl jobs list`` prints what a local one does. A job a principal does not reach is
a 403; a job reference (id, name or unique id prefix) is looked up among the jobs they reach
only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from meshctl.errors import InvalidInput
from meshctl.server.access import Verb, administrative, charged_team, reaches
from meshctl.server.errors import ApiError, forbidden, invalid, not_found
from meshctl.server.identity import Principal
from meshctl.server.planning import Planner
from meshctl.server.uploads import discard, unpack
from meshctl.state import AuditEntry, JobRecord, Role, Store


class SubmitBody(BaseModel):
    """``POST /v1/jobs``: the job document as its file holds it, and its working directory
    (base64 of a gzipped tar; ``meshctl submit`` sends it)."""

    model_config = ConfigDict(extra="forbid")

    job: dict[str, Any]
    working_dir: str | None = None
    dry_run: bool = False
    explain: bool = False


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
    """The job a reference names: its id (a job out of reach: 403); else, among the jobs the
    principal reaches, the one with that name or the only one whose id starts with it."""
    exact = store.get(JobRecord, ref)
    if exact is not None:
        if not reaches(principal, exact):
            raise forbidden(f"job {ref}: {principal.name} may not see it (not theirs)")
        return exact
    named = visible(store, principal, name=ref)  # through the name's index
    if len(named) > 1:
        ids = ", ".join(j.id for j in named[:5])
        raise invalid(f"job: {len(named)} jobs are named {ref!r} ({ids}); give an id")
    matches = named or _by_prefix(store, principal, ref)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise not_found(f"job: no job with id or name {ref!r}")
    ids = ", ".join(j.id for j in matches[:5])
    many = "more than 5" if len(matches) > 5 else str(len(matches))
    raise invalid(f"job: {ref!r} names {many} jobs ({ids}); give more of it")


def _by_prefix(store: Store, principal: Principal, ref: str, most: int = 6) -> list[JobRecord]:
    """Up to ``most`` of the jobs the principal reaches whose ids start with ``ref``: the keys
    just after ``ref``, page by page while they start with it; never every job."""
    found: list[JobRecord] = []
    after = ref
    while ref and len(found) < most:
        page = store.list(JobRecord, after=after, limit=100)
        starting = [j for j in page if j.id.startswith(ref)]
        found += [j for j in starting if reaches(principal, j)]
        if len(starting) < len(page) or len(page) < 100:
            break  # past the prefix, or past the last job
        after = page[-1].id
    return found[:most]


def parse_submission(raw: bytes) -> SubmitBody:
    try:
        return SubmitBody.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise invalid(f"{where}: {first['msg']}") from None


def light(body: SubmitBody) -> bool:
    """Whether checking the submission is a matter of a millisecond or two: no files to
    unpack, and no train loop or Serve app to import (that runs a subprocess)."""
    spec = body.job.get("spec")
    code = isinstance(spec, dict) and (spec.get("train") or spec.get("serve"))
    return body.working_dir is None and not code


def submit(
    planner: Planner, store: Store, principal: Principal, body: SubmitBody, cap_bytes: int
) -> dict[str, Any]:
    """Check and queue a job for the principal, charged to one of their teams; what ``meshctl
    submit -o json`` prints. ``planner``: the server's mesh, catalogs and policies."""
    from meshctl.app.admission import admit, flag_error, submitted
    from meshctl.controller.submit import enqueue
    from meshctl.model import Job

    spec = body.job.get("spec")
    if not isinstance(spec, dict):
        raise invalid("job.spec: expected a mapping (a Job document's spec)")
    asked = spec.get("team")
    if asked is not None and not isinstance(asked, str):
        raise invalid(f"job.spec.team: expected a team name (a string), got {asked!r}")
    try:
        team = charged_team(principal, asked)
    except PermissionError as err:
        raise forbidden(str(err)) from None
    except ValueError as err:
        raise invalid(str(err)) from None
    document = {**body.job, "spec": {**spec, "team": team}}
    try:
        job = Job.model_validate(document)
    except ValidationError as err:
        raise invalid(f"job.{flag_error(err, Job, {})}") from None
    context = planner.context
    work = unpack(body.working_dir, context.home, cap_bytes) if body.working_dir else None
    try:
        planning = planner.planning()
        job, admission = admit(
            context, job, work, planning, lambda now: planner.bound(planning, now)
        )
        record = None
        if not body.dry_run:
            record = enqueue(store, job, admission, work, context.home, time.time(),
                             owner=principal.name, keep_files=context.shares_store())  # fmt: skip
    except InvalidInput as err:
        raise invalid(str(err)) from None
    finally:
        discard(work)
    if record is not None:
        context.nudge()
    return submitted(job, admission, record, body.dry_run or body.explain)


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
    except ApiError as err:
        if err.status == 403:
            raise refuse(store, principal, Verb.JOBS_CANCEL, ref, err.message) from None
        raise
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
