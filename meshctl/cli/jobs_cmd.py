"""``meshctl jobs list|show|logs|cancel|wait``: the jobs the controller keeps.

A job is named by its id, by its name (when one job has it), or by a prefix of its id that only
one job has; an exact id or name wins over a prefix. ``wait`` exits 0 when every job succeeded,
1 when one failed or was cancelled, 124 when the time ran out (as timeout(1)), so scripts can
chain on it. ``cancel`` takes several jobs: an unknown one is exit 2 and nothing is cancelled;
one that already finished is said so, and is not an error.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.errors import EXIT_TIMEOUT, CommandError, InvalidRequestError
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from meshctl.cli.remote import Remote
    from meshctl.state import AttemptRecord, AuditEntry, Event, JobRecord, Store


def job_path(ref: str, *rest: str) -> str:
    from meshctl.cli.remote import job_path

    return job_path(ref, *rest)


app = typer.Typer(help="Submitted jobs: list, inspect, follow, cancel, wait.", no_args_is_help=True)

JobArgument = Annotated[
    str, typer.Argument(help="The job id, its name, or a unique prefix of its id.")
]


def find(store: Store, ref: str) -> JobRecord:
    """The job with this id; else the one with this name; else the only one whose id starts
    with it. An exact id or name always wins over a prefix of another job's id. Each is one
    indexed read: the key, the name's index, and the keys just after ``ref`` (the ids that
    start with it come first there); none lists every job."""
    from meshctl.state import JobRecord

    exact = store.get(JobRecord, ref)
    if exact is not None:
        return exact
    named = store.list(JobRecord, name=ref)
    if len(named) > 1:
        ids = ", ".join(j.id for j in sorted(named, key=lambda j: -j.submitted_at_s)[:5])
        raise InvalidRequestError(f"job: {len(named)} jobs are named {ref!r} ({ids}); give an id")
    if named:
        return named[0]
    after = store.list(JobRecord, after=ref, limit=PREFIX_SHOWN + 1) if ref else []
    matches = [j for j in after if j.id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise InvalidRequestError(f"job: no job with id or name {ref!r} (meshctl jobs list)")
    ids = ", ".join(j.id for j in matches[:PREFIX_SHOWN])
    many = f"more than {PREFIX_SHOWN}" if len(matches) > PREFIX_SHOWN else str(len(matches))
    raise InvalidRequestError(f"job: {ref!r} names {many} jobs ({ids}); give more of it")


PREFIX_SHOWN = 5  # ids an ambiguous prefix names in its error


def _row(job: JobRecord, attempt: AttemptRecord | None, now: float) -> dict[str, Any]:
    """A job as data (``shapes.JobRow``); ``now`` is for people's tables (``age_s``)."""
    from meshctl.cli.jobview import nodes_of
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


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    output: OutputOption = Output.table,
) -> None:
    """Every job, newest first: state, pool, nodes, attempt."""
    from meshctl.cli import render
    from meshctl.controller.world import latest_attempts
    from meshctl.state import AttemptRecord, JobRecord, JobState

    if state is not None and state not in {s.value for s in JobState}:
        raise InvalidRequestError(
            f"--state: expected one of {', '.join(s.value for s in JobState)}, got {state!r}"
        )
    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        render.emit(remote.call("GET", "/v1/jobs", state=state, team=team), COLUMNS, output)
        return
    with context.store() as store:
        filters: dict[str, Any] = {"state": state, "team": team}
        filters = {k: v for k, v in filters.items() if v is not None}
        jobs = sorted(store.list(JobRecord, **filters), key=lambda j: -j.submitted_at_s)
        latest = latest_attempts(store.list(AttemptRecord, job_id=[j.id for j in jobs]))
    now = time.time()
    rows = [_row(job, latest.get(job.id), now) for job in jobs]
    render.emit(rows, COLUMNS, output)


COLUMNS = [
    Column("id", "Job"),
    Column("state", "State"),
    Column("team", "Team"),
    Column("priority", "Prio", "right"),
    Column("pool", "Pool"),
    Column("nodes", "Nodes"),
    Column("attempt", "Try", "right"),
    Column("age_s", "Age (s)", "right"),
]


@app.command("show")
def show(ctx: typer.Context, job: JobArgument, output: OutputOption = Output.table) -> None:
    """One job: what it asks for, its attempts (and why the last one failed), events, and the
    scheduler's latest decision."""
    from meshctl.cli import jobtraining, jobview, render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # the document; as YAML for people
        said = remote.call("GET", job_path(job))
        render.emit_data(said, Output.yaml if output is Output.table else output)
        return
    with context.store() as store:
        record = find(store, job)
        data, attempts, events = show_data(context.home, store, record)
    if output is not Output.table:
        render.emit_data(data, output)
        return
    _show_job(record, data, attempts)
    service = data.get("service")
    if service is not None:
        render.say(f"  service: {render.esc(jobview.service_text(service))}")
        if service["message"]:
            render.say(f"    Serve: {render.esc(service['message'])}")
    for loan in data.get("loans", []):
        render.say(f"  loan: {render.esc(jobview.loan_text(loan))}")
    jobtraining.show_training(data.get("training"))
    jobtraining.show_export(data.get("export"))
    for e in events:
        render.say(f"  {render.clock(e.at_s)} {e.kind}: {render.esc(e.message)}")


def show_data(
    home: Path, store: Store, record: JobRecord
) -> tuple[dict[str, Any], list[AttemptRecord], list[Event]]:
    """One job as data (``shapes.JobDetail``), with its attempts and events: for ``jobs
    show`` and the API server alike."""
    from meshctl.cli import jobtraining, jobview
    from meshctl.controller.services import service_of
    from meshctl.controller.serving_apply import serve_ports
    from meshctl.state import LoanRecord

    attempts = jobview.attempts_of(store, record.id)
    events = store.events(job_id=record.id)
    decisions = store.decisions(job_id=record.id)
    loans = [
        x
        for x in store.list(LoanRecord)
        if record.id in (x.lender, x.borrower, service_of(x.borrower))
    ]
    decision = jobview.decision_now(decisions[-1] if decisions else None, events)
    data = {
        **_row(record, attempts[-1] if attempts else None, time.time()),
        **jobview.data(record.spec, attempts, events, decision),
        "policy_hash": decisions[-1].policy_hash or None if decisions else None,
    }
    said = [{"at_s": e.at_s, "kind": e.kind, "message": e.message} for e in events]
    recorded = jobtraining.recorded(record, attempts)
    if recorded is not None:  # a train job: what it recorded beside its checkpoints
        data["training"] = jobtraining.training_data(recorded, said)
        exported = jobtraining.export_data(recorded)
        if exported is not None:
            data["export"] = exported
    pool = attempts[-1].pool if attempts else None
    port = serve_ports(home).get(pool) if pool else None
    service = jobview.service_data(record.spec, attempts, port)
    if service is not None:
        data["service"] = service
    if loans:
        now = time.time()
        data["loans"] = [
            jobview.loan_data(x, now) for x in sorted(loans, key=lambda x: x.opened_at_s)
        ]
    return data, attempts, events


def _show_job(record: JobRecord, data: dict[str, Any], attempts: list[AttemptRecord]) -> None:
    from meshctl.cli import jobview, render

    body = record.spec.get("spec", {})
    nodes = int(body.get("resources", {}).get("nodes") or 1)
    render.say(
        f"[bold]{render.esc(record.id)}[/] ({render.esc(record.name)}): {record.state.value}"
    )
    lines = {
        "kind": body.get("kind"),
        "team": record.team,
        "priority": f"{record.priority}"
        + (f" ({body['priority_class']})" if body.get("priority_class") else ""),
        "pool": record.pool,
        "nodes": ", ".join(jobview.nodes_of(attempts[-1] if attempts else None)),
        "entrypoint": body.get("entrypoint"),
        "train": jobview.train_text(body["train"], nodes) if body.get("train") else None,
        "resources": jobview.resources_text(body.get("resources", {})),
        "decision": data["decision"],
        "policies": data["policy_hash"],
    }
    for key, value in lines.items():
        if value:
            render.say(f"  {key}: {render.esc(value)}")
    for a in attempts:
        where = f" ({render.esc(', '.join(jobview.nodes_of(a)))})" if jobview.nodes_of(a) else ""
        render.say(f"  attempt {a.number}: {a.state} on {a.pool}{where} as {a.submission_id}")
        if a.reason and a.state != "succeeded":
            _show_reason(record.id, a, a is attempts[-1])


def _show_reason(job_id: str, attempt: AttemptRecord, latest: bool) -> None:
    """Ray's message, its first lines only: the rest is in the job's log."""
    from meshctl.cli import jobview, render

    first, more = jobview.error_excerpt(attempt.reason)
    for line in first:
        render.say(f"    {render.esc(line)}")
    if more:
        which = "" if latest else f" --attempt {attempt.number}"
        render.say(f"    ... {more} more lines: meshctl jobs logs {job_id}{which}")


@app.command("logs")
def logs(
    ctx: typer.Context,
    job: JobArgument,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Wait for it to start if queued; keep printing until it ends."
        ),
    ] = False,
    attempt: Annotated[int | None, typer.Option(help="Attempt number (default: latest).")] = None,
) -> None:
    """The job's output (its driver log): from its pool while the pool has it, else from the
    copy meshctl keeps (after the job ends, after down; at most its first 512 KiB and last
    1.25 MiB)."""
    from meshctl.cli import joblogs

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        if follow:
            _follow_remote(remote, job, attempt)
            return
        said = remote.call("GET", job_path(job, "logs"), attempt=attempt)
        if said["text"] is None:
            from meshctl.cli import render

            render.note(f"job {said['id']} has not started: {said['waiting_for']}")
        else:
            sys.stdout.write(said["text"])
        return
    with context.store() as store:
        record = find(store, job)
        if follow:
            joblogs.Follower(context, store, record.id, attempt).run()
        else:
            joblogs.show(context, store, record, attempt)


def _follow_remote(remote: Remote, job: str, attempt: int | None) -> None:
    """``logs --follow`` through the API server: every second, what the log gained since the
    last read (from the byte offset the server gave), until the job has ended and its last
    words are out (or Ctrl-C). A new attempt's log is printed from its start."""
    from meshctl.controller.decide import FINISHED
    from meshctl.state import JobState

    job_id = str(remote.call("GET", job_path(job))["id"])
    logs, number, offset = f"/v1/jobs/{job_id}/logs", None, 0
    while True:
        state = JobState(remote.call("GET", f"/v1/jobs/{job_id}")["state"])
        said = remote.call("GET", logs, attempt=attempt, offset=offset)
        if said["attempt"] != number and offset:  # read at the last attempt's offset
            said = remote.call("GET", logs, attempt=said["attempt"] or attempt, offset=0)
        number, offset = said["attempt"], said["offset"]
        sys.stdout.write(said["text"] or "")
        sys.stdout.flush()
        if state in FINISHED:
            return
        time.sleep(1.0)


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    jobs: Annotated[list[str], typer.Argument(help="Job ids, names or unique id prefixes.")],
    output: OutputOption = Output.table,
) -> None:
    """Cancel jobs: queued, they never run; running, the controller stops them. A job that
    already finished is left as it is (not an error); an unknown job cancels nothing (exit 2)."""
    from meshctl.cli import render
    from meshctl.controller import daemon

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # each reference checked first: an unknown one cancels nothing
        ids = [remote.call("GET", job_path(ref))["id"] for ref in jobs]
        rows = [remote.call("POST", f"/v1/jobs/{i}/cancel") for i in dict.fromkeys(ids)]
    else:
        with context.store() as store:
            ids = list(dict.fromkeys(find(store, ref).id for ref in jobs))  # all known, or none
            rows = [cancel_one(store, job_id) for job_id in ids]
        if any(r["cancelled"] for r in rows):
            daemon.nudge(context.home)  # stop their Ray jobs now, not next interval
    if output is not Output.table:
        render.emit_data(rows, output)
        return
    for row in rows:
        if row["cancelled"]:
            render.plain(f"{row['id']} cancelled (was {row['previous_state']})")
        else:
            render.plain(f"{row['id']} already {row['state']}; nothing to cancel")


def cancel_one(
    store: Store, job_id: str, by: str = "user", also: Sequence[AuditEntry] = ()
) -> dict[str, Any]:
    """Cancel one job (``shapes.CancelRow``); the controller may update it meanwhile: read
    again and retry. ``by``: who, as its event says; ``also``: audit entries written with
    the cancellation (none when there is nothing to cancel)."""
    from dataclasses import replace

    from meshctl.controller.decide import FINISHED
    from meshctl.state import ConflictError, Event, JobRecord, JobState

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


@app.command("wait")
def wait(
    ctx: typer.Context,
    jobs: Annotated[list[str], typer.Argument(help="Job ids, names or unique id prefixes.")],
    timeout: Annotated[
        str, typer.Option(help="Give up after this long (seconds, or 90s, 10m, 2h).")
    ] = "1h",
    output: OutputOption = Output.table,
) -> None:
    """Wait until the jobs finish: exit 0 if all succeeded, 1 if any failed or was cancelled,
    124 if the timeout came first (as timeout(1))."""
    from meshctl.cli import render
    from meshctl.controller.decide import FINISHED
    from meshctl.state import JobRecord, JobState

    timeout_s = duration_flag("--timeout", timeout)
    deadline = time.monotonic() + timeout_s
    context = app_context(ctx)
    remote = context.remote()
    with contextlib.ExitStack() as stack:
        if remote is None:
            store = stack.enter_context(context.store())
            ids = list(dict.fromkeys(find(store, ref).id for ref in jobs))

            def read() -> dict[str, JobState]:
                records = [store.get(JobRecord, i) for i in ids]
                return {r.id: r.state for r in records if r is not None}
        else:
            found = [remote.call("GET", job_path(ref)) for ref in jobs]
            ids = list(dict.fromkeys(str(f["id"]) for f in found))

            def read() -> dict[str, JobState]:
                said = [remote.call("GET", f"/v1/jobs/{i}") for i in ids]
                return {str(d["id"]): JobState(d["state"]) for d in said}

        with render.progress(f"waiting for {', '.join(ids)}") as step:
            while True:
                states = read()
                done = all(s in FINISHED for s in states.values())
                if done or time.monotonic() > deadline:
                    break
                step(_states(states))
                time.sleep(0.5)
    if output is not Output.table:
        render.emit_data([{"id": k, "state": v.value} for k, v in states.items()], output)
    else:
        for job_id, state in states.items():
            render.plain(f"{job_id} {state.value}")
    if not done:
        raise CommandError(
            f"timed out after {timeout_s:g} s: {_states(states)}", exit_code=EXIT_TIMEOUT
        )
    failed = {k: v for k, v in states.items() if v is not JobState.SUCCEEDED}
    if failed:
        raise CommandError(f"{len(failed)} of {len(states)} did not succeed: {_states(failed)}")


def _states(states: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v.value}" for k, v in states.items())
